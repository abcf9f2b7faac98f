//! `engram-bench stream-pairs`: consumers that read one entry from a
//! stream's group and acknowledge it, as a job queue does (BullMQ's
//! workers, any XREADGROUP/XACK consumer loop): `XREADGROUP GROUP g cN
//! COUNT 1 STREAMS s >`, then `XACK s g <the ID it returned>`.
//! redis-benchmark cannot run this pair (its commands cannot name what an
//! earlier reply returned), so this client does, against any server that
//! speaks RESP, with the same shape as redis-benchmark: one thread, an
//! event loop (tokio's current-thread runtime) over `--clients`
//! connections, one request in flight on each. Every XACK must answer 1
//! (the entry was pending and is acknowledged now): anything else stops
//! the run with an error, so a server that acknowledges nothing cannot
//! look fast.
//!
//! The stream must hold at least `--pairs` entries not yet delivered to the
//! group (`scripts/streams_bench.py` fills it and creates the group).

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The flags of `engram-bench stream-pairs`.
#[derive(Clone, Debug, clap::Args)]
pub struct StreamPairsArgs {
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    #[arg(long)]
    pub port: u16,
    /// Connections, each a consumer of its own (`c0`, `c1`, ...).
    #[arg(long, default_value_t = 50)]
    pub clients: usize,
    /// Read-and-acknowledge pairs in all, shared among the connections.
    #[arg(long, default_value_t = 100_000)]
    pub pairs: u64,
    #[arg(long, default_value = "bench")]
    pub stream: String,
    #[arg(long, default_value = "g")]
    pub group: String,
}

/// What a run measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairsResult {
    pub pairs: u64,
    pub elapsed: Duration,
}

impl PairsResult {
    pub fn pairs_per_second(&self) -> f64 {
        self.pairs as f64 / self.elapsed.as_secs_f64()
    }
}

pub fn cli(args: StreamPairsArgs) -> Result<()> {
    let result = run(&args)?;
    // One CSV line, as redis-benchmark --csv prints: the script reads it.
    println!(
        "\"XREADGROUP+XACK\",\"{:.2}\",\"{}\",\"{:.3}\"",
        result.pairs_per_second(),
        result.pairs,
        result.elapsed.as_secs_f64()
    );
    Ok(())
}

