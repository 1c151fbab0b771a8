//! Where trigd listens: `host:port`, `unix:/path`, or the socket systemd
//! passed (socket activation, `sys::systemd`). One [`Bound`] listener comes
//! out, in tiny_http's own `Listener` (TCP or Unix); the rest of the server
//! does not care which.
//!
//! A Unix socket file is trigd's: a stale one (nobody accepts on it: a
//! connect is refused) is removed at start, a live one is refused, anything
//! else at the path is left alone; the new file gets `socket_mode`,
//! `socket_user` and `socket_group`, and is removed at a clean stop. A
//! socket systemd passed is systemd's: never removed.

use std::fs;
use std::io::{self, ErrorKind};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, ToSocketAddrs};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use crate::cli::error::Error;
use crate::config::SocketFile;
use crate::sys::systemd::Inherited;

/// The prefix of a Unix socket in `listen`: `unix:/run/trigd/trigd.sock`.
pub const UNIX_PREFIX: &str = "unix:";

/// The longest path of a Unix socket, in bytes (`sun_path` holds 108 with
/// its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// A listening socket, ready for tiny_http.
pub struct Bound {
    /// The listener.
    pub listener: tiny_http::Listener,
    /// What `listening on` names: `http://127.0.0.1:8080`, or
    /// `unix:/run/trigd/trigd.sock`.
    pub shown: String,
    /// The socket file trigd created, removed at a clean stop.
    pub created: Option<PathBuf>,
    /// Where a connection reaches this listener (the watchdog's check).
    pub reach: Reach,
    /// The local address of a TCP listener beyond loopback (a reason to
    /// warn when it serves plain HTTP: `warn_if_exposed`).
    pub exposed: Option<SocketAddr>,
}

impl Bound {
    /// Warn when this listener is reachable beyond loopback and serves
    /// plain HTTP (`https` false): credentials would cross the network in
    /// clear.
    pub fn warn_if_exposed(&self, https: bool) {
        let Some(local) = self.exposed.filter(|_| !https) else {
            return;
        };
        log::warn!(
            "listening on {local}, a non-loopback address, without TLS: API keys, passwords \
             and results cross the network in clear. Set tls_cert and tls_key (docs/https.md), \
             or put a TLS-terminating proxy in front (and list it in [server] trusted_proxies), \
             or listen on 127.0.0.1."
        );
    }

    /// What `listening on` names, `https://` for a TCP listener with TLS.
    pub fn shown(&self, https: bool) -> String {
        match (https, self.shown.strip_prefix("http://")) {
            (true, Some(rest)) => format!("https://{rest}"),
            _ => self.shown.clone(),
        }
    }

    /// The TCP port of this listener (none for a Unix socket).
    pub fn port(&self) -> Option<u16> {
        match &self.reach {
            Reach::Tcp(a) => Some(a.port()),
            Reach::Unix(_) => None,
        }
    }
}

/// Where a client on this host reaches a listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// A TCP address (`0.0.0.0` and `::` become loopback).
    Tcp(SocketAddr),
    /// A Unix socket path.
    Unix(PathBuf),
}

/// Bind `addr` (`host:port` or `unix:PATH`); a Unix socket file gets the
/// owner and mode of `file`.
///
/// # Errors
/// The address does not resolve or bind; the socket path is too long, in
/// a missing directory, taken by another file or by a live server.
pub fn bind(addr: &str, file: &SocketFile) -> Result<Bound, Error> {
    let err = |source| Error::Bind {
        addr: addr.to_string(),
        source,
    };
    match addr.strip_prefix(UNIX_PREFIX) {
        Some(path) => {
            let path = PathBuf::from(path);
            let listener = bind_unix(&path, file).map_err(err)?;
            Ok(unix(listener, Some(path)))
        }
        None => tcp(bind_tcp(addr)?).map_err(err),
    }
}

/// Bind the TCP address `addr` (`host:port`).
///
/// # Errors
/// The address does not resolve or bind.
pub fn bind_tcp(addr: &str) -> Result<TcpListener, Error> {
    let err = |source| Error::Bind {
        addr: addr.to_string(),
        source,
    };
    let addrs = resolve(addr).map_err(err)?;
    TcpListener::bind(&addrs[..]).map_err(err)
}

/// The listener systemd passed.
///
/// # Errors
/// Its local address cannot be read.
pub fn inherited(socket: Inherited) -> Result<Bound, Error> {
    let err = |source| Error::Bind {
        addr: "the socket systemd passed".into(),
        source,
    };
    match socket {
        Inherited::Tcp(l) => tcp(l).map_err(err),
        Inherited::Unix(l) => {
            let local = l.local_addr().map_err(err)?;
            let mut bound = unix(l, None);
            if let Some(p) = local.as_pathname() {
                bound.shown = format!("{UNIX_PREFIX}{}", p.display());
                bound.reach = Reach::Unix(p.to_path_buf());
            }
            Ok(bound)
        }
    }
}

/// A TCP listener as [`Bound`].
fn tcp(listener: TcpListener) -> io::Result<Bound> {
    let local = listener.local_addr()?;
    let reach = match local.ip() {
        ip if !ip.is_unspecified() => local,
        std::net::IpAddr::V4(_) => SocketAddr::from((Ipv4Addr::LOCALHOST, local.port())),
        std::net::IpAddr::V6(_) => SocketAddr::from((Ipv6Addr::LOCALHOST, local.port())),
    };
    Ok(Bound {
        listener: listener.into(),
        shown: format!("http://{local}"),
        created: None,
        reach: Reach::Tcp(reach),
        exposed: (!local.ip().is_loopback()).then_some(local),
    })
}

