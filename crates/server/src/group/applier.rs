//! The group's state machine: committed entries applied to the keyspace
//! on the apply thread, in log order, as every member applies them.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use smallvec::SmallVec;

use engram_replication::{Committed, Reply, StateMachine};

use super::entry::{decode_entry, Entry};
use crate::acl::User;
use crate::commands::{self, lookup};
use crate::resp::{Args, OwnedArgs, ReplyWriter};
use crate::session::Session;
use crate::shared::Shared;

/// Applies committed entries to the keyspace: every entry of a batch in
/// one atomic transaction that excludes the keyspace (as a script runs),
/// with the applied index in the same batch.
///
/// Each entry runs as its caller: with every permission when the caller
/// had them, else as a user rebuilt from the rules the entry carries, so
/// a script's `redis.call`s are refused what its caller may not do, and
/// every member decides alike whatever users its own ACL holds (an
/// outcome that hung on a node's configuration would split the state).
pub struct Applier {
    shared: Weak<Shared>,
    session: Session,
    unrestricted: Arc<User>,
    /// Callers seen lately, by their line (parsed once, not per entry).
    callers: HashMap<String, Arc<User>>,
}

/// How many distinct callers `Applier` keeps parsed.
const CALLERS_KEPT: usize = 64;

impl Applier {
    pub(super) fn new(shared: &Arc<Shared>) -> Applier {
        let info = shared
            .clients
            .detached("127.0.0.1:0".parse().expect("an address"));
        let unrestricted = User::unrestricted(b"default");
        Applier {
            shared: Arc::downgrade(shared),
            session: Session::new(info, unrestricted.clone(), true),
            unrestricted,
            callers: HashMap::new(),
        }
    }

    /// The user an entry runs as.
    fn caller(&mut self, line: Option<&str>) -> Arc<User> {
        let Some(line) = line else {
            return self.unrestricted.clone();
        };
        if let Some(user) = self.callers.get(line) {
            return user.clone();
        }
        if self.callers.len() >= CALLERS_KEPT {
            self.callers.clear();
        }
        // Channels are spelled out in the line, so the node's
        // `acl-pubsub-default` does not matter.
        let user = User::from_line(line, false).unwrap_or_else(|e| {
            // Written by a member's `User::line`: every member fails it
            // alike, and runs the entry allowed nothing.
            log::error!("a Raft entry's caller does not parse ({e}): its calls are refused");
            User::allowed_nothing(b"default")
        });
        self.callers.insert(line.to_string(), user.clone());
        user
    }
}

/// An apply transaction is committed once it holds this many writes (at
/// an entry's end), so its batch stays one engine record run, or once its
/// direct adds fill half of the undo journal (`Txn::undo_half_full`).
const APPLY_CHUNK_WRITES: usize = 512;

impl Applier {
    /// Commits a chunk's transaction with `index`, its last entry's, as
    /// the applied index, then tells this member's clients what the chunk
    /// did and sends its replies. `flushed`: the chunk held a FLUSHALL or
    /// FLUSHDB.
    fn end_chunk(
        &mut self,
        shared: &Shared,
        mut done: crate::keyspace::Txn<'_>,
        index: u64,
        answers: &mut Vec<(Reply, Vec<u8>)>,
        flushed: bool,
    ) {
        let committed = done.put_applied_index(index).and_then(|()| done.commit());
        if let Err(e) = committed {
            // The keyspace no longer follows the log: stop as a crash
            // would; the restart applies these entries again.
            log::error!("applying Raft entries up to {index} failed: {e}; stopping");
            std::process::exit(70);
        }
        // Keyspace events of what was applied, to this member's
        // subscribers (every member's, as Redis's replicas send those of
        // what they replay).
        crate::notify::publish_pending(shared, &mut self.session);
        // Clients tracking keys on this member: invalidations of what the
        // chunk changed (the apply thread noted them).
        if engram_keyspace::modified::is_wanted() {
            if flushed {
                engram_keyspace::modified::discard();
                shared.tracking.flushed(shared);
            } else {
                crate::tracking::invalidate_modified(shared, None);
            }
        }
        for (reply, bytes) in answers.drain(..) {
            reply.send(bytes);
        }
    }
}

