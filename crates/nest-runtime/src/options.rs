//! The option table: what `%option NAME VALUE` may say in a specification and `NAME VALUE` in
//! config.nest, read the same way by the compiler ([`check`]) and by the server ([`Options`]).

use std::net::IpAddr;
use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use fastpath_sockets::units::{parse_duration, parse_size};
use fastpath_sockets::{ModelKind, ModelSettings};

/// What an option's value looks like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A count of at least 1.
    Count,
    /// Nothing, or a count of at least 1.
    OptionalCount,
    /// No value.
    Flag,
    /// A TCP port, 0-65535 (0: any free port).
    Port,
    /// An IP address.
    Address,
    /// Any text without line breaks.
    Text,
    /// A size: `4096`, `64KiB`, `1m`.
    Size,
    /// A duration: `30s`, `250ms`, `1h`.
    Duration,
    /// `error`, `warn`, `info`, `debug`, `trace`.
    Level,
}

struct Def {
    name: &'static str,
    kind: Kind,
    /// Only in the specification: it decides what is generated or how the server starts.
    spec_only: bool,
    model: bool,
}

const fn def(name: &'static str, kind: Kind, spec_only: bool, model: bool) -> Def {
    Def {
        name,
        kind,
        spec_only,
        model,
    }
}

const TABLE: &[Def] = &[
    def("processServer", Kind::Count, true, true),
    def("threadServer", Kind::Count, true, true),
    def("eventServer", Kind::OptionalCount, true, true),
    def("uringServer", Kind::OptionalCount, true, true),
    def("percoreServer", Kind::Flag, true, true),
    def("inetd", Kind::Flag, true, false),
    def("serverPort", Kind::Port, false, false),
    def("serverAddress", Kind::Address, false, false),
    def("serverName", Kind::Text, false, false),
    def("inputBuffer", Kind::Size, false, false),
    def("outputBuffer", Kind::Size, false, false),
    def("idleTimeout", Kind::Duration, false, false),
    def("sendTimeout", Kind::Duration, false, false),
    def("maxConnections", Kind::Count, false, false),
    def("logLevel", Kind::Level, false, false),
    def("directory", Kind::Text, false, false),
    def("tlsCertificate", Kind::Text, false, false),
    def("tlsKey", Kind::Text, false, false),
];

const NAMES: &[&str] = &[
    "processServer",
    "threadServer",
    "eventServer",
    "uringServer",
    "percoreServer",
    "inetd",
    "serverPort",
    "serverAddress",
    "serverName",
    "inputBuffer",
    "outputBuffer",
    "idleTimeout",
    "sendTimeout",
    "maxConnections",
    "logLevel",
    "directory",
    "tlsCertificate",
    "tlsKey",
];

/// Every option's name, in the table's order.
pub fn names() -> &'static [&'static str] {
    NAMES
}

/// Whether option `name` may appear only in the specification (the model, `inetd`).
pub fn is_spec_only(name: &str) -> bool {
    find(name).is_some_and(|d| d.spec_only)
}

/// Whether option `name` chooses the concurrency model.
pub fn is_model(name: &str) -> bool {
    find(name).is_some_and(|d| d.model)
}

fn find(name: &str) -> Option<&'static Def> {
    TABLE.iter().find(|d| d.name == name)
}

/// Checks one option line: a known name with a value of the right kind. The message names
/// what is wrong and what is expected, without a position (the caller adds it).
pub fn check(name: &str, value: &str) -> Result<(), String> {
    let def = find(name)
        .ok_or_else(|| format!("unknown option `{name}` (options: {})", NAMES.join(", ")))?;
    parse_value(def, value.trim()).map(|_| ())
}

/// A parsed value.
enum Value {
    None,
    Count(usize),
    Port(u16),
    Address(IpAddr),
    Text(String),
    Size(u64),
    Duration(Duration),
}

