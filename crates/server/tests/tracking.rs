//! Client-side caching (CLIENT TRACKING) against a redis-server 7.0 beside
//! Engram: each scenario runs on both with three clients (a tracking
//! client, a writer, a redirect target) and the transcripts of what every
//! client read are held equal, push messages included.

mod common;

use common::{Client, RedisServer};

/// The three connections of a scenario on one server, and what they read.
struct Clients {
    tracker: Client,
    writer: Client,
    target: Client,
    target_id: String,
    transcript: Vec<String>,
}

impl Clients {
    fn new(mut connect: impl FnMut() -> Client) -> Clients {
        let (tracker, writer, mut target) = (connect(), connect(), connect());
        let id = target.call("CLIENT ID");
        let target_id = id.trim_start_matches("(integer) ").to_string();
        Clients {
            tracker,
            writer,
            target,
            target_id,
            transcript: Vec::new(),
        }
    }

    /// Runs `line` on `who` (t: tracker, w: writer, r: target), with
    /// `$R` standing for the target's client id, and records the reply.
    fn run(&mut self, who: char, line: &str) {
        let line_sent = line.replace("$R", &self.target_id);
        let reply = self.client(who).call(&line_sent);
        let reply = self.comparable(reply);
        self.transcript.push(format!("{who} {line} -> {reply}"));
    }

    /// Reads one more reply (a push) on `who`.
    fn read(&mut self, who: char) {
        let reply = self.client(who).reply();
        let reply = self.comparable(reply);
        self.transcript.push(format!("{who} reads {reply}"));
    }

    /// `reply` with what differs between two servers by construction
    /// (client ids) replaced by names.
    fn comparable(&self, reply: String) -> String {
        let mut reply = reply;
        if let Some(at) = reply.find("\"id\", (integer) ") {
            // HELLO's map: the connection's own id.
            let start = at + "\"id\", (integer) ".len();
            let end = start + reply[start..].find(',').unwrap_or(0);
            reply.replace_range(start..end, "ID");
            return reply;
        }
        reply.replace(&format!("(integer) {}", self.target_id), "(integer) $R")
    }

    fn client(&mut self, who: char) -> &mut Client {
        match who {
            't' => &mut self.tracker,
            'w' => &mut self.writer,
            _ => &mut self.target,
        }
    }
}

/// One step: `(client, command)`, `(client, "READ")` for a push, or
/// `(_, "SLEEP")` for a pause of 200 ms (an expiry, a disconnection).
type Step<'a> = (char, &'a str);

fn same_on_both(steps: &[Step]) -> Vec<String> {
    let (server, _dir) = common::start();
    let redis = RedisServer::start();
    let mut engram = Clients::new(|| Client::connect(&server));
    let mut reference = Clients::new(|| redis.client());
    for clients in [&mut engram, &mut reference] {
        for &(who, line) in steps {
            match line {
                "READ" => clients.read(who),
                "SLEEP" => std::thread::sleep(std::time::Duration::from_millis(200)),
                _ => clients.run(who, line),
            }
        }
        // Nothing more is pending for anyone: a PING answers first.
        for who in ['t', 'w', 'r'] {
            if !steps.contains(&(who, "QUIT")) {
                clients.run(who, "PING");
            }
        }
    }
    assert_eq!(
        engram.transcript, reference.transcript,
        "transcripts (left: Engram, right: Redis)"
    );
    engram.transcript
}

#[test]
fn resp3_clients_get_invalidations_after_their_reply_and_once_per_read() {
    let transcript = same_on_both(&[
        ('t', "HELLO 3"),
        ('t', "CLIENT TRACKING on"),
        ('w', "SET k1 1"),
        ('t', "GET k1"),
        ('w', "SET k1 2"),
        ('t', "READ"),
        // Not read again: no second invalidation.
        ('w', "SET k1 3"),
        ('t', "MGET k1 k2"),
        ('w', "MSET k1 4 k2 5"),
        ('t', "READ"),
        ('t', "READ"),
        // Its own write: invalidated after the reply.
        ('t', "HSET h f 1"),
        ('t', "HGET h f"),
        ('t', "HDEL h f"),
        ('t', "READ"),
        // A transaction: the write before the read is not announced.
        ('t', "MULTI"),
        ('t', "SET a 1"),
        ('t', "GET a"),
        ('t', "EXEC"),
        ('w', "INCR a"),
        ('t', "READ"),
        ('t', "CLIENT TRACKING off"),
        ('t', "GET k1"),
        ('w', "SET k1 6"),
    ]);
    assert!(transcript
        .iter()
        .any(|line| line.contains("reads (push) [\"invalidate\", [\"k1\"]]")));
}

