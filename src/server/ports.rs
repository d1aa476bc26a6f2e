//! The listening addresses are free before Pingora binds them, or the process does not start.
//!
//! Pingora binds each listener in its service's thread and, when the address is taken, retries
//! once a second for 30 s and then panics in that thread, leaving a process that runs without
//! the listener (and that a supervisor therefore never restarts). Each address is bound here
//! first, with the same socket options as Pingora's (`SO_REUSEADDR`, no `SO_REUSEPORT`), so a
//! taken one ends the start at once with one line naming its setting. Not with `--upgrade`:
//! there the running process hands its sockets over, and waiting for an address is right.

use crate::config::ServerConfig;
use std::net::SocketAddr;

#[derive(Debug, thiserror::Error)]
pub(crate) enum PortError {
    #[error("{setting} {addr} is in use")]
    InUse { setting: &'static str, addr: SocketAddr },
    #[error("{setting} {addr} cannot be bound: {source}")]
    Bind {
        setting: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Every address toolgate listens on, named by its setting (`server.plain_listen` only beside
/// TLS, as it is bound).
pub(crate) fn listeners(server: &ServerConfig) -> Vec<(&'static str, SocketAddr)> {
    let mut all = vec![("server.listen", server.listen)];
    if let (Some(plain), Some(_)) = (server.plain_listen, &server.tls) {
        all.push(("server.plain_listen", plain));
    }
    all.push(("server.metrics_listen", server.metrics_listen));
    all
}

/// Binds each address and lets it go again: the first that cannot be bound is the error.
/// Port 0 is always free (the system picks one).
pub(crate) fn check_free(listeners: &[(&'static str, SocketAddr)]) -> Result<(), PortError> {
    for &(setting, addr) in listeners.iter().filter(|(_, a)| a.port() != 0) {
        let bound = match addr {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        }
        .and_then(|socket| socket.set_reuseaddr(true).map(|()| socket))
        .and_then(|socket| socket.bind(addr));
        match bound {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => return Err(PortError::InUse { setting, addr }),
            Err(source) => return Err(PortError::Bind { setting, addr, source }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_address_is_named_by_its_setting_and_a_free_one_passes() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let err = check_free(&[("server.listen", "127.0.0.1:0".parse().unwrap()), ("server.plain_listen", addr)])
            .unwrap_err();
        assert_eq!(err.to_string(), format!("server.plain_listen {addr} is in use"));
        drop(taken);
        check_free(&[("server.plain_listen", addr)]).expect("free once let go");
        // Checked and let go: the address is free for Pingora to bind.
        std::net::TcpListener::bind(addr).expect("the check keeps nothing bound");
    }
}