fn parse_value(def: &Def, value: &str) -> Result<Value, String> {
    let name = def.name;
    let count = |v: &str| -> Result<usize, String> {
        match v.parse::<usize>() {
            Ok(n) if n >= 1 => Ok(n),
            _ => Err(format!("{name}: `{v}` is not a count of at least 1")),
        }
    };
    match def.kind {
        Kind::Count => count(value).map(Value::Count),
        Kind::OptionalCount if value.is_empty() => Ok(Value::None),
        Kind::OptionalCount => count(value).map(Value::Count),
        Kind::Flag if value.is_empty() => Ok(Value::None),
        Kind::Flag => Err(format!("{name} takes no value (got `{value}`)")),
        // 0: a free port chosen by the kernel (logged), for tests.
        Kind::Port => match value.parse::<u16>() {
            Ok(p) => Ok(Value::Port(p)),
            _ => Err(format!("{name}: `{value}` is not a port (0-65535)")),
        },
        Kind::Address => value
            .parse::<IpAddr>()
            .map(Value::Address)
            .map_err(|_| format!("{name}: `{value}` is not an IP address")),
        Kind::Text if value.is_empty() => Err(format!("{name} needs a value")),
        Kind::Text => Ok(Value::Text(value.to_string())),
        Kind::Size => match parse_size(value) {
            Some(n) if (1..=MAX_BUFFER).contains(&n) => Ok(Value::Size(n)),
            _ => Err(format!(
                "{name}: `{value}` is not a size from 1 byte to 1GiB (such as 4096, 64KiB, 1m)"
            )),
        },
        Kind::Duration => match parse_duration(value) {
            Some(d) if !d.is_zero() => Ok(Value::Duration(d)),
            _ => Err(format!(
                "{name}: `{value}` is not a duration above zero (such as 30s, 250ms, 1h)"
            )),
        },
        Kind::Level => match value {
            "error" | "warn" | "info" | "debug" | "trace" => Ok(Value::Text(value.to_string())),
            _ => Err(format!(
                "{name}: `{value}` is not a level (error, warn, info, debug, trace)"
            )),
        },
    }
}

/// The largest inputBuffer or outputBuffer.
const MAX_BUFFER: u64 = 1 << 30;

/// Where an option line came from, for error messages.
#[derive(Clone, Copy)]
enum Source {
    Spec,
    File,
}