#[test]
fn redirection_to_a_resp2_subscriber_and_to_a_resp3_client() {
    same_on_both(&[
        ('r', "SUBSCRIBE __redis__:invalidate"),
        ('t', "CLIENT TRACKING on REDIRECT $R"),
        ('t', "CLIENT GETREDIR"),
        ('t', "GET k"),
        ('w', "SET k 1"),
        ('r', "READ"),
        ('w', "FLUSHALL"),
        ('r', "READ"),
        ('r', "UNSUBSCRIBE"),
        ('r', "HELLO 3"),
        ('t', "GET k"),
        ('w', "SET k 2"),
        ('r', "READ"),
    ]);
}

#[test]
fn bcast_prefixes_noloop_optin_and_optout() {
    same_on_both(&[
        ('t', "HELLO 3"),
        ('t', "CLIENT TRACKING on BCAST PREFIX a: PREFIX b:"),
        ('t', "CLIENT TRACKING on BCAST PREFIX c:"),
        ('t', "CLIENT TRACKINGINFO"),
        ('w', "MSET a:1 1 b:1 1 x:1 1"),
        ('t', "READ"),
        ('t', "READ"),
        ('w', "SET c:1 1"),
        ('t', "READ"),
        ('t', "CLIENT TRACKING off"),
        ('t', "CLIENT TRACKING on NOLOOP"),
        ('t', "GET n"),
        ('t', "SET n 1"),
        ('w', "SET n 2"),
        ('t', "CLIENT TRACKING off"),
        ('t', "CLIENT TRACKING on OPTIN"),
        ('t', "GET o1"),
        ('t', "CLIENT CACHING yes"),
        ('t', "CLIENT TRACKINGINFO"),
        ('t', "GET o2"),
        ('w', "MSET o1 1 o2 2"),
        ('t', "READ"),
        ('t', "CLIENT TRACKING off"),
        ('t', "CLIENT TRACKING on OPTOUT"),
        ('t', "CLIENT CACHING no"),
        ('t', "GET p1"),
        ('t', "GET p2"),
        ('w', "MSET p1 1 p2 2"),
        ('t', "READ"),
    ]);
}

#[test]
fn errors_info_and_a_broken_redirect() {
    same_on_both(&[
        ('t', "CLIENT TRACKINGINFO"),
        ('t', "CLIENT GETREDIR"),
        ('t', "CLIENT CACHING yes"),
        ('t', "CLIENT TRACKING on PREFIX a:"),
        ('t', "CLIENT TRACKING on OPTIN OPTOUT"),
        ('t', "CLIENT TRACKING on BCAST OPTIN"),
        ('t', "CLIENT TRACKING on REDIRECT 999999"),
        ('t', "CLIENT TRACKING on REDIRECT $R REDIRECT $R"),
        ('t', "CLIENT TRACKING maybe"),
        ('t', "CLIENT TRACKING on BCAST PREFIX ab PREFIX a"),
        ('t', "CLIENT TRACKING on BCAST PREFIX ab"),
        ('t', "CLIENT TRACKING on BCAST PREFIX abc"),
        ('t', "CLIENT TRACKING on"),
        ('t', "CLIENT CACHING no"),
        ('t', "CLIENT TRACKING off"),
        ('t', "CLIENT TRACKING on OPTIN"),
        ('t', "CLIENT TRACKING on OPTOUT"),
        ('t', "CLIENT CACHING no"),
        ('t', "CLIENT CACHING maybe"),
        ('t', "CLIENT TRACKING off"),
        // A RESP3 client whose redirect target left is told so.
        ('t', "HELLO 3"),
        ('t', "CLIENT TRACKING on REDIRECT $R"),
        ('t', "GET k"),
        ('r', "QUIT"),
        ('r', "SLEEP"),
        ('w', "SET k 1"),
        ('t', "READ"),
        ('t', "CLIENT TRACKINGINFO"),
        ('t', "CLIENT TRACKING off"),
    ]);
}