/// What an entry's commands (an EXEC's among them) do to the keyspace as
/// a whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Reach {
    /// A FLUSHALL or FLUSHDB.
    flushes: bool,
    /// A SWAPDB.
    swaps: bool,
}

impl Reach {
    fn of(entry: &Entry<'_>) -> Reach {
        let mut reach = Reach::default();
        for item in &entry.items {
            for args in entry.commands(item) {
                let name = args.get(0);
                reach.flushes |=
                    name.eq_ignore_ascii_case(b"flushall") || name.eq_ignore_ascii_case(b"flushdb");
                reach.swaps |= name.eq_ignore_ascii_case(b"swapdb");
            }
        }
        reach
    }

    /// Whether the entry is a chunk of its own: the chunk before it
    /// commits first, with its applied index, and the entry commits at
    /// its end. A flush deletes outside the batch, at once (`Txn::flush`),
    /// so a crash before the chunk's commit leaves its deletions without
    /// the chunk's applied index, and the restart applies the chunk again
    /// on what the flush left: alone, that is the flush's own entry, and
    /// a FLUSHALL or FLUSHDB applied again deletes what it deleted before.
    /// (Not so for writes its own entry made before the flush, in an EXEC
    /// or a pipeline: the flush commits them early, and they are made
    /// again.) A SWAPDB's record goes in the batch and needs no chunk of
    /// its own; it gets one all the same, so that nothing a swap does at
    /// once can outlive a crash ahead of the entries before it.
    fn alone(self) -> bool {
        self.flushes || self.swaps
    }
}

impl StateMachine for Applier {
    fn apply(&mut self, mut entries: Vec<Committed>) {
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let guard = shared.keyspace.guard();
        let keyspace = guard.as_ref().expect("guard() holds a keyspace");
        // At `process` an INCR goes to the engine at once, undone from a
        // journal if its entry was not recorded applied
        // (`Txn::allow_direct_adds`).
        let direct = keyspace.commit().durability() == crate::keyspace::Durability::Process;
        // The open chunk: the index of its last entry, its replies, and
        // whether it holds a FLUSHALL or FLUSHDB (tracking clients then
        // hear of it whole, as after a single node's flush, not key by
        // key).
        let mut last = None;
        let mut answers = Vec::new();
        let mut flushed = false;
        let total = entries.len();
        // Decoded before any runs, so that the keys of the commands a few
        // places ahead can be warmed (`Warmer`).
        let replies: Vec<Option<Reply>> = entries.iter_mut().map(|c| c.reply.take()).collect();
        let decoded: Vec<Option<Entry<'_>>> = entries
            .iter()
            .map(|committed| {
                if committed.data.is_empty() {
                    return None;
                }
                let entry = decode_entry(&committed.data);
                if entry.is_none() {
                    log::error!("raft entry {} does not decode: skipped", committed.index);
                }
                entry
            })
            .collect();
        let mut run = BatchRun {
            warmer: Warmer::new(&decoded, |db, key| keyspace.prefetch_hash(db, key)),
            out: ReplyWriter::new(),
        };
        let mut txn = Some(apply_txn(keyspace, run.warmer.remaining()));
        for (at, ((committed, entry), reply)) in
            entries.iter().zip(&decoded).zip(replies).enumerate()
        {
            let index = committed.index;
            let reach = entry.as_ref().map(Reach::of).unwrap_or_default();
            if reach.alone() {
                // The entries before it commit first, with their index.
                if let Some(previous) = last.take() {
                    let done = txn.take().expect("commands hand the transaction back");
                    let chunk_flushed = std::mem::take(&mut flushed);
                    self.end_chunk(&shared, *done, previous, &mut answers, chunk_flushed);
                    txn = Some(apply_txn(keyspace, run.warmer.remaining()));
                }
            }
            if let Some(entry) = entry {
                flushed |= reach.flushes;
                let caller = self.caller(entry.caller);
                let session = &mut self.session;
                session.user = caller;
                session.monitor_fed = reply.is_some();
                session.clock_ms = Some(entry.time_ms);
                crate::random::seed(Some(index));
                if let Some(txn) = txn.as_mut() {
                    txn.begin_entry(index);
                    if direct {
                        txn.allow_direct_adds();
                    }
                }
                let bytes;
                (txn, bytes) = apply_entry(
                    &shared,
                    keyspace,
                    session,
                    txn,
                    entry,
                    &mut run,
                    reply.is_some(),
                );
                if let Some(reply) = reply {
                    answers.push((reply, bytes));
                }
            }
            last = Some(index);
            let full = txn
                .as_ref()
                .is_some_and(|t| t.buffered_writes() >= APPLY_CHUNK_WRITES || t.undo_half_full());
            if full || reach.alone() || at + 1 == total {
                let done = txn.take().expect("commands hand the transaction back");
                let chunk_flushed = std::mem::take(&mut flushed);
                self.end_chunk(&shared, *done, index, &mut answers, chunk_flushed);
                last = None;
                if at + 1 < total {
                    txn = Some(apply_txn(keyspace, run.warmer.remaining()));
                }
            }
        }
        self.session.clock_ms = None;
        self.session.monitor_fed = false;
        self.session.user = self.unrestricted.clone();
        crate::random::seed(None);
    }

