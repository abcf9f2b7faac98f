//! Loopback ports for test servers and Raft buses, shared by the test
//! suites that start nodes (included with `#[path]`).

use std::sync::atomic::{AtomicU64, Ordering};

/// A loopback port free a moment ago (for a server told its port, or a
/// bus port of a Raft group), below the kernel's ephemeral range
/// (32768-60999 here). A port from that range, released by a probe
/// listener, can be taken by any outgoing connection on the machine (the
/// buses of groups started by other tests connect all the time) before
/// the node that was told it binds it, or while that node is down between
/// a kill and its restart.
pub fn free_port() -> u16 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let span = 32_000 - 10_000;
    let start = (std::process::id() as u64 * 7919) % span;
    loop {
        let port = 10_000 + (start + NEXT.fetch_add(1, Ordering::Relaxed) * 97) % span;
        if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return port as u16;
        }
    }
}
