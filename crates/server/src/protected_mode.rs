//! Protected mode, as Redis 7.0 has it (`protected-mode yes`, the
//! default): while the default user needs no password, only clients
//! connecting over the loopback interface are served. Anyone else gets
//! Redis's DENIED error, which says how to open the server up, and is
//! disconnected. A server started that way on a non-loopback address says
//! so in its log at startup, so an operator learns why remote clients are
//! refused before the first one is.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;

use crate::shared::Shared;

/// Redis's reply to a refused client, word for word.
pub const DENIED: &str = "-DENIED Redis is running in protected mode because protected mode \
    is enabled and no password is set for the default user. In this mode connections are \
    only accepted from the loopback interface. If you want to connect from external \
    computers to Redis you may adopt one of the following solutions: 1) Just disable \
    protected mode sending the command 'CONFIG SET protected-mode no' from the loopback \
    interface by connecting to Redis from the same host the server is running, however MAKE \
    SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to \
    make this change permanent. 2) Alternatively you can just disable the protected mode by \
    editing the Redis configuration file, and setting the protected mode option to 'no', \
    and then restarting the server. 3) If you started the server manually just for \
    testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication \
    password for the default user. NOTE: You only need to do one of the above things in \
    order for the server to start accepting connections from the outside.\r\n";

/// Whether the server is in the state protected mode guards: the mode on
/// and no password.
pub fn guarding(shared: &Shared) -> bool {
    shared.redis_param("protected-mode") != "no" && shared.acl.default_user().rules().nopass
}

/// Whether a client from `peer` is to be refused.
pub fn refuses(shared: &Shared, peer: SocketAddr) -> bool {
    !is_loopback(peer.ip()) && guarding(shared)
}

/// 127.0.0.0/8 and ::1, also as IPv4-mapped IPv6 addresses.
fn is_loopback(ip: IpAddr) -> bool {
    ip.to_canonical().is_loopback()
}

/// Counts a refused client among INFO's rejected connections and logs
/// it; the accept loop sends it DENIED (over TLS on the TLS port, after
/// the handshake, as Redis does) and closes it.
pub fn note_refusal(shared: &Shared, peer: SocketAddr) {
    shared
        .stats
        .rejected_connections
        .fetch_add(1, Ordering::Relaxed);
    log::info!("refused {peer}: protected mode is on and no password is set");
}

/// The startup warning, when the server listens beyond the loopback
/// interface in protected mode.
pub fn warn_at_startup(shared: &Shared, bound: SocketAddr) {
    if guarding(shared) && !is_loopback(bound.ip()) {
        log::warn!(
            "protected mode is on and no password is set: listening on {bound}, but only \
             clients on the loopback interface will be served. Set a password \
             (requirepass) or turn protected mode off (--protected-mode no) to serve others."
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_in_every_form() {
        for ip in ["127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"] {
            assert!(is_loopback(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "10.0.0.1",
            "0.0.0.0",
            "::ffff:10.0.0.1",
            "fe80::1",
            "192.168.1.1",
        ] {
            assert!(!is_loopback(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn the_reply_is_one_error_line() {
        assert!(DENIED.starts_with("-DENIED Redis is running in protected mode"));
        assert!(DENIED.ends_with("outside.\r\n"));
        assert_eq!(DENIED.matches("\r\n").count(), 1);
    }
}
