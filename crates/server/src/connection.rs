//! One client connection: read, parse every complete command in the buffer
//! (pipelining), run them, wait for durability if any wrote, send all the
//! replies with one write.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::clients::ClientInfo;
use crate::commands::{execute, unwatch_all};
use crate::resp::{ReplyWriter, RequestParser, Step};
use crate::session::Session;
use crate::shared::Shared;

const READ_CHUNK: usize = 16 * 1024;
/// Output buffers larger than this are given back after use, so one big
/// reply does not pin memory for the connection's life.
const KEEP_OUTPUT_CAPACITY: usize = 1 << 20;

pub async fn serve(shared: Arc<Shared>, mut stream: TcpStream, info: Arc<ClientInfo>) {
    let _ = stream.set_nodelay(true);
    let mut session = Session::new(info.clone(), !shared.runtime.auth_required());
    let mut out = ReplyWriter::new();
    let mut parser = RequestParser::new(shared.runtime.proto_max_bulk_len.load(Ordering::Relaxed));
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let result = run(
        &shared,
        &mut stream,
        &mut session,
        &mut out,
        &mut parser,
        &mut buf,
    )
    .await;
    if let Err(e) = result {
        log::debug!("client id={} closed: {e}", info.id);
    }
    unwatch_all(&shared, &mut session);
    shared.clients.unregister(info.id);
}

async fn run(
    shared: &Shared,
    stream: &mut TcpStream,
    session: &mut Session,
    out: &mut ReplyWriter,
    parser: &mut RequestParser,
    buf: &mut BytesMut,
) -> std::io::Result<()> {
    let info = session.info.clone();
    loop {
        if info.killed.load(Ordering::Acquire) {
            return Ok(());
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        let timeout = shared.runtime.timeout_secs.load(Ordering::Relaxed);
        let read = tokio::select! {
            read = stream.read_buf(buf) => read?,
            _ = info.kill.notified() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_secs(timeout)), if timeout > 0 => {
                log::debug!("client id={} idle for {timeout} s: closing", info.id);
                return Ok(());
            }
        };
        if read == 0 {
            return Ok(());
        }
        shared
            .stats
            .net_input_bytes
            .fetch_add(read as u64, Ordering::Relaxed);
        parser.set_max_bulk(shared.runtime.proto_max_bulk_len.load(Ordering::Relaxed));

        let mut offset = 0;
        let mut failure = None;
        loop {
            match parser.parse(&buf[offset..]) {
                Ok(Step::Command { consumed }) => {
                    execute(shared, session, out, parser.args(&buf[offset..]));
                    offset += consumed;
                    if session.close {
                        break;
                    }
                    if out.len() >= shared.config.client_output_buffer_limit {
                        // A client pipelining faster than it reads: send
                        // what we have before running more.
                        flush(shared, stream, session, out).await?;
                    }
                }
                Ok(Step::Skip { consumed }) => offset += consumed,
                Ok(Step::Incomplete { needed }) => {
                    let limit = shared
                        .runtime
                        .client_query_buffer_limit
                        .load(Ordering::Relaxed);
                    if needed > limit {
                        failure = Some(format!(
                            "Protocol error: the request needs {needed} bytes, more than \
                             client-query-buffer-limit ({limit})"
                        ));
                    } else if needed > buf.len() - offset {
                        // A large bulk announced: make room for it at once.
                        buf.reserve(needed - (buf.len() - offset));
                    }
                    break;
                }
                Err(e) => {
                    failure = Some(e.to_string());
                    break;
                }
            }
        }
        buf.advance(offset);
        if let Some(text) = failure {
            shared.stats.protocol_errors.fetch_add(1, Ordering::Relaxed);
            log::info!("client id={} addr={}: {text}; closing", info.id, info.addr);
            out.error(&format!("ERR {text}"));
            session.close = true;
        }
        flush(shared, stream, session, out).await?;
        if session.close {
            let _ = stream.shutdown().await;
            return Ok(());
        }
    }
}

/// Waits until this batch's writes are durable (if the mode asks for it),
/// then sends the replies.
async fn flush(
    shared: &Shared,
    stream: &mut TcpStream,
    session: &mut Session,
    out: &mut ReplyWriter,
) -> std::io::Result<()> {
    if session.wrote {
        session.wrote = false;
        if let Some(ticket) = shared
            .durable
            .wrote(shared.runtime.durability(), shared.dax)
        {
            shared.durable.wait(ticket).await;
        }
    }
    if out.is_empty() {
        return Ok(());
    }
    stream.write_all(&out.buf).await?;
    shared
        .stats
        .net_output_bytes
        .fetch_add(out.len() as u64, Ordering::Relaxed);
    out.buf.clear();
    if out.buf.capacity() > KEEP_OUTPUT_CAPACITY {
        out.buf.shrink_to(READ_CHUNK);
    }
    Ok(())
}