/// A server's options: the specification's, then config.nest's, then the command line's.
#[derive(Clone, Debug)]
pub struct Options {
    /// The concurrency model.
    pub model: ModelKind,
    /// The model's settings (processServer's and threadServer's N).
    pub settings: ModelSettings,
    /// Workers of eventServer and uringServer; 0 for one per CPU.
    pub workers: usize,
    /// Served by inetd: one connection on standard input and output.
    pub inetd: bool,
    /// serverPort.
    pub port: u16,
    /// serverAddress.
    pub address: IpAddr,
    /// serverName.
    pub server_name: String,
    /// inputBuffer: unmatched input kept at most.
    pub input_buffer: usize,
    /// outputBuffer: output queued before input is no longer read.
    pub output_buffer: usize,
    /// idleTimeout: no input for this long while waiting for a match closes the connection.
    pub idle_timeout: Duration,
    /// sendTimeout: output making no progress for this long closes the connection.
    pub send_timeout: Duration,
    /// maxConnections: connections open at once.
    pub max_connections: usize,
    /// logLevel.
    pub log_level: String,
    /// directory: the working directory the server changes into before serving, where
    /// relative paths in actions start; `None` to stay where it was started.
    pub directory: Option<std::path::PathBuf>,
    /// tlsCertificate: speak TLS with this certificate chain (PEM), with `tls_key`.
    pub tls_certificate: Option<std::path::PathBuf>,
    /// tlsKey: the certificate's private key (PEM).
    pub tls_key: Option<std::path::PathBuf>,
    /// Every option given, by name, as text (the last value wins), for `Cx::option`.
    values: Vec<(String, String)>,
    /// The defaults' texts, made on the first lookup of an option not given (by then the
    /// options are final: they are not changed once serving).
    defaults: OnceLock<Vec<(&'static str, String)>>,
    model_set: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            model: ModelKind::Epoll,
            settings: ModelSettings::default(),
            workers: 0,
            inetd: false,
            port: 8000,
            address: IpAddr::from([127, 0, 0, 1]),
            server_name: host_name(),
            input_buffer: 64 * 1024,
            output_buffer: 256 * 1024,
            idle_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(60),
            max_connections: 10_000,
            log_level: "info".to_string(),
            directory: None,
            tls_certificate: None,
            tls_key: None,
            values: Vec::new(),
            defaults: OnceLock::new(),
            model_set: false,
        }
    }
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } != 0 {
        return "localhost".to_string();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

impl Options {
    /// The options of a specification's `%option` lines, `(name, value, line)`, over the
    /// defaults. Errors are `FILE:LINE: message` with `file` the specification's name.
    pub fn from_spec(file: &str, options: &[(&str, &str, u32)]) -> Result<Options, String> {
        let mut o = Options::default();
        for &(name, value, line) in options {
            o.set(Source::Spec, name, value)
                .map_err(|e| format!("{file}:{line}: {e}"))?;
        }
        Ok(o)
    }

    /// Applies config.nest's text, read from `path`: `NAME VALUE` lines, `#` comments, blank
    /// lines. Errors are `PATH:LINE: message`; the first one stops the reading.
    pub fn apply_config(&mut self, path: &Path, text: &str) -> Result<(), String> {
        for (i, raw) in text.lines().enumerate() {
            let at = |e: String| format!("{}:{}: {e}", path.display(), i + 1);
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if line.starts_with("%option") {
                return Err(at(
                    "config.nest lines are `NAME VALUE`, without %option".to_string()
                ));
            }
            let (name, value) = line
                .split_once(char::is_whitespace)
                .map_or((line, ""), |(n, v)| (n, v.trim()));
            self.set(Source::File, name, value).map_err(at)?;
        }
        Ok(())
    }

    /// Sets option `name` from the command line (`--port`, `--model`): like config.nest, but
    /// the model may be changed, to try a server on another model without rebuilding it.
    pub fn set_from_command_line(&mut self, name: &str, value: &str) -> Result<(), String> {
        if is_model(name) {
            self.model_set = false;
            return self.set(Source::Spec, name, value);
        }
        self.set(Source::File, name, value)
    }

    fn set(&mut self, source: Source, name: &str, value: &str) -> Result<(), String> {
        let value = value.trim();
        let def = find(name)
            .ok_or_else(|| format!("unknown option `{name}` (options: {})", NAMES.join(", ")))?;
        if let (true, Source::File) = (def.spec_only, source) {
            return Err(format!(
                "{name} can only be set in the specification (it decides how the server is \
                 built or started); rebuild the server to change it"
            ));
        }
        if def.model && self.model_set {
            return Err(format!(
                "{name}: the model is already chosen (one of processServer, threadServer, \
                 eventServer, uringServer, percoreServer)"
            ));
        }
        let parsed = parse_value(def, value)?;
        match (name, parsed) {
            ("processServer", Value::Count(n)) => {
                self.model = ModelKind::Prefork;
                let p = &mut self.settings.prefork;
                p.max_children = n;
                p.start = p.start.min(n);
                p.min_spare = p.min_spare.min(n);
                p.max_spare = p.max_spare.min(n);
            }
            ("threadServer", Value::Count(n)) => {
                self.model = ModelKind::Threads;
                self.settings.threads.threads = n;
            }
            ("eventServer", v) => {
                self.model = ModelKind::Epoll;
                self.workers = if let Value::Count(n) = v { n } else { 0 };
            }
            ("uringServer", v) => {
                self.model = ModelKind::Uring;
                self.workers = if let Value::Count(n) = v { n } else { 0 };
            }
            ("percoreServer", _) => self.model = ModelKind::Percore,
            ("inetd", _) => self.inetd = true,
            ("serverPort", Value::Port(p)) => self.port = p,
            ("serverAddress", Value::Address(a)) => self.address = a,
            ("serverName", Value::Text(t)) => self.server_name = t,
            ("inputBuffer", Value::Size(n)) => self.input_buffer = n as usize,
            ("outputBuffer", Value::Size(n)) => self.output_buffer = n as usize,
            ("idleTimeout", Value::Duration(d)) => self.idle_timeout = d,
            ("sendTimeout", Value::Duration(d)) => self.send_timeout = d,
            ("maxConnections", Value::Count(n)) => self.max_connections = n,
            ("logLevel", Value::Text(t)) => self.log_level = t,
            ("directory", Value::Text(t)) => self.directory = Some(t.into()),
            ("tlsCertificate", Value::Text(t)) => self.tls_certificate = Some(t.into()),
            ("tlsKey", Value::Text(t)) => self.tls_key = Some(t.into()),
            _ => unreachable!("option {name}: value kind does not match the table"),
        }
        if def.model {
            self.model_set = true;
        }
        self.defaults = OnceLock::new();
        self.values.retain(|(n, _)| n != name);
        self.values.push((name.to_string(), value.to_string()));
        Ok(())
    }

    /// Option `name`'s value as text: as given (the last time), or the default's text for
    /// the options that have one (`serverPort` `8000`, `inputBuffer` `65536`, ...); `None`
    /// for an option neither given nor defaulted (a model option not chosen, `inetd`).
    pub fn value(&self, name: &str) -> Option<&str> {
        if let Some((_, v)) = self.values.iter().find(|(n, _)| n == name) {
            return Some(v);
        }
        self.defaults
            .get_or_init(|| self.default_texts())
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    fn default_texts(&self) -> Vec<(&'static str, String)> {
        vec![
            ("serverPort", self.port.to_string()),
            ("serverAddress", self.address.to_string()),
            ("serverName", self.server_name.clone()),
            ("inputBuffer", self.input_buffer.to_string()),
            ("outputBuffer", self.output_buffer.to_string()),
            (
                "idleTimeout",
                format!("{}ms", self.idle_timeout.as_millis()),
            ),
            (
                "sendTimeout",
                format!("{}ms", self.send_timeout.as_millis()),
            ),
            ("maxConnections", self.max_connections.to_string()),
            ("logLevel", self.log_level.clone()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_and_names_agree() {
        let names: Vec<&str> = TABLE.iter().map(|d| d.name).collect();
        assert_eq!(names, NAMES);
    }

    #[test]
    fn check_values() {
        assert!(check("threadServer", "100").is_ok());
        assert!(check("eventServer", "").is_ok());
        assert!(check("eventServer", "4").is_ok());
        assert!(check("percoreServer", "").is_ok());
        assert!(check("inetd", "").is_ok());
        assert!(check("inputBuffer", "64KiB").is_ok());
        assert!(check("idleTimeout", "30s").is_ok());
        assert!(check("serverName", "www.cpsc.ucalgary.ca").is_ok());
        for (name, value, says) in [
            ("threadServer", "0", "count of at least 1"),
            ("threadServer", "", "count of at least 1"),
            ("inetd", "yes", "takes no value"),
            ("serverPort", "70000", "not a port"),
            ("inputBuffer", "lots", "not a size"),
            ("idleTimeout", "0s", "duration above zero"),
            ("logLevel", "loud", "not a level"),
            ("standAlone", "", "unknown option `standAlone`"),
        ] {
            let e = check(name, value).unwrap_err();
            assert!(e.contains(says), "{name} {value}: {e}");
        }
    }

    #[test]
    fn spec_then_config() {
        let mut o = Options::from_spec(
            "x.nest",
            &[("processServer", "150", 4), ("serverPort", "9000", 5)],
        )
        .unwrap();
        assert_eq!(o.model, ModelKind::Prefork);
        assert_eq!(o.settings.prefork.max_children, 150);
        let path = Path::new("/etc/config.nest");
        o.apply_config(path, "# c\n\n serverPort 9100\ninputBuffer 1k\n")
            .unwrap();
        assert_eq!(o.port, 9100);
        assert_eq!(o.input_buffer, 1024);
        assert_eq!(o.value("serverPort"), Some("9100"));
        assert_eq!(o.value("outputBuffer"), Some("262144"));
        assert_eq!(o.value("idleTimeout"), Some("60000ms"));
        assert_eq!(o.value("processServer"), Some("150"));
        assert_eq!(o.value("inetd"), None);
        assert_eq!(o.directory, None);
        o.apply_config(path, "directory /var/mail/nest\n").unwrap();
        assert_eq!(o.directory.as_deref(), Some(Path::new("/var/mail/nest")));
        assert_eq!(o.value("directory"), Some("/var/mail/nest"));
        let e = o
            .apply_config(path, "serverPort 1\n\nthreadServer 4\n")
            .unwrap_err();
        assert!(
            e.starts_with("/etc/config.nest:3: threadServer can only be set in the specification"),
            "{e}"
        );
        let e = o.apply_config(path, "inetd\n").unwrap_err();
        assert!(e.starts_with("/etc/config.nest:1: inetd can only"), "{e}");
        let e = o.apply_config(path, "bogus 1\n").unwrap_err();
        assert!(
            e.starts_with("/etc/config.nest:1: unknown option `bogus`"),
            "{e}"
        );
        let e = Options::from_spec(
            "x.nest",
            &[("eventServer", "", 3), ("threadServer", "2", 4)],
        )
        .unwrap_err();
        assert!(
            e.starts_with("x.nest:4: threadServer: the model is already chosen"),
            "{e}"
        );
    }
}