    fn snapshot(&mut self) -> Result<Vec<u8>, String> {
        let shared = self.shared.upgrade().ok_or("the server stopped")?;
        let guard = shared.keyspace.guard();
        let keyspace = guard.as_ref().expect("guard() holds a keyspace");
        crate::snapshot::build(&shared, keyspace)
    }

    fn restore(&mut self, index: u64, data: &[u8]) -> Result<(), String> {
        let shared = self.shared.upgrade().ok_or("the server stopped")?;
        let guard = shared.keyspace.guard();
        let keyspace = guard.as_ref().expect("guard() holds a keyspace");
        crate::snapshot::load(&shared, keyspace, index, data)
    }

    fn sync(&mut self) -> Result<(), String> {
        let shared = self.shared.upgrade().ok_or("the server stopped")?;
        let guard = shared.keyspace.guard();
        let keyspace = guard.as_ref().expect("guard() holds a keyspace");
        // At `process` a write is promised to outlive the process, not the
        // machine: what was applied is already in the mapped files, which
        // the kernel writes back even after a crash of the process, so the
        // log may drop those entries now. A sync here wrote back every
        // page the apply had dirtied, and each next write to one faulted.
        if keyspace.commit().durability() == crate::keyspace::Durability::Process {
            return Ok(());
        }
        keyspace.sync().map_err(|e| e.to_string())
    }
}

/// Warms the engine's lines for the first key of the commands a few
/// places ahead of the one the apply runs (`Keyspace::prefetch`, in the
/// order its steps need): a member's reads and writes of random keys
/// each missed on the index and then the record (a quarter of the apply
/// under INCR). Commands are counted in the order `apply_entry` runs
/// them: every item's, every entry's.
struct Warmer<'e> {
    /// Per command, its index in the command table (`lookup`), found
    /// once for the warming and the run.
    found: Vec<Option<usize>>,
    /// Per command, the engine hash of its first key.
    hashes: Vec<Option<u64>>,
    /// Per command, an HSET's database, key and first field: the hash's
    /// slot for the field, then its value, are warmed too
    /// (`Txn::prefetch_hash_fields`), as the checkpointer's replay does.
    fields: Vec<Option<HashField<'e>>>,
    next: usize,
}

/// An HSET's database, key and first field.
type HashField<'e> = (usize, &'e [u8], &'e [u8]);
/// A hash's database and key.
type HashKey<'e> = (usize, &'e [u8]);
/// A field and what of it to warm.
type FieldStep<'e> = (&'e [u8], crate::keyspace::FieldWarm);

