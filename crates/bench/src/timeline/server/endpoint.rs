//! Where the clients connect: an address, the connections opened to it, and
//! the prefill over them. The same for Engram's in-process server and for
//! the Redis peer: everything the clients do goes through an [`Endpoint`].

use std::net::SocketAddr;
use std::time::Duration;

use parking_lot::Mutex;
use redis::{Connection, Pipeline};

use crate::progress::progress_bar;
use crate::server::System;
use crate::timeline::error::Result;
use crate::timeline::records;
use crate::timeline::stats::STALL_LIMIT;
use crate::timeline::Config;

/// A server the clients talk to, by address.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// Which server it is (named in errors: "engram: ...", "redis: ...").
    pub system: System,
    url: String,
}

impl Endpoint {
    pub fn new(system: System, address: SocketAddr) -> Endpoint {
        Endpoint {
            system,
            url: format!("redis://{address}/"),
        }
    }

    /// A new connection. A reply that takes longer than [`STALL_LIMIT`]
    /// fails the run rather than hanging it.
    pub fn connect(&self) -> Result<Connection> {
        let connection = redis::Client::open(self.url.as_str())?.get_connection()?;
        connection.set_read_timeout(Some(STALL_LIMIT))?;
        Ok(connection)
    }

    /// One connection per client thread, taken by [`Connections::take`].
    pub fn connect_all(&self, threads: usize) -> Result<Connections> {
        let all = (0..threads)
            .map(|_| self.connect().map(|c| Mutex::new(Some(c))))
            .collect::<Result<_>>()?;
        Ok(Connections(all))
    }

    /// Writes records `0..config.shape.records` with `config.threads`
    /// connections, a pipeline per chunk, `commands(id, pipeline)` adding
    /// each record's commands, under a progress bar labelled `label`; then
    /// checks that the server holds the records and `extra_keys` keys more.
    pub fn prefill(
        &self,
        config: &Config,
        label: &str,
        commands: &(dyn Fn(u64, &mut Pipeline) + Sync),
        extra_keys: u64,
    ) -> Result<Duration> {
        let records = config.shape.records;
        let bar = progress_bar(config.progress, Some(records), &format!("{label} prefill"));
        let elapsed = records::write_in_parallel(
            records,
            config.threads,
            &bar,
            |_| self.connect(),
            |connection, ids| {
                let mut pipeline = redis::pipe();
                for id in ids {
                    commands(id, &mut pipeline);
                }
                pipeline.query::<()>(connection)?;
                Ok(())
            },
        );
        bar.finish_and_clear();
        let keys: u64 = redis::cmd("DBSIZE").query(&mut self.connect()?)?;
        records::check_prefilled(self.system.name(), keys, records + extra_keys)?;
        elapsed
    }
}

/// The client threads' connections, one each.
pub struct Connections(Vec<Mutex<Option<Connection>>>);

impl Connections {
    /// Thread `thread`'s connection (once).
    pub fn take(&self, thread: usize) -> Connection {
        self.0[thread]
            .lock()
            .take()
            .expect("one connection per thread, taken once")
    }
}
