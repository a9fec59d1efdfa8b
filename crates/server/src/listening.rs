//! The listening sockets: where they come from, decided once at start ([`ListenerSource`]), and
//! the listeners this process serves, assembled from them in one place ([`open`]): the site's,
//! then the metrics listener's.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};

use fastpath_drivers::{bind_listeners, bind_listeners_with, ListenAddr, Listeners};

use crate::config::Config;
use crate::reload;

/// Where this process's listening sockets come from.
pub(crate) enum ListenerSource {
    /// None were inherited: the configured addresses are bound here.
    Bound,
    /// systemd passed them (socket activation), each with its label for messages: they are
    /// served instead of `listen`. After a reload, `handed` holds the other sockets the server
    /// this process replaces handed over (its metrics listener's).
    Activated {
        sockets: Vec<(OwnedFd, String)>,
        handed: Option<Vec<(OwnedFd, String)>>,
    },
    /// The server this process replaces handed them over (a reload or an upgrade), each named
    /// by the address it was bound for: the addresses still configured are served on them, the
    /// new ones bound, and the sockets of those no longer configured closed.
    HandedOver(Vec<(OwnedFd, String)>),
}

impl ListenerSource {
    /// Decides from the sockets systemd passed to this process (`activated`) and those the
    /// server it replaces handed over (`handed`).
    pub(crate) fn decide(
        activated: Vec<(OwnedFd, String)>,
        handed: Vec<(OwnedFd, String)>,
    ) -> ListenerSource {
        // Sockets systemd passed to the first server stay systemd's across reloads.
        if handed.iter().any(|(_, name)| name == reload::SYSTEMD_NAME) {
            let (systemds, others): (Vec<_>, Vec<_>) = handed
                .into_iter()
                .partition(|(_, name)| name == reload::SYSTEMD_NAME);
            let sockets = systemds
                .into_iter()
                .map(|(fd, _)| {
                    let label = format!("systemd socket fd {}", fd.as_raw_fd());
                    (fd, label)
                })
                .collect();
            ListenerSource::Activated {
                sockets,
                handed: Some(others),
            }
        } else if !handed.is_empty() {
            ListenerSource::HandedOver(handed)
        } else if !activated.is_empty() {
            ListenerSource::Activated {
                sockets: activated,
                handed: None,
            }
        } else {
            ListenerSource::Bound
        }
    }
}

/// The listeners this process serves, and what the rest of the start needs to know of them.
pub(crate) struct Served {
    pub(crate) listeners: Listeners,
    /// How many of them are the site's: the metrics listener, if any, comes after them.
    site: usize,
    /// systemd passed the site's: every worker holds a copy of the same sockets.
    activated: bool,
    /// The name each listener is handed over under on a reload: the configured address or
    /// systemd's for the site's, its own for the metrics listener (so that a successor under
    /// socket activation does not take it for one of systemd's).
    names: Vec<String>,
}

impl Served {
    /// What the server says it does once ready (systemd's `STATUS=`): the addresses the site
    /// listens on and `serving`, the model and its shape.
    pub(crate) fn status(&self, serving: &str) -> String {
        let addrs: Vec<String> = self.listeners.local_addrs[..self.site]
            .iter()
            .map(ToString::to_string)
            .collect();
        format!("serving on {} ({serving})", addrs.join(", "))
    }

    /// For each of the site's listeners, its place in `config.listen`, which its options
    /// (`tls`, `proxy_protocol`, `redirect_to_https`) are kept by: its own index when bound
    /// here or handed over, the configured address it listens on when systemd passed it
    /// (`None` for a socket no configured address names).
    pub(crate) fn configured_places<'c>(
        &'c self,
        config: &'c Config,
    ) -> impl Iterator<Item = Option<usize>> + 'c {
        self.listeners.local_addrs[..self.site]
            .iter()
            .enumerate()
            .map(move |(i, local)| {
                if self.activated {
                    config.listen.iter().position(|addr| addr == local)
                } else {
                    Some(i)
                }
            })
    }

    /// The metrics listener's place among the listeners and its address, if there is one.
    pub(crate) fn metrics(&self) -> Option<(usize, SocketAddr)> {
        let addr = self.listeners.local_addrs.get(self.site)?;
        Some((self.site, addr.tcp().expect("the metrics listener is TCP")))
    }

    /// Duplicates of every listening socket, each with the name it is handed over under, for
    /// a successor on a reload or an upgrade. systemd's are passed once each (every worker
    /// holds a copy of the same socket).
    pub(crate) fn handover(&self) -> io::Result<Vec<(OwnedFd, String)>> {
        let sets = if self.activated {
            1
        } else {
            self.listeners.per_worker.len()
        };
        let mut handover = Vec::new();
        for set in self.listeners.per_worker.iter().take(sets) {
            for (fd, name) in set.iter().zip(&self.names) {
                handover.push((fd.try_clone()?, name.clone()));
            }
        }
        Ok(handover)
    }
}