impl<'e> Warmer<'e> {
    /// `hash` gives a key's engine hash in a database
    /// (`Keyspace::prefetch_hash`).
    fn new(
        entries: &'e [Option<Entry<'e>>],
        hash: impl Fn(usize, &[u8]) -> Option<u64>,
    ) -> Warmer<'e> {
        let commands = entries.iter().flatten().flat_map(|entry| {
            entry
                .items
                .iter()
                .flat_map(move |item| entry.commands(item).map(move |args| (item.db, args)))
        });
        let mut found = Vec::new();
        let (hashes, fields) = commands
            .map(|(db, args)| {
                let command = lookup(args.get(0));
                found.push(command.map(|(index, _)| index));
                // A collection command's key is in the collections store
                // (the engine holds strings; `Txn::collection` looks there
                // only when no collection holds the key): its engine lines
                // are not warmed.
                let first_key = command
                    .filter(|(_, spec)| {
                        spec.keys.0 == 1 && args.len() >= 2 && !is_collection_group(spec.group)
                    })
                    .and_then(|_| hash(db, args.get(1)));
                let field = (args.len() >= 4 && args.get(0).eq_ignore_ascii_case(b"hset"))
                    .then(|| (db, args.get(1), args.get(2)));
                (first_key, field)
            })
            .unzip();
        Warmer {
            found,
            hashes,
            fields,
            next: 0,
        }
    }

    /// How many commands are still to run.
    fn remaining(&self) -> usize {
        self.found.len().saturating_sub(self.next)
    }

    /// Before the apply runs its next command (in `txn`, once it holds
    /// the collections): that command's index in the command table, None
    /// when it is unknown.
    fn step(
        &mut self,
        keyspace: &crate::keyspace::Keyspace,
        txn: Option<&crate::keyspace::Txn<'_>>,
    ) -> Option<usize> {
        for (ahead, step) in crate::keyspace::WARM_AHEAD {
            if let Some(&Some(hash)) = self.hashes.get(self.next + ahead) {
                keyspace.prefetch(hash, step);
            }
        }
        if let Some(txn) = txn {
            // The fields due, grouped by hash: a hot hash is looked up once
            // for both (as the benchmark's and a counter hash's HSETs are).
            let mut due: SmallVec<[(HashKey<'_>, SmallVec<[FieldStep<'_>; 2]>); 2]> =
                SmallVec::new();
            for (ahead, what) in crate::keyspace::WARM_FIELD_AHEAD {
                if let Some(&Some((db, key, field))) = self.fields.get(self.next + ahead) {
                    match due.iter_mut().find(|(hash, _)| *hash == (db, key)) {
                        Some((_, fields)) => fields.push((field, what)),
                        None => due.push(((db, key), smallvec::smallvec![(field, what)])),
                    }
                }
            }
            for ((db, key), fields) in due {
                txn.prefetch_hash_fields(db, key, &fields);
            }
        }
        self.next += 1;
        self.found.get(self.next - 1).copied().flatten()
    }
}

/// Whether a command runs a script (its writes are one group).
fn is_script(name: &[u8]) -> bool {
    [
        "eval",
        "evalsha",
        "fcall",
        "eval_ro",
        "evalsha_ro",
        "fcall_ro",
    ]
    .iter()
    .any(|script| name.eq_ignore_ascii_case(script.as_bytes()))
}

/// Whether a command group's keys hold collections (the `group` of
/// `CommandSpec`).
fn is_collection_group(group: &str) -> bool {
    matches!(
        group,
        "hash" | "list" | "set" | "sortedset" | "stream" | "geo"
    )
}

/// What the apply of one batch carries from entry to entry: the warmer's
/// walk, and one buffer the entries' replies are written into (a fresh
/// 16 KiB buffer per entry before).
struct BatchRun<'e> {
    warmer: Warmer<'e>,
    out: ReplyWriter,
}

/// A chunk's transaction: atomic, excluding the keyspace, and never
/// rolled back (a failed commit stops the process above, and commands
/// hand the transaction back whatever their outcome).
///
/// `commands`: how many commands are left to apply; the buffer is sized
/// for the chunk's writes at once (it grew by doubling, each time moving
/// what it held).
fn apply_txn(
    keyspace: &crate::keyspace::Keyspace,
    commands: usize,
) -> Box<crate::keyspace::Txn<'_>> {
    let mut txn = keyspace.lock_all(true);
    txn.forgo_rollback();
    txn.reserve_writes(commands.min(APPLY_CHUNK_WRITES));
    Box::new(txn)
}

