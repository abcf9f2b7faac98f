//! The accept loops: one per listening port (the plain one, the TLS one,
//! or both at once), each on the main thread's runtime future. At accept a
//! client is counted, checked against `maxclients` and protected mode and
//! registered; everything that may wait on the client (the TLS handshake
//! included) runs in the client's own task, so a slow client never holds
//! up the next accept.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

use crate::connection::Stream;
use crate::shared::Shared;

/// What a listener's clients speak.
#[derive(Clone)]
pub enum Transport {
    Plain,
    Tls(TlsAcceptor),
}

/// Accepts on every listener until shutdown.
pub async fn run(
    shared: Arc<Shared>,
    plain: Option<TcpListener>,
    tls: Option<(TcpListener, TlsAcceptor)>,
) {
    let plain = async {
        if let Some(listener) = plain {
            accept_loop(&shared, listener, Transport::Plain).await;
        }
    };
    let tls = async {
        if let Some((listener, acceptor)) = tls {
            accept_loop(&shared, listener, Transport::Tls(acceptor)).await;
        }
    };
    tokio::join!(plain, tls);
    log::info!("no longer accepting connections");
}

async fn accept_loop(shared: &Arc<Shared>, listener: TcpListener, transport: Transport) {
    loop {
        // Armed before the flag is read: a shutdown that comes between
        // the two still wakes this loop (two loops wait for it, and
        // `notify_waiters` wakes only those already waiting).
        let shutdown = shared.shutdown.notified();
        tokio::pin!(shutdown);
        shutdown.as_mut().enable();
        if shared.is_shutting_down() {
            break;
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = shutdown => break,
        };
        let (stream, addr) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                // Out of file descriptors and the like: back off briefly
                // rather than spin.
                log::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        shared
            .stats
            .connections_received
            .fetch_add(1, Ordering::Relaxed);
        // Replies go out as soon as they are written, not held for more.
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr().unwrap_or(addr);
        let maxclients = shared.runtime.maxclients.load(Ordering::Relaxed);
        match shared.clients.register(addr, local, maxclients) {
            Some(info) if crate::protected_mode::refuses(shared, addr) => {
                shared.clients.unregister(info.id);
                crate::protected_mode::note_refusal(shared, addr);
                let reply = crate::protected_mode::DENIED.as_bytes();
                tokio::spawn(refuse(shared.clone(), transport.clone(), stream, reply));
            }
            Some(info) => start_client(shared, &transport, stream, info),
            None => {
                shared
                    .stats
                    .rejected_connections
                    .fetch_add(1, Ordering::Relaxed);
                let reply = b"-ERR max number of clients reached\r\n";
                tokio::spawn(refuse(shared.clone(), transport.clone(), stream, reply));
            }
        }
    }
}

/// Runs the client's task on its network loop (`net_loops`): its socket
/// leaves the accept loop's reactor for that loop's.
fn start_client(
    shared: &Arc<Shared>,
    transport: &Transport,
    stream: TcpStream,
    info: Arc<crate::clients::ClientInfo>,
) {
    let loops = shared
        .loops
        .get()
        .expect("`serve` sets the network loops before it accepts");
    let socket = match stream.into_std() {
        Ok(socket) => socket,
        Err(e) => {
            log::warn!("client id={}: cannot hand its socket on: {e}", info.id);
            shared.clients.unregister(info.id);
            return;
        }
    };
    let (shared, transport, rank) = (shared.clone(), transport.clone(), loops.rank());
    loops.spawn(rank, async move {
        let stream = match TcpStream::from_std(socket) {
            Ok(stream) => stream,
            Err(e) => {
                log::warn!("client id={}: cannot serve its socket: {e}", info.id);
                shared.clients.unregister(info.id);
                return;
            }
        };
        match transport {
            Transport::Plain => crate::connection::serve(shared, stream, info, rank).await,
            Transport::Tls(acceptor) => {
                crate::tls::serve(shared, acceptor, stream, info, rank).await
            }
        }
    });
}

/// Tells a refused client why and closes it: over TLS once the handshake
/// is done, as Redis does (a TLS client could not read it otherwise).
async fn refuse(
    shared: Arc<Shared>,
    transport: Transport,
    stream: TcpStream,
    reply: &'static [u8],
) {
    match transport {
        Transport::Plain => send_and_close(stream, reply).await,
        Transport::Tls(acceptor) => {
            let peer = match stream.peer_addr() {
                Ok(peer) => peer,
                Err(_) => return,
            };
            if let Some(stream) =
                crate::tls::handshake(&shared, &acceptor, stream, peer, None).await
            {
                send_and_close(stream, reply).await;
            }
        }
    }
}

async fn send_and_close<S: Stream>(mut stream: S, reply: &[u8]) {
    let _ = stream.write_all(reply).await;
    let _ = stream.shutdown().await;
}
