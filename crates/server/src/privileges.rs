//! Running as an unprivileged user: the `user`, `group` and `run_as_root` keys.
//!
//! Started as root (to bind port 80, say), fastpath binds its listeners and opens its document
//! roots and log files first, then every process that serves drops to the configured user for
//! good: supplementary groups, group, user, in that order, and checks that the user cannot be
//! changed back. See docs/operations.md.
//!
//! This is plain libc rather than a crate: a handful of calls (getpwnam_r, getpwuid_r,
//! getgrnam_r, getgrouplist, setgroups, setresgid, setresuid) whose buffers and error
//! conventions are simple enough to handle here, and the server already links libc.

use std::ffi::{CStr, CString};
use std::io;

/// A user from the configuration, looked up when the file is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The user's name in the user database; `None` for a numeric id it does not know.
    pub name: Option<String>,
    /// The user id.
    pub uid: u32,
    /// The user's primary group, from the user database.
    pub gid: Option<u32>,
}

/// Looks `spec` up in the user database: a name, or a numeric id (which need not be there).
pub(crate) fn lookup_user(spec: &str) -> Result<User, String> {
    if spec.is_empty() {
        return Err("`user` must not be empty".to_owned());
    }
    let numeric = spec.parse::<u32>().ok();
    let entry = match numeric {
        Some(uid) => passwd_by_uid(uid),
        None => passwd_by_name(spec),
    }
    .map_err(|e| format!("cannot look up user \"{spec}\": {e}"))?;
    match entry {
        Some(user) => Ok(user),
        None => match numeric {
            Some(uid) => Ok(User {
                name: None,
                uid,
                gid: None,
            }),
            None => Err(format!(
                "unknown user \"{spec}\" (no such user on this system)"
            )),
        },
    }
}

/// Looks `spec` up in the group database: a name, or a numeric id (which need not be there).
pub(crate) fn lookup_group(spec: &str) -> Result<u32, String> {
    if spec.is_empty() {
        return Err("`group` must not be empty".to_owned());
    }
    if let Ok(gid) = spec.parse::<u32>() {
        return Ok(gid);
    }
    match group_by_name(spec) {
        Ok(Some(gid)) => Ok(gid),
        Ok(None) => Err(format!(
            "unknown group \"{spec}\" (no such group on this system)"
        )),
        Err(e) => Err(format!("cannot look up group \"{spec}\": {e}")),
    }
}

/// Calls a `get*_r` function with a growing buffer until it fits; `Ok(false)` when there is no
/// such entry.
fn with_buffer(
    mut call: impl FnMut(&mut Vec<libc::c_char>) -> (libc::c_int, bool),
) -> io::Result<bool> {
    let mut buf = vec![0 as libc::c_char; 1024];
    loop {
        let (rc, found) = call(&mut buf);
        match rc {
            0 => return Ok(found),
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 2, 0),
            // Some implementations say "not found" with these rather than a null result.
            libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM => return Ok(false),
            rc => return Err(io::Error::from_raw_os_error(rc)),
        }
    }
}

fn passwd_by_name(name: &str) -> io::Result<Option<User>> {
    let Ok(cname) = CString::new(name) else {
        return Ok(None);
    };
    passwd(&mut |pwd, buf: &mut Vec<libc::c_char>, result| {
        // SAFETY: every pointer is valid for the call; buf's length is passed with it.
        unsafe { libc::getpwnam_r(cname.as_ptr(), pwd, buf.as_mut_ptr(), buf.len(), result) }
    })
}

fn passwd_by_uid(uid: u32) -> io::Result<Option<User>> {
    passwd(&mut |pwd, buf: &mut Vec<libc::c_char>, result| {
        // SAFETY: as above.
        unsafe { libc::getpwuid_r(uid, pwd, buf.as_mut_ptr(), buf.len(), result) }
    })
}

type PasswdCall<'a> = dyn FnMut(*mut libc::passwd, &mut Vec<libc::c_char>, *mut *mut libc::passwd) -> libc::c_int
    + 'a;

fn passwd(call: &mut PasswdCall<'_>) -> io::Result<Option<User>> {
    // SAFETY: passwd is plain data; zeroed is a valid value to be overwritten.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut user = None;
    with_buffer(|buf| {
        let mut result = std::ptr::null_mut();
        let rc = call(&mut pwd, buf, &mut result);
        if rc == 0 && !result.is_null() {
            // SAFETY: on success pw_name points into buf, NUL-terminated.
            let name = unsafe { CStr::from_ptr(pwd.pw_name) };
            user = Some(User {
                name: Some(name.to_string_lossy().into_owned()),
                uid: pwd.pw_uid,
                gid: Some(pwd.pw_gid),
            });
        }
        (rc, !result.is_null())
    })?;
    Ok(user)
}

fn group_by_name(name: &str) -> io::Result<Option<u32>> {
    let Ok(cname) = CString::new(name) else {
        return Ok(None);
    };
    // SAFETY: group is plain data; zeroed is a valid value to be overwritten.
    let mut grp: libc::group = unsafe { std::mem::zeroed() };
    let mut gid = None;
    with_buffer(|buf| {
        let mut result = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; buf's length is passed with it.
        let rc = unsafe {
            libc::getgrnam_r(
                cname.as_ptr(),
                &mut grp,
                buf.as_mut_ptr(),
                buf.len(),
                &mut result,
            )
        };
        if rc == 0 && !result.is_null() {
            gid = Some(grp.gr_gid);
        }
        (rc, !result.is_null())
    })?;
    Ok(gid)
}