/// Runs one entry's items against the apply transaction; their replies,
/// each `[len u32][bytes]`, when `answered` (the entry was proposed on this
/// member and its clients wait). Else none: a member that did not propose
/// it drops each item's reply once written instead of copying it out.
fn apply_entry<'s>(
    shared: &'s Shared,
    keyspace: &'s Arc<crate::keyspace::Keyspace>,
    session: &mut Session,
    mut txn: crate::commands::Exec<'s>,
    entry: &Entry<'_>,
    run: &mut BatchRun<'_>,
    answered: bool,
) -> (crate::commands::Exec<'s>, Vec<u8>) {
    let BatchRun { warmer, out } = run;
    out.buf.clear();
    out.set_resp3(entry.resp3);
    let mut replies = Vec::new();
    for item in &entry.items {
        let (db, exec, commands) = (item.db, item.exec, entry.commands(item));
        let start = out.len();
        session.db = db;
        if exec {
            out.array(commands.len());
        }
        let feed = |session: &Session, args: Args| {
            if !session.monitor_fed {
                crate::monitor::feed(shared, session, args);
            }
        };
        if exec {
            feed(session, OwnedArgs::from_slices(&[b"multi"]).args());
        }
        for args in commands {
            // The warmer's walk follows this one (`Warmer::new`); a name
            // compare keeps a walk that ever drifted from running another
            // command than the entry's.
            let found = warmer
                .step(keyspace, txn.as_deref())
                .filter(|&index| {
                    commands::TABLE[index]
                        .name
                        .as_bytes()
                        .eq_ignore_ascii_case(args.get(0))
                })
                .or_else(|| lookup(args.get(0)).map(|(index, _)| index));
            if let Some(txn) = txn.as_mut() {
                // Not inside EXEC or a script: a reader must not see one of
                // their writes before the rest.
                txn.pause_direct_adds(exec || is_script(args.get(0)));
            }
            match found {
                Some(index) => {
                    txn = commands::run(shared, keyspace, session, out, txn, index, args);
                    feed(session, args);
                }
                None => out.error("ERR unknown command"),
            }
        }
        if exec {
            feed(session, OwnedArgs::from_slices(&[b"exec"]).args());
        }
        if answered {
            let reply = &out.buf[start..];
            replies.extend_from_slice(&(reply.len() as u32).to_le_bytes());
            replies.extend_from_slice(reply);
        } else {
            out.buf.clear();
        }
    }
    (txn, replies)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The warmer's keys line up with the commands in the order the apply
    /// runs them (entries, items, an EXEC's queue), with a gap for a
    /// command without a first key and for an undecodable entry.
    #[test]
    fn the_warmer_follows_the_commands_in_apply_order() {
        use crate::group::Pending;
        let owned = |parts: &[&[u8]]| OwnedArgs::from_slices(parts);
        let first = super::super::entry::encode_entry(
            1,
            false,
            None,
            &[
                Pending::Command {
                    db: 0,
                    args: owned(&[b"set", b"a", b"1"]),
                    silent: false,
                    wait: None,
                },
                Pending::Exec {
                    db: 2,
                    queue: vec![owned(&[b"incr", b"b"]), owned(&[b"ping"])],
                    silent: false,
                },
            ],
        );
        let second = super::super::entry::encode_entry(
            2,
            false,
            None,
            &[Pending::Command {
                db: 1,
                args: owned(&[b"hset", b"c", b"f", b"v"]),
                silent: false,
                wait: None,
            }],
        );
        let entries = [decode_entry(&first), None, decode_entry(&second)];
        let warmer = Warmer::new(&entries, |db, key| Some(db as u64 * 100 + key[0] as u64));
        // Each command's table index, found once for the warming and the
        // run.
        let index = |name: &[u8]| lookup(name).map(|(index, _)| index);
        assert_eq!(
            warmer.found,
            [
                index(b"set"),
                index(b"incr"),
                index(b"ping"),
                index(b"hset")
            ]
        );
        assert_eq!(warmer.remaining(), 4);
        assert_eq!(
            warmer.hashes,
            [
                Some(u64::from(b'a')),
                Some(200 + u64::from(b'b')),
                None,
                // An HSET's key is a collection's: its field is warmed
                // instead of engine lines.
                None
            ]
        );
        // Only the HSET names a field to warm, with its database and key.
        assert_eq!(
            warmer.fields,
            [
                None,
                None,
                None,
                Some((1, b"c".as_slice(), b"f".as_slice()))
            ]
        );
    }

    fn command(db: usize, words: &[&[u8]]) -> crate::group::Pending {
        crate::group::Pending::Command {
            db,
            args: OwnedArgs::from_slices(words),
            silent: false,
            wait: None,
        }
    }

    /// A FLUSHALL, FLUSHDB or SWAPDB anywhere in an entry (an EXEC's
    /// queue too, in any case) makes it a chunk of its own; only a flush
    /// tells tracking clients the chunk was flushed.
    #[test]
    fn an_entry_that_flushes_or_swaps_is_a_chunk_of_its_own() {
        use crate::group::Pending;
        let owned = |parts: &[&[u8]]| OwnedArgs::from_slices(parts);
        let reach = |pending: &[Pending]| {
            let data = super::super::entry::encode_entry(1, false, None, pending);
            Reach::of(&decode_entry(&data).unwrap())
        };
        let plain = reach(&[command(0, &[b"set", b"a", b"1"]), command(0, &[b"dbsize"])]);
        assert_eq!(plain, Reach::default());
        assert!(!plain.alone());
        for name in [&b"FLUSHALL"[..], b"flushdb", b"FlushAll"] {
            let lone = reach(&[command(0, &[name])]);
            assert!(lone.alone() && lone.flushes, "{name:?}");
            let queued = reach(&[
                command(0, &[b"incr", b"c"]),
                Pending::Exec {
                    db: 1,
                    queue: vec![owned(&[b"set", b"k", b"v"]), owned(&[name, b"async"])],
                    silent: false,
                },
            ]);
            assert!(queued.alone() && queued.flushes, "{name:?} in EXEC");
        }
        let swap = reach(&[Pending::Exec {
            db: 0,
            queue: vec![owned(&[b"SWAPDB", b"0", b"1"])],
            silent: false,
        }]);
        assert!(swap.alone() && swap.swaps && !swap.flushes);
    }

    fn shared(dir: &std::path::Path) -> Arc<Shared> {
        use crate::keyspace::{open_stores_for_tests, Durability, Keyspace};
        let (store, collections) = open_stores_for_tests(dir);
        shared_with(Keyspace::open(store, collections, 16, Durability::Process).unwrap())
    }

    /// A member's keyspace at `process`: atomic batches and the undo
    /// journal of direct adds, as `serve` opens it in a group.
    fn member(dir: &std::path::Path) -> Arc<Shared> {
        let options = engram_keyspace::KeyspaceOptions {
            atomic_batches: true,
            durability: crate::keyspace::Durability::Process,
            checkpoints: engram_collections::CheckpointMode::Manual,
            ..engram_keyspace::KeyspaceOptions::default()
        };
        shared_with(
            crate::keyspace::Keyspace::open_dir(dir, &options)
                .unwrap()
                .keyspace,
        )
    }

    fn shared_with(keyspace: Arc<crate::keyspace::Keyspace>) -> Arc<Shared> {
        use crate::config::{Config, Runtime};
        let config = Config::default();
        Arc::new(Shared::new(
            keyspace,
            config.clone(),
            Arc::new(Runtime::new(&config)),
            std::time::Duration::ZERO,
            std::time::Duration::ZERO,
            0,
        ))
    }

    fn committed(index: u64, pending: &[crate::group::Pending]) -> Committed {
        Committed {
            index,
            term: 1,
            data: super::super::entry::encode_entry(1_000, false, None, pending).into(),
            reply: None,
        }
    }

    /// The apply commits the chunk before an entry with a flush, then
    /// the entry by itself: which store the applied index went to shows
    /// the cuts (a batch of collection writes only puts it in the
    /// collections', any other in the engine's). As one chunk, the flush
    /// would have committed the SET early, and the SADD with the applied
    /// index in the collections' copy, leaving the engine's at 1.
    #[test]
    fn the_apply_commits_around_an_entry_with_a_flush() {
        let dir = tempfile::tempdir().unwrap();
        let shared = shared(dir.path());
        let mut applier = Applier::new(&shared);
        applier.apply(vec![
            committed(1, &[command(0, &[b"set", b"a", b"1"])]),
            committed(
                2,
                &[command(1, &[b"set", b"b", b"1"]), command(0, &[b"flushdb"])],
            ),
            committed(3, &[command(0, &[b"sadd", b"s", b"m"])]),
        ]);
        let guard = shared.keyspace.guard();
        let keyspace = guard.as_ref().unwrap();
        assert_eq!(keyspace.applied_index_copies().unwrap(), (2, 3));
        assert_eq!((keyspace.dbsize(0), keyspace.dbsize(1)), (1, 1));
    }

    /// DBSIZE in the apply counts the chunk's buffered writes and applies
    /// none of them: they reach the store only with the chunk's applied
    /// index (it used to apply them, and a crash before the chunk's
    /// commit had them applied again after the restart).
    #[test]
    fn dbsize_in_the_apply_applies_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let shared = shared(dir.path());
        let mut applier = Applier::new(&shared);
        let guard = shared.keyspace.guard();
        let keyspace = guard.as_ref().unwrap();
        let mut txn = Some(apply_txn(keyspace, 2));
        let mut out = ReplyWriter::new();
        for words in [&[&b"incr"[..], b"c"][..], &[b"dbsize"]] {
            let args = OwnedArgs::from_slices(words);
            let (index, _) = lookup(words[0]).unwrap();
            txn = commands::run(
                &shared,
                keyspace,
                &mut applier.session,
                &mut out,
                txn,
                index,
                args.args(),
            );
        }
        assert_eq!(out.buf, b":1\r\n:1\r\n");
        // The crash: the chunk's transaction goes without its commit.
        drop(txn);
        assert_eq!(keyspace.store().get(b"\0c").unwrap(), None);
        assert_eq!(keyspace.dbsize(0), 0);
    }

    /// A long run of INCRs in one call of the apply (a follower catching
    /// up) goes to the engine directly all along: the chunk ends before
    /// the undo journal is full. Chunks counted only buffered writes, so
    /// such a run was one chunk; its journal filled after about 6,000
    /// INCRs, and every later one was buffered and written as a new
    /// record.
    #[test]
    fn a_long_run_of_incrs_never_finds_the_undo_journal_full() {
        let dir = tempfile::tempdir().unwrap();
        let shared = member(dir.path());
        let mut applier = Applier::new(&shared);
        let keys: Vec<Vec<u8>> = (0..20_000)
            .map(|i| format!("counter:{i:05}").into_bytes())
            .collect();
        let run = |first: u64, name: &[u8], value: Option<&[u8]>| -> Vec<Committed> {
            keys.iter()
                .zip(first..)
                .map(|(key, index)| {
                    let mut words = vec![name, key.as_slice()];
                    words.extend(value);
                    committed(index, &[command(0, &words)])
                })
                .collect()
        };
        applier.apply(run(1, b"set", Some(b"41")));
        applier.apply(run(20_001, b"incr", None));
        let guard = shared.keyspace.guard();
        let keyspace = guard.as_ref().unwrap();
        assert_eq!(keyspace.apply_undo_refused(), 0);
        assert_eq!(keyspace.applied_index().unwrap(), 40_000);
        let mut out = ReplyWriter::new();
        for key in [&keys[0], &keys[12_345], &keys[19_999]] {
            let args = OwnedArgs::from_slices(&[b"get", key]);
            let (index, _) = lookup(b"get").unwrap();
            commands::run(
                &shared,
                keyspace,
                &mut applier.session,
                &mut out,
                None,
                index,
                args.args(),
            );
        }
        assert_eq!(out.buf, b"$2\r\n42\r\n$2\r\n42\r\n$2\r\n42\r\n");
    }

    #[test]
    fn an_entrys_caller_is_rebuilt_from_its_line_and_a_bad_line_allows_nothing() {
        let line = "user app on resetchannels ~app:* -@all +eval +set";
        let user = User::from_line(line, false).unwrap();
        assert_eq!(user.name, b"app");
        assert!(!user.rules().unrestricted);
        assert_eq!(
            user.line(),
            User::from_line(&user.line(), false).unwrap().line()
        );
        assert!(User::from_line("user app ~x ((", false).is_err());
        assert!(User::from_line("user a on\nuser b on", false).is_err());
        assert!(User::from_line("", false).is_err());
        assert!(!User::allowed_nothing(b"x").rules().root().all_commands);
    }
}