/// Keys a client tracked stay in the table after it turns tracking off,
/// until they are written, and a FLUSHALL or FLUSHDB empties the table
/// whether or not any client still tracks (Redis's suite, "Tracking info
/// is correct", runs after a test that leaves a key there): INFO's
/// tracking counts after each step, held equal to Redis's.
#[test]
fn a_flush_empties_the_table_when_nobody_tracks() {
    let (server, _dir) = common::start();
    let redis = RedisServer::start();
    let mut seen = Vec::new();
    for (mut tracker, mut writer) in [
        (Client::connect(&server), Client::connect(&server)),
        (redis.client(), redis.client()),
    ] {
        let counts = |writer: &mut Client| {
            ["tracking_total_keys", "tracking_total_items"]
                .map(|field| common::info_field(writer, "stats", field))
                .join("/")
        };
        let mut steps = Vec::new();
        tracker.call("HELLO 3");
        assert_eq!(tracker.call("CLIENT TRACKING on"), "OK");
        tracker.call("MGET a b c");
        assert_eq!(tracker.call("CLIENT TRACKING off"), "OK");
        steps.push(counts(&mut writer));
        assert_eq!(writer.call("SET a 1"), "OK");
        steps.push(counts(&mut writer));
        assert_eq!(writer.call("FLUSHDB"), "OK");
        steps.push(counts(&mut writer));
        assert_eq!(tracker.call("CLIENT TRACKING on"), "OK");
        tracker.call("GET d");
        assert_eq!(tracker.call("CLIENT TRACKING off"), "OK");
        steps.push(counts(&mut writer));
        assert_eq!(writer.call("FLUSHALL"), "OK");
        steps.push(counts(&mut writer));
        assert_eq!(
            tracker.call("PING"),
            "PONG",
            "no invalidation after tracking off"
        );
        seen.push(steps);
    }
    assert_eq!(seen[0], seen[1], "Engram's counts, then Redis's");
    assert_eq!(seen[0], ["3/3", "2/2", "0/0", "1/1", "0/0"]);
}

#[test]
fn expired_keys_are_invalidated() {
    same_on_both(&[
        ('t', "HELLO 3"),
        ('t', "CLIENT TRACKING on"),
        ('w', "SET e 1 PX 50"),
        ('t', "GET e"),
        // Deleted by the expiry cycle or by the read after: invalidated.
        ('w', "SLEEP"),
        ('w', "GET e"),
        ('t', "READ"),
        ('w', "SET e 2"),
    ]);
}

/// Lowering `tracking-table-max-keys` invalidates keys until the table
/// holds that many; which keys go is the server's choice (Redis picks at
/// random), so each server is held to the count, not to the keys.
#[test]
fn lowering_the_table_limit_invalidates_the_keys_over_it() {
    let (server, _dir) = common::start();
    let redis = RedisServer::start();
    for mut client in [Client::connect(&server), redis.client()] {
        client.call("HELLO 3");
        assert_eq!(client.call("CLIENT TRACKING on"), "OK");
        client.call("MGET k1 k2 k3");
        assert_eq!(client.call("CONFIG SET tracking-table-max-keys 1"), "OK");
        let mut gone = Vec::new();
        while gone.len() < 2 {
            let push = client.reply();
            let key = push
                .strip_prefix("(push) [\"invalidate\", [\"")
                .and_then(|rest| rest.strip_suffix("\"]]"))
                .unwrap_or_else(|| panic!("not an invalidation: {push}"))
                .to_string();
            assert!(["k1", "k2", "k3"].contains(&key.as_str()) && !gone.contains(&key));
            gone.push(key);
        }
        assert_eq!(
            client.call("CONFIG SET tracking-table-max-keys 1000000"),
            "OK"
        );
        assert_eq!(client.call("PING"), "PONG", "no third invalidation");
    }
}

/// A script that calls a read-only command makes its caller track the
/// keys the script declared (not the keys it read), as Redis's `call`;
/// one that only writes, or only PINGs, tracks nothing.
#[test]
fn scripts_track_their_declared_keys_when_they_read() {
    same_on_both(&[
        ('t', "HELLO 3"),
        ('t', "CLIENT TRACKING on"),
        ('w', "MSET k2 1 k1 1"),
        ('t', "EVAL redis.call('set','k3','bar') 2 k1 k2"),
        ('w', "MSET k2 2 k1 2"),
        ('t', "EVAL redis.call('get','k3') 2 k1 k2"),
        ('w', "MSET k2 2 k1 2"),
        ('t', "READ"),
        ('t', "READ"),
        ('t', "EVAL_RO redis.call('ping') 2 k1 k2"),
        ('w', "MSET k2 2 k1 2"),
        ('t', "EVAL_RO redis.call('get','k1') 2 k1 k2"),
        ('w', "MSET k2 3 k1 3"),
        ('t', "READ"),
        ('t', "READ"),
        ('w', "SET k3 again"),
    ]);
}