/// A Unix listener as [`Bound`]; `created`: the file trigd made.
fn unix(listener: UnixListener, created: Option<PathBuf>) -> Bound {
    let path = created.clone().unwrap_or_default();
    Bound {
        listener: listener.into(),
        shown: format!("{UNIX_PREFIX}{}", path.display()),
        reach: Reach::Unix(path),
        created,
        exposed: None,
    }
}

/// Bind a Unix socket at `path`: a stale socket file is removed first,
/// then the new one gets the owner and mode of `file`.
fn bind_unix(path: &Path, file: &SocketFile) -> io::Result<UnixListener> {
    let len = path.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            format!(
                "the socket path is {len} bytes long; Unix sockets allow at most {MAX_SOCKET_PATH}"
            ),
        ));
    }
    if path.as_os_str().is_empty() {
        return Err(io::Error::new(
            ErrorKind::InvalidInput,
            "no socket path after unix: (write unix:/run/trigd/trigd.sock)",
        ));
    }
    remove_stale(path)?;
    let listener = UnixListener::bind(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => io::Error::new(
            ErrorKind::NotFound,
            format!(
                "the directory {} does not exist (create it; under systemd: RuntimeDirectory=trigd)",
                path.parent().unwrap_or(Path::new("/")).display()
            ),
        ),
        _ => e,
    })?;
    if let Err(e) = own(path, file) {
        let _ = fs::remove_file(path);
        return Err(e);
    }
    Ok(listener)
}

/// Remove a socket file nobody accepts on; refuse a live one and anything
/// that is not a socket.
fn remove_stale(path: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(
            ErrorKind::AlreadyExists,
            "a file that is not a socket is at this path; trigd leaves it alone (remove it or choose another path)",
        ));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            ErrorKind::AddrInUse,
            "a server is listening on this socket already (another trigd?)",
        )),
        Err(e) if e.kind() == ErrorKind::ConnectionRefused => {
            log::info!(
                "removing the stale socket {} (nobody listens on it)",
                path.display()
            );
            fs::remove_file(path)
        }
        Err(e) => Err(e),
    }
}

/// Give the socket file at `path` the mode, user and group of `file`.
fn own(path: &Path, file: &SocketFile) -> io::Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(file.mode))?;
    let uid = match &file.user {
        Some(name) => Some(id_of(name, "user", |n| {
            crate::sys::user_by_name(n).map(|(uid, _)| uid)
        })?),
        None => None,
    };
    let gid = match &file.group {
        Some(name) => Some(id_of(name, "group", crate::sys::group_by_name)?),
        None => None,
    };
    if uid.is_some() || gid.is_some() {
        std::os::unix::fs::chown(path, uid, gid).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot give the socket to {}: {e} (only root gives a file away; a group \
                     needs trigd's user to be a member of it)",
                    [file.user.as_deref(), file.group.as_deref()]
                        .into_iter()
                        .flatten()
                        .collect::<Vec<_>>()
                        .join(":")
                ),
            )
        })?;
    }
    Ok(())
}

/// The id of a user or group given by name or number.
fn id_of(name: &str, what: &str, lookup: impl Fn(&str) -> Option<u32>) -> io::Result<u32> {
    name.parse()
        .ok()
        .or_else(|| lookup(name))
        .ok_or_else(|| io::Error::new(ErrorKind::NotFound, format!("no {what} called {name:?}")))
}

/// Remove the socket file trigd created (a clean stop).
pub fn remove_created(bound_file: Option<&Path>) {
    if let Some(path) = bound_file {
        if let Err(e) = fs::remove_file(path) {
            log::warn!("cannot remove the socket {}: {e}", path.display());
        }
    }
}

/// The socket addresses of `host:port`. IP literals, `localhost` and an
/// empty host (all interfaces) are resolved here, without the C resolver: a
/// static glibc binary cannot load NSS modules, so `getaddrinfo` may fail
/// on a host without a matching glibc. Other names go to the resolver.
fn resolve(addr: &str) -> io::Result<Vec<SocketAddr>> {
    if let Ok(a) = addr.parse::<SocketAddr>() {
        return Ok(vec![a]);
    }
    let bad = || {
        io::Error::new(
            ErrorKind::InvalidInput,
            "expected HOST:PORT (e.g. 127.0.0.1:8080) or unix:PATH",
        )
    };
    let (host, port) = addr.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    match host {
        "" | "*" => Ok(vec![SocketAddr::from(([0, 0, 0, 0], port))]),
        h if h.eq_ignore_ascii_case("localhost") => Ok(vec![
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
        ]),
        _ => Ok(addr.to_socket_addrs()?.collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_without_the_c_resolver() {
        let v4 = |port| SocketAddr::from(([127, 0, 0, 1], port));
        assert_eq!(resolve("127.0.0.1:0").unwrap(), vec![v4(0)]);
        assert_eq!(resolve("[::1]:80").unwrap()[0].port(), 80);
        assert_eq!(resolve("localhost:8080").unwrap()[0], v4(8080));
        let any = SocketAddr::from(([0, 0, 0, 0], 9000));
        assert_eq!(resolve(":9000").unwrap(), vec![any]);
        assert!(resolve("localhost").is_err());
        assert!(resolve("localhost:http").is_err());
    }
}