pub fn run(args: &StreamPairsArgs) -> Result<PairsResult> {
    if args.clients == 0 {
        bail!("--clients must be at least 1");
    }
    if args.pairs == 0 {
        bail!("--pairs must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("starting the client's event loop")?;
    runtime.block_on(async {
        let mut connections = Vec::with_capacity(args.clients);
        for client in 0..args.clients {
            let stream = TcpStream::connect((args.host.as_str(), args.port))
                .await
                .with_context(|| format!("connecting to {}:{}", args.host, args.port))?;
            stream.set_nodelay(true)?;
            connections.push((client, stream));
        }
        let share = args.pairs / args.clients as u64;
        let extra = args.pairs % args.clients as u64;
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for (client, stream) in connections {
            let pairs = share + u64::from((client as u64) < extra);
            let consumer = Consumer::new(stream, args, client);
            tasks.spawn(consumer.run(pairs));
        }
        let mut done = 0;
        while let Some(joined) = tasks.join_next().await {
            done += joined.context("a consumer task panicked")??;
        }
        Ok(PairsResult {
            pairs: done,
            elapsed: started.elapsed(),
        })
    })
}

/// One connection's consumer loop.
struct Consumer {
    stream: TcpStream,
    /// `XREADGROUP GROUP g cN COUNT 1 STREAMS s >`, encoded once.
    read: Vec<u8>,
    stream_name: Vec<u8>,
    group: Vec<u8>,
    request: Vec<u8>,
    input: Vec<u8>,
}

impl Consumer {
    fn new(stream: TcpStream, args: &StreamPairsArgs, client: usize) -> Consumer {
        let consumer = format!("c{client}");
        let mut read = Vec::new();
        encode_command(
            &[
                b"XREADGROUP",
                b"GROUP",
                args.group.as_bytes(),
                consumer.as_bytes(),
                b"COUNT",
                b"1",
                b"STREAMS",
                args.stream.as_bytes(),
                b">",
            ],
            &mut read,
        );
        Consumer {
            stream,
            read,
            stream_name: args.stream.as_bytes().to_vec(),
            group: args.group.as_bytes().to_vec(),
            request: Vec::with_capacity(128),
            input: Vec::with_capacity(4096),
        }
    }

    /// Runs `pairs` pairs; returns how many it ran.
    async fn run(mut self, pairs: u64) -> Result<u64> {
        for done in 0..pairs {
            self.stream.write_all(&self.read).await?;
            let reply = self.reply().await?;
            let id = delivered_id(&reply).ok_or_else(|| {
                anyhow!(
                    "XREADGROUP delivered no entry after {done} pairs on this connection \
                     (is the stream filled and the group created?): {reply:?}"
                )
            })?;
            self.request.clear();
            encode_command(
                &[b"XACK", &self.stream_name, &self.group, &id],
                &mut self.request,
            );
            self.stream.write_all(&self.request).await?;
            match self.reply().await? {
                Reply::Integer(1) => {}
                other => bail!(
                    "XACK of {} answered {other:?}, not 1",
                    String::from_utf8_lossy(&id)
                ),
            }
        }
        Ok(pairs)
    }

    /// The next whole reply on the connection.
    async fn reply(&mut self) -> Result<Reply> {
        loop {
            if let Some((reply, used)) = parse(&self.input)? {
                self.input.drain(..used);
                return Ok(reply);
            }
            let mut chunk = [0u8; 4096];
            let read = self.stream.read(&mut chunk).await?;
            if read == 0 {
                bail!("the server closed the connection");
            }
            self.input.extend_from_slice(&chunk[..read]);
        }
    }
}

/// A RESP2 request: an array of bulk strings (lengths written in place:
/// this runs for every XACK, on the client's one core).
fn encode_command(words: &[&[u8]], out: &mut Vec<u8>) {
    use std::io::Write as _;
    write!(out, "*{}\r\n", words.len()).expect("writing to a vector");
    for word in words {
        write!(out, "${}\r\n", word.len()).expect("writing to a vector");
        out.extend_from_slice(word);
        out.extend_from_slice(b"\r\n");
    }
}

/// A RESP2 reply.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Status(String),
    Error(String),
    Integer(i64),
    Bulk(Vec<u8>),
    Array(Vec<Reply>),
    Nil,
}

/// One reply from the front of `input` and the bytes it took, or `None`
/// when `input` does not hold a whole one yet.
pub fn parse(input: &[u8]) -> Result<Option<(Reply, usize)>> {
    let Some(end) = input.windows(2).position(|pair| pair == b"\r\n") else {
        return Ok(None);
    };
    let Some((&kind, line)) = input[..end].split_first() else {
        bail!("an empty reply line");
    };
    let text = std::str::from_utf8(line).context("a reply line that is not UTF-8")?;
    let after_line = end + 2;
    let number = || -> Result<i64> {
        text.parse()
            .with_context(|| format!("'{text}' is not a length or integer"))
    };
    Ok(Some(match kind {
        b'+' => (Reply::Status(text.to_string()), after_line),
        b'-' => (Reply::Error(text.to_string()), after_line),
        b':' => (Reply::Integer(number()?), after_line),
        b'$' => {
            let length = number()?;
            if length < 0 {
                return Ok(Some((Reply::Nil, after_line)));
            }
            let end = after_line + length as usize;
            if input.len() < end + 2 {
                return Ok(None);
            }
            (Reply::Bulk(input[after_line..end].to_vec()), end + 2)
        }
        b'*' => {
            let count = number()?;
            if count < 0 {
                return Ok(Some((Reply::Nil, after_line)));
            }
            let mut items = Vec::with_capacity(count as usize);
            let mut at = after_line;
            for _ in 0..count {
                let Some((item, used)) = parse(&input[at..])? else {
                    return Ok(None);
                };
                items.push(item);
                at += used;
            }
            (Reply::Array(items), at)
        }
        other => bail!("unknown reply type '{}'", other as char),
    }))
}

/// The ID of the one entry an XREADGROUP ... COUNT 1 reply delivered:
/// `[[stream, [[id, fields]]]]`.
pub fn delivered_id(reply: &Reply) -> Option<Vec<u8>> {
    let Reply::Array(streams) = reply else {
        return None;
    };
    let Reply::Array(stream) = streams.first()? else {
        return None;
    };
    let Reply::Array(entries) = stream.get(1)? else {
        return None;
    };
    let Reply::Array(entry) = entries.first()? else {
        return None;
    };
    match entry.first()? {
        Reply::Bulk(id) => Some(id.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_whole_or_not_at_all() {
        let read = b"*1\r\n*2\r\n$5\r\nbench\r\n*1\r\n*2\r\n$3\r\n1-0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n:1\r\n";
        let (reply, used) = parse(read).unwrap().unwrap();
        assert_eq!(delivered_id(&reply), Some(b"1-0".to_vec()));
        assert_eq!(parse(&read[used..]).unwrap().unwrap().0, Reply::Integer(1));
        // Every prefix of the first reply is incomplete, never an error.
        for cut in 0..used {
            assert_eq!(parse(&read[..cut]).unwrap(), None, "prefix of {cut} bytes");
        }
        // Nothing delivered (the group has read everything): no ID.
        let (nil, _) = parse(b"*-1\r\n").unwrap().unwrap();
        assert_eq!(delivered_id(&nil), None);
        let (error, _) = parse(b"-NOGROUP No such key\r\n").unwrap().unwrap();
        assert_eq!(delivered_id(&error), None);
        assert!(parse(b"?what\r\n").is_err());
        assert!(parse(b":x\r\n").is_err());
    }

    #[test]
    fn commands_encode_as_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode_command(&[b"XACK", b"s", b"g", b"1-0"], &mut out);
        assert_eq!(
            out,
            b"*4\r\n$4\r\nXACK\r\n$1\r\ns\r\n$1\r\ng\r\n$3\r\n1-0\r\n"
        );
    }
}