/// Opens the listeners, `sets` sockets each (one a listener set): the site's from `source`,
/// then the metrics listener if one is configured; handed-over sockets that no configured
/// address takes are closed. Says where the site listens, `serving` naming the model and its
/// shape (`epoll, 4 workers`).
pub(crate) fn open(
    config: &Config,
    source: ListenerSource,
    sets: usize,
    serving: &str,
) -> io::Result<Served> {
    let activated = matches!(source, ListenerSource::Activated { .. });
    let (listeners, labels, mut handed) = match source {
        ListenerSource::Bound => (bind_site(config, sets), Vec::new(), None),
        ListenerSource::Activated { sockets, handed } => {
            // The socket unit says where to listen: `listen` is not bound as well, as a server
            // that also bound its own addresses would hold ports the unit does not know of.
            tracing::info!(
                "socket activation: serving the {} socket{} systemd passed; `listen` is not used",
                sockets.len(),
                if sockets.len() == 1 { "" } else { "s" }
            );
            let labels = sockets.iter().map(|(_, label)| label.clone()).collect();
            (Listeners::from_inherited(sockets, sets), labels, handed)
        }
        ListenerSource::HandedOver(mut sockets) => {
            reload::name_process();
            let listeners = adopt_site(config, &mut sockets, sets);
            (listeners, Vec::new(), Some(sockets))
        }
    };
    let mut listeners = listeners?;
    let mut names: Vec<String> = if activated {
        vec![reload::SYSTEMD_NAME.to_owned(); listeners.local_addrs.len()]
    } else {
        config.listen.iter().map(ToString::to_string).collect()
    };
    let site = listeners.local_addrs.len();
    say_where(&listeners, &labels, serving);
    if let Some(addr) = config.metrics.listen {
        if addr.port() != 0 && listeners.local_addrs.contains(&ListenAddr::Tcp(addr)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "[metrics] listen: {addr} is also where the site listens; metrics need an \
                     address of their own"
                ),
            ));
        }
        // A successor takes the metrics sockets handed over, as it does the site's.
        let name = metrics_name(addr);
        let metrics = match &mut handed {
            Some(sockets) => reload::adopt_or_bind_tcp(addr, &name, sockets, sets),
            None => bind_listeners(&[addr], sets),
        }?;
        listeners.append(metrics);
        names.push(name);
    }
    if let Some(unused) = handed {
        reload::close_unused(unused);
    }
    Ok(Served {
        listeners,
        site,
        activated,
        names,
    })
}

/// The site's listeners bound here, on the configured addresses.
fn bind_site(config: &Config, sets: usize) -> io::Result<Listeners> {
    // HTTP's client speaks first: every listener defers accepting (TCP) until it has.
    let specs: Vec<_> = config
        .listen
        .iter()
        .map(|addr| (addr.clone(), config.listen_options(addr)))
        .collect();
    bind_listeners_with(&specs, sets)
}

/// The site's listeners from the sockets handed over, in the order of `listen`: each
/// address's own, or bound anew; the sockets of addresses no longer configured are left in
/// `sockets`.
fn adopt_site(
    config: &Config,
    sockets: &mut Vec<(OwnedFd, String)>,
    sets: usize,
) -> io::Result<Listeners> {
    let mut listeners = Listeners::empty(sets);
    for addr in &config.listen {
        let options = config.listen_options(addr);
        listeners.append(reload::adopt_or_bind(addr, options, sockets, sets)?);
    }
    Ok(listeners)
}

/// Logs where the site listens: each address, with the label of the socket systemd passed
/// for it when it did.
fn say_where(listeners: &Listeners, labels: &[String], serving: &str) {
    if !listeners.features.defer_accept {
        tracing::info!("TCP_DEFER_ACCEPT is not available; accepting connections before their first bytes arrive");
    }
    for (i, addr) in listeners.local_addrs.iter().enumerate() {
        match labels.get(i) {
            Some(label) => tracing::info!("listening on {addr} ({label}; {serving})"),
            None => tracing::info!("listening on {addr} ({serving})"),
        }
    }
}

/// The name the metrics listener at `addr` is handed over under on a reload.
fn metrics_name(addr: SocketAddr) -> String {
    format!("metrics {addr}")
}