/// The groups `name` belongs to, with `gid` first (what initgroups would set).
fn group_list(name: &str, gid: u32) -> io::Result<Vec<libc::gid_t>> {
    let cname = CString::new(name).map_err(io::Error::other)?;
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut n = groups.len() as libc::c_int;
        // SAFETY: groups has room for n entries; n is updated to the count needed.
        let rc = unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(n as usize);
            return Ok(groups);
        }
        if groups.len() >= 65_536 {
            return Err(io::Error::other("too many groups"));
        }
        groups.resize((n as usize).max(groups.len() * 2), 0);
    }
}

/// Who the serving processes become, worked out once at start ([`plan`]) and applied in every
/// process that serves ([`Switch::apply`]) once it has opened what it needs.
#[derive(Debug, Clone)]
pub(crate) struct Switch {
    uid: libc::uid_t,
    gid: libc::gid_t,
    /// Supplementary groups, looked up at start so that a preforked child does not read the
    /// group database.
    groups: Vec<libc::gid_t>,
    /// For messages: "nobody (uid 65534, gid 65534)".
    who: String,
}

/// What the user, group and root settings mean for a process started with effective user
/// `euid`: `Ok(None)` when nothing is to change, `Ok(Some)` the switch to make, or why the
/// server must not start.
pub(crate) fn plan(
    user: Option<&User>,
    group: Option<u32>,
    run_as_root: bool,
) -> Result<Option<Switch>, String> {
    // SAFETY: these cannot fail.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    let Some(user) = user else {
        if euid == 0 && !run_as_root {
            return Err(
                "refusing to run as root: set `user` to an unprivileged user in the \
                 configuration (for example `user = \"www-data\"`), or set `run_as_root = true` \
                 (`--run-as-root` on the command line) to run as root anyway"
                    .to_owned(),
            );
        }
        return Ok(None);
    };
    let gid = match group.or(user.gid) {
        Some(gid) => gid,
        // The configuration check asks for `group` then; only a caller building a Config by
        // hand gets here.
        None => {
            return Err(format!(
                "user {} has no primary group: set `group`",
                user.uid
            ))
        }
    };
    let name = user.name.clone().unwrap_or_else(|| user.uid.to_string());
    let who = format!("{name} (uid {}, gid {gid})", user.uid);
    if euid != 0 {
        // SAFETY: cannot fail.
        let (ruid, rgid) = unsafe { (libc::getuid(), libc::getgid()) };
        if user.uid == euid && user.uid == ruid && gid == egid && gid == rgid {
            return Ok(None);
        }
        return Err(format!(
            "cannot switch to user {who}: fastpath is not running as root (uid {euid}, gid \
             {egid}); start it as root, or remove `user` and `group` to run as the current user"
        ));
    }
    if user.uid == 0 && !run_as_root {
        return Err(format!(
            "refusing to run as root: `user` is {who}; set it to an unprivileged user \
             (for example `user = \"www-data\"`), or set `run_as_root = true` to run as root"
        ));
    }
    let groups = match &user.name {
        Some(name) => {
            let mut groups = group_list(name, gid)
                .map_err(|e| format!("cannot list the groups of {who}: {e}"))?;
            if !groups.contains(&gid) {
                groups.insert(0, gid);
            }
            groups
        }
        // A user the database does not know is in no group but its own.
        None => vec![gid],
    };
    Ok(Some(Switch {
        uid: user.uid,
        gid,
        groups,
        who,
    }))
}

impl Switch {
    /// For messages: "nobody (uid 65534, gid 65534)".
    pub(crate) fn who(&self) -> &str {
        &self.who
    }

    /// The user and group dropped to.
    pub(crate) fn owner(&self) -> (libc::uid_t, libc::gid_t) {
        (self.uid, self.gid)
    }

    /// Drops to the user for good: supplementary groups, then the group (real, effective and
    /// saved), then the user; then checks that becoming root again fails. glibc's set*id
    /// change every thread of the process, so the threads already started (the access-log
    /// writer, file watchers) drop too.
    pub(crate) fn apply(&self) -> io::Result<()> {
        let fail = |what: &str| {
            let e = io::Error::last_os_error();
            io::Error::new(
                e.kind(),
                format!("cannot drop privileges to {} ({what}): {e}", self.who),
            )
        };
        // SAFETY: plain system calls on values owned here.
        unsafe {
            if libc::setgroups(self.groups.len(), self.groups.as_ptr()) != 0 {
                return Err(fail("setgroups"));
            }
            if libc::setresgid(self.gid, self.gid, self.gid) != 0 {
                return Err(fail("setgid"));
            }
            if libc::setresuid(self.uid, self.uid, self.uid) != 0 {
                return Err(fail("setuid"));
            }
        }
        if self.uid != 0 {
            // SAFETY: as above; a success here is the failure being checked for.
            let back = unsafe { libc::setuid(0) } == 0 || unsafe { libc::seteuid(0) } == 0;
            let (ruid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
            if back || ruid != self.uid || euid != self.uid {
                return Err(io::Error::other(format!(
                    "dropping privileges to {} did not hold: the process could become root again",
                    self.who
                )));
            }
        }
        Ok(())
    }
}
