//! Power failure on emulated persistent memory, proven at the file-system
//! level. `engram serve` runs on a lazy FUSE file system (`lazy_fs/`) that
//! keeps every write not yet fsynced or msynced in memory and forgets it
//! when the power is cut. Clients write strings and every collection type
//! (list, hash, set, sorted set, stream), bits of a 2 MiB bitmap (updated
//! in place: not at the log's tail), MSETs of three keys, and
//! MULTI/EXECs over all six types; the power is cut at a random moment,
//! the server SIGKILLed, the file system remounted from its durable state
//! only, and the server started again on it.
//!
//! Under `--durability always`, over 20 cuts, every acknowledged write is
//! there and every MSET and EXEC is whole or absent. Under `process`,
//! which promises to survive a process crash and not a power failure,
//! acknowledged writes are lost: the same check bites. The file system is
//! checked first: writes, names and stores to a shared mapping that were
//! never synced are lost, synced ones kept.
//!
//! Without /dev/fuse the tests say so and pass; with it, a mount that
//! fails fails them.

mod common;
mod lazy_fs;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use common::connect;
use lazy_fs::LazyFs;

const CLIENTS: usize = 3;
/// Power cuts under `always`: each must lose nothing acknowledged.
const ALWAYS_CUTS: usize = 20;
/// Power cuts under `process`: together they must lose something.
const PROCESS_CUTS: usize = 5;
/// The power is cut this long after the writers start (at random within),
/// and once every writer has had a write acknowledged.
const CUT_AFTER_MS: std::ops::Range<u64> = 100..600;
/// Hash fields and sorted-set members a client's writes go round (so they
/// overwrite as well as add).
const FIELDS: u64 = 16;
/// SETBIT's offsets lie in the last `BIT_SPAN` bits of a `BITMAP_BITS`
/// bitmap: 2 MiB, larger than a log block, so the engine updates it in
/// place (a word's page in the next sync) rather than appending it anew.
const BITMAP_BITS: u64 = 1 << 24;
const BIT_SPAN: u64 = 1 << 20;

/// The two server tests take turns: each wants both cores.
static SERVER_TESTS: Mutex<()> = Mutex::new(());

/// Mounts a lazy file system in a fresh directory, or says why this
/// machine cannot (then the test passes having checked nothing).
fn mount() -> Option<(tempfile::TempDir, LazyFs)> {
    if let Some(why) = lazy_fs::unavailable() {
        // CI has root and /dev/fuse: there the test must run.
        if std::env::var_os("CI").is_some() {
            panic!("CI must run the power-cut test, but: {why}");
        }
        println!("power-cut test skipped: {why}");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let mountpoint = dir.path().join("mnt");
    std::fs::create_dir(&mountpoint).unwrap();
    let fs = LazyFs::mount(&mountpoint)
        .unwrap_or_else(|e| panic!("mounting the lazy file system at {mountpoint:?}: {e}"));
    Some((dir, fs))
}

#[test]
fn lazy_fs_keeps_synced_files_and_names_and_drops_the_rest() {
    let Some((_dir, mut fs)) = mount() else {
        return;
    };
    let d = fs.mountpoint().join("d");
    std::fs::create_dir(&d).unwrap();
    let write_synced = |name: &str, bytes: &[u8]| {
        let mut file = std::fs::File::create(d.join(name)).unwrap();
        file.write_all(bytes).unwrap();
        file.sync_all().unwrap();
    };
    write_synced("synced", b"synced bytes");
    // A new file made durable the way Engram makes its data files.
    write_synced("tmp", b"renamed");
    std::fs::rename(d.join("tmp"), d.join("final")).unwrap();
    std::fs::File::open(&d).unwrap().sync_all().unwrap();
    // An unlink whose directory is never synced.
    write_synced("unlinked", b"back again");
    std::fs::remove_file(d.join("unlinked")).unwrap();
    // Bytes and a name never synced.
    std::fs::OpenOptions::new()
        .append(true)
        .open(d.join("synced"))
        .unwrap()
        .write_all(b" and more")
        .unwrap();
    std::fs::write(d.join("unsynced"), b"gone").unwrap();
    assert_eq!(
        std::fs::read(d.join("synced")).unwrap(),
        b"synced bytes and more"
    );

    fs.cut_power();
    fs.power_cycle().unwrap();

    assert_eq!(std::fs::read(d.join("synced")).unwrap(), b"synced bytes");
    assert_eq!(std::fs::read(d.join("final")).unwrap(), b"renamed");
    assert!(!d.join("tmp").exists(), "the rename was synced");
    assert_eq!(std::fs::read(d.join("unlinked")).unwrap(), b"back again");
    assert!(!d.join("unsynced").exists(), "its name was never synced");
    fs.unmount().unwrap();
}

/// Set in the child process that makes the mapped stores.
const MAPPED_STORES_CHILD: &str = "ENGRAM_LAZY_FS_MAPPED_STORES";

#[test]
fn lazy_fs_keeps_msynced_stores_to_a_shared_mapping_and_drops_the_rest() {
    if let Some(path) = std::env::var_os(MAPPED_STORES_CHILD) {
        return mapped_stores(Path::new(&path));
    }
    let Some((_dir, mut fs)) = mount() else {
        return;
    };
    let path = fs.mountpoint().join("region");
    // The stores are made by a child process (this test again): a process
    // must not map a file of a FUSE file system it serves itself. Its
    // munmap holds the address-space lock while it waits for the
    // write-back of the dirty pages, and the file system's threads need
    // that lock to serve the write-back (any page fault, any allocation
    // that maps memory): a deadlock. `engram serve` is its own process too.
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "lazy_fs_keeps_msynced_stores_to_a_shared_mapping_and_drops_the_rest",
            "--nocapture",
        ])
        .env(MAPPED_STORES_CHILD, &path)
        .output()
        .unwrap();
    assert!(
        child.status.success(),
        "the child making the stores: {}\n{}{}",
        child.status,
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );
    let synced = fs.stats();
    assert!(
        synced.syncs >= 2,
        "msync reached the file system: {synced:?}"
    );
    fs.cut_power();
    fs.power_cycle().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let page = 4096;
    assert_eq!(bytes.len(), 32 * page, "the growth was synced");
    let at = |page_index: usize, len: usize| &bytes[page_index * page..page_index * page + len];
    assert_eq!(at(0, 24), b"first page\0\0\0\0\0\0\0\0\0\0\0\0\0\0");
    assert_eq!(at(20, 13), b"in the growth");
    assert_eq!(at(5, 12), b"synced alone");
    assert!(at(3, 12).iter().all(|&b| b == 0), "never synced");
    assert!(at(6, 15).iter().all(|&b| b == 0), "never synced");
    fs.unmount().unwrap();
}

/// The child's part: stores through Engram's own region (a shared
/// writable mapping grown with posix_fallocate, made durable with
/// msync(MS_SYNC)), some synced and some not; the process exits with the
/// last ones still dirty (they are written back at munmap, and never
/// synced).
fn mapped_stores(path: &Path) {
    use engram_pmem::{ModeChoice, PmemOffset, Region, RegionOptions};
    let page = 4096;
    let options = RegionOptions {
        mode: ModeChoice::Emulated,
        fine_writeback: true,
        ..RegionOptions::default()
    };
    let region = Region::create(path, 16 * page, options).unwrap();
    region.write(PmemOffset(0), b"first page");
    region.grow_to(32 * page).unwrap();
    region.write(PmemOffset(20 * page), b"in the growth");
    region.sync_all().unwrap();
    region.write(PmemOffset(0), b"FIRST PAGE, never synced");
    region.write(PmemOffset(3 * page), b"never synced");
    // An msync of one page makes that page durable, not the others.
    region.write(PmemOffset(5 * page), b"synced alone");
    region.sync(PmemOffset(5 * page), 1).unwrap();
    region.write(PmemOffset(6 * page), b"dirty beside it");
}

#[test]
fn always_keeps_every_acknowledged_write_across_power_cuts() {
    let _turn = SERVER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let Some((dir, fs)) = mount() else { return };
    let outcome = power_cuts(dir.path(), fs, "always", ALWAYS_CUTS);
    assert!(
        outcome.mismatches.is_empty(),
        "acknowledged writes lost or batches torn under --durability always:\n{}\n{}",
        outcome.mismatches.join("\n"),
        outcome.cuts_that_lost.join("\n")
    );
}

#[test]
fn process_loses_acknowledged_writes_on_a_power_cut() {
    let _turn = SERVER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let Some((dir, fs)) = mount() else { return };
    let outcome = power_cuts(dir.path(), fs, "process", PROCESS_CUTS);
    assert!(
        !outcome.mismatches.is_empty(),
        "{PROCESS_CUTS} power cuts under --durability process lost no acknowledged \
         write: the test cannot tell durable from lost"
    );
}

/// The power fails between the two syncs of one group commit: the data
/// file's (`values.pmem`: strings, and the intents of multi-key batches)
/// is durable, the collections' operation log's is not. An EXEC in flight
/// that writes a string and collections must still be whole or absent.
/// The cut lands at that exact point: right after the second sync of
/// `values.pmem` once the EXEC is sent (the first is its intent's
/// barrier, the second the one its reply waits for, before the log's).
#[test]
fn an_exec_in_flight_is_whole_or_absent_when_the_power_fails_between_the_two_files() {
    let _turn = SERVER_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let Some((dir, mut fs)) = mount() else { return };
    let data = fs.mountpoint().join("data");
    let boot_id = dir.path().join("boot_id");
    let mut rng = Rng(1);
    let args = ["--durability", "always", "--mode", "emulated"];
    let mut served = serve_after_boot(&data, &args, &boot_id, &mut rng);
    let mut con = connect(served.port);
    let mut acked = State::default();
    for i in 1..=3 {
        let (id, _) = Write::Exec(i).send(&mut con, 0).unwrap();
        Write::Exec(i).apply(&mut acked, id);
    }
    fs.cut_power_after_syncs(Path::new("data/values.pmem"), 2)
        .unwrap();
    let in_flight = Write::Exec(4);
    let _ = in_flight.send(&mut con, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while fs.powered() {
        assert!(
            Instant::now() < deadline,
            "values.pmem was not synced twice"
        );
        thread::sleep(Duration::from_millis(5));
    }
    served.child.kill().expect("SIGKILL");
    served.child.wait().unwrap();
    drop(served);
    fs.power_cycle().unwrap();
    let served = serve_after_boot(&data, &args, &boot_id, &mut rng);
    let found = read_state(served.port, 0);
    let mut applied = acked.clone();
    in_flight.apply(&mut applied, None);
    assert!(
        differences(&acked, &found).is_empty() || differences(&applied, &found).is_empty(),
        "the EXEC in flight is half applied after the power failed between the syncs of \
         values.pmem and collections/oplog.pmem; against the state without it:\n{}",
        differences(&acked, &found).join("\n")
    );
    drop(served);
    fs.unmount().unwrap();
}

/// What a run of power cuts found.
struct Outcome {
    /// One line per key whose recovered state is neither what was
    /// acknowledged nor that plus the write in flight.
    mismatches: Vec<String>,
    /// For each cut after which some key was so: what the cut lost.
    cuts_that_lost: Vec<String>,
}

/// `cuts` times: start `engram serve --durability <durability>` on the
/// lazy file system, check every client's keys, let the clients write,
/// cut the power at a random moment, kill the server, power-cycle the
/// file system. Then a last start checks the last cut. `dir` holds the
/// boot id the servers see.
fn power_cuts(dir: &Path, mut fs: LazyFs, durability: &str, cuts: usize) -> Outcome {
    let seed = std::env::var("ENGRAM_POWER_CUT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("{durability}: seed {seed} (ENGRAM_POWER_CUT_SEED replays the cut times)");
    let mut rng = Rng(seed);
    let started = Instant::now();
    let data = fs.mountpoint().join("data");
    let boot_id = dir.join("boot_id");
    let args = ["--durability", durability, "--mode", "emulated"];
    let mut clients: Vec<Client> = (0..CLIENTS).map(Client::new).collect();
    let mut mismatches = Vec::new();
    let mut acked_total = 0;
    let mut lost_at_cut = lazy_fs::Unsynced::default();
    let mut cuts_that_lost = Vec::new();
    for cycle in 0..=cuts {
        let mut served = serve_after_boot(&data, &args, &boot_id, &mut rng);
        let before = mismatches.len();
        for client in &mut clients {
            let found = read_state(served.port, client.n);
            for line in client.settle(found) {
                mismatches.push(format!("after cut {cycle}: {line}"));
            }
        }
        if mismatches.len() > before {
            cuts_that_lost.push(format!(
                "cut {cycle} lost {} name changes and the pages of {:?}",
                lost_at_cut.name_changes, lost_at_cut.files
            ));
        }
        if cycle == cuts {
            let mut con = connect(served.port);
            let _: () = redis::cmd("SHUTDOWN").query(&mut con).unwrap_or(());
            let status = served.child.wait().unwrap();
            assert!(status.success(), "clean shutdown:\n{}", served.log_text());
            break;
        }
        let cut = Arc::new(AtomicBool::new(false));
        let progress: Vec<Arc<AtomicU64>> = clients.iter().map(|_| Arc::default()).collect();
        let port = served.port;
        let writers: Vec<_> = clients
            .drain(..)
            .zip(&progress)
            .map(|(client, progress)| {
                let (cut, progress) = (cut.clone(), progress.clone());
                thread::spawn(move || write(port, client, &cut, &progress))
            })
            .collect();
        thread::sleep(Duration::from_millis(rng.within(CUT_AFTER_MS)));
        let deadline = Instant::now() + Duration::from_secs(60);
        for (n, progress) in progress.iter().enumerate() {
            while progress.load(Ordering::SeqCst) == 0 {
                assert!(
                    Instant::now() < deadline && !writers[n].is_finished(),
                    "client {n} had no write acknowledged in cycle {cycle}:\n{}",
                    served.log_text()
                );
                thread::sleep(Duration::from_millis(5));
            }
        }
        // The clients' flag first: a reply read before it is set was
        // sent before the power failed, so what it acknowledged had been
        // made durable (or never will be: the check will say).
        cut.store(true, Ordering::SeqCst);
        let lost = fs.cut_power();
        served.child.kill().expect("SIGKILL");
        served.child.wait().unwrap();
        clients = writers.into_iter().map(|w| w.join().unwrap()).collect();
        acked_total += progress
            .iter()
            .map(|p| p.load(Ordering::SeqCst))
            .sum::<u64>();
        drop(served);
        lost_at_cut = lost;
        fs.power_cycle()
            .unwrap_or_else(|e| panic!("power cycle {cycle}: {e}"));
    }
    let stats = fs.stats();
    println!(
        "{durability}: {cuts} power cuts, {acked_total} writes acknowledged, {} keys not as \
         acknowledged ({:.1} s; the disk saw {} syncs, {} pages made durable, \
         {} syncs after a cut)",
        mismatches.len(),
        started.elapsed().as_secs_f64(),
        stats.syncs,
        stats.pages_made_durable,
        stats.syncs_after_cut,
    );
    for line in mismatches.iter().take(12) {
        println!("  {line}");
    }
    for line in &cuts_that_lost {
        println!("  {line}");
    }
    fs.unmount().unwrap();
    Outcome {
        mismatches,
        cuts_that_lost,
    }
}

/// Starts `engram serve --dir <data> <args>` as the first server after a
/// boot: a power failure reboots the machine, and Engram's integrity
/// layer tells a power failure from a process crash by the kernel's boot
/// id (after a power failure on emulated memory it distrusts its page
/// marks: data pages may have reached the disk before their marks). So
/// the server runs in a mount namespace of its own where
/// /proc/sys/kernel/random/boot_id reads a new id, written to `boot_id`.
fn serve_after_boot(data: &Path, args: &[&str], boot_id: &Path, rng: &mut Rng) -> common::Served {
    let hex = |digits: usize, rng: &mut Rng| -> String {
        (0..digits)
            .map(|_| char::from_digit(rng.within(0..16) as u32, 16).unwrap())
            .collect()
    };
    let id = [8, 4, 4, 4, 12].map(|digits| hex(digits, rng)).join("-");
    std::fs::write(boot_id, format!("{id}\n")).unwrap();
    let mut command = std::process::Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(r#"mount --bind "$0" /proc/sys/kernel/random/boot_id && exec "$@""#)
        .arg(boot_id)
        .arg(env!("CARGO_BIN_EXE_engram-e2e"))
        .args(["serve", "--port", "0", "--dir"])
        .arg(data)
        .args(args);
    common::start_served(command)
        .unwrap_or_else(|log| panic!("engram serve did not start after boot {id}:\n{log}"))
}

/// One write a client makes, with the sequence number it writes.
#[derive(Clone, Copy, Debug)]
enum Write {
    /// `SET p{n}:s i`
    Set(u64),
    /// `DEL p{n}:s` (every third round, so the key is also overwritten
    /// several times between deletes: no older version may come back)
    Del,
    /// `INCR p{n}:ctr`
    Incr,
    /// `SETBIT p{n}:bits bit_offset(i) 1`: a word of a 2 MiB string
    Setbit(u64),
    /// `RPUSH p{n}:l i`
    Rpush(u64),
    /// `HSET p{n}:h f{i % FIELDS} i`
    Hset(u64),
    /// `SADD p{n}:set i`
    Sadd(u64),
    /// `ZADD p{n}:z i m{i % FIELDS}`
    Zadd(u64),
    /// `XADD p{n}:x * seq i`
    Xadd(u64),
    /// `MSET p{n}:m:a i p{n}:m:b i p{n}:m:c i`
    Mset(u64),
    /// MULTI, then i written to a string, a list, a hash, a set, a sorted
    /// set and a stream (`p{n}:t:*`), EXEC.
    Exec(u64),
}

/// One client's keys as the server holds them (or must).
#[derive(Clone, Debug, Default, PartialEq)]
struct State {
    string: Option<u64>,
    counter: Option<i64>,
    /// The offsets of the bitmap's set bits.
    bits: BTreeSet<u64>,
    list: Vec<u64>,
    hash: BTreeMap<String, u64>,
    set: BTreeSet<u64>,
    zset: BTreeMap<String, i64>,
    /// (ID, seq); an ID of `None` stands for whatever ID the server gave
    /// an XADD whose reply never came.
    stream: Vec<(Option<String>, u64)>,
    mset: [Option<u64>; 3],
    exec_string: Option<u64>,
    exec_list: Vec<u64>,
    exec_hash: Option<u64>,
    exec_set: BTreeSet<u64>,
    exec_zset: Option<i64>,
    exec_stream: Vec<(Option<String>, u64)>,
}

impl Write {
    /// The write's effect; `id` is the stream ID its reply carried (`None`
    /// when the reply never came).
    fn apply(self, state: &mut State, id: Option<String>) {
        match self {
            Write::Set(i) => state.string = Some(i),
            Write::Del => state.string = None,
            Write::Incr => state.counter = Some(state.counter.unwrap_or(0) + 1),
            Write::Setbit(i) => {
                state.bits.insert(bit_offset(i));
            }
            Write::Rpush(i) => state.list.push(i),
            Write::Hset(i) => {
                state.hash.insert(format!("f{}", i % FIELDS), i);
            }
            Write::Sadd(i) => {
                state.set.insert(i);
            }
            Write::Zadd(i) => {
                state.zset.insert(format!("m{}", i % FIELDS), i as i64);
            }
            Write::Xadd(i) => state.stream.push((id, i)),
            Write::Mset(i) => state.mset = [Some(i); 3],
            Write::Exec(i) => {
                state.exec_string = Some(i);
                state.exec_list.push(i);
                state.exec_hash = Some(i);
                state.exec_set.insert(i);
                state.exec_zset = Some(i as i64);
                state.exec_stream.push((id, i));
            }
        }
    }

    /// Sends the write; its stream ID when it has one, and INCR's value.
    fn send(
        self,
        con: &mut redis::Connection,
        n: usize,
    ) -> redis::RedisResult<(Option<String>, i64)> {
        let key = |name: &str| format!("p{n}:{name}");
        let none = |result: redis::RedisResult<redis::Value>| result.map(|_| (None, 0));
        match self {
            Write::Set(i) => none(redis::cmd("SET").arg(key("s")).arg(i).query(con)),
            Write::Del => none(redis::cmd("DEL").arg(key("s")).query(con)),
            Write::Incr => redis::cmd("INCR")
                .arg(key("ctr"))
                .query(con)
                .map(|value: i64| (None, value)),
            Write::Setbit(i) => none(
                redis::cmd("SETBIT")
                    .arg(key("bits"))
                    .arg(bit_offset(i))
                    .arg(1)
                    .query(con),
            ),
            Write::Rpush(i) => none(redis::cmd("RPUSH").arg(key("l")).arg(i).query(con)),
            Write::Hset(i) => none(
                redis::cmd("HSET")
                    .arg(key("h"))
                    .arg(format!("f{}", i % FIELDS))
                    .arg(i)
                    .query(con),
            ),
            Write::Sadd(i) => none(redis::cmd("SADD").arg(key("set")).arg(i).query(con)),
            Write::Zadd(i) => none(
                redis::cmd("ZADD")
                    .arg(key("z"))
                    .arg(i)
                    .arg(format!("m{}", i % FIELDS))
                    .query(con),
            ),
            Write::Xadd(i) => redis::cmd("XADD")
                .arg(key("x"))
                .arg("*")
                .arg("seq")
                .arg(i)
                .query(con)
                .map(|id: String| (Some(id), 0)),
            Write::Mset(i) => none(
                redis::cmd("MSET")
                    .arg(key("m:a"))
                    .arg(i)
                    .arg(key("m:b"))
                    .arg(i)
                    .arg(key("m:c"))
                    .arg(i)
                    .query(con),
            ),
            Write::Exec(i) => redis::pipe()
                .atomic()
                .cmd("SET")
                .arg(key("t:s"))
                .arg(i)
                .ignore()
                .cmd("RPUSH")
                .arg(key("t:l"))
                .arg(i)
                .ignore()
                .cmd("HSET")
                .arg(key("t:h"))
                .arg("seq")
                .arg(i)
                .ignore()
                .cmd("SADD")
                .arg(key("t:set"))
                .arg(i)
                .ignore()
                .cmd("ZADD")
                .arg(key("t:z"))
                .arg(i)
                .arg("m")
                .ignore()
                .cmd("XADD")
                .arg(key("t:x"))
                .arg("*")
                .arg("seq")
                .arg(i)
                .query(con)
                .map(|(id,): (String,)| (Some(id), 0)),
        }
    }
}

/// A writing client across power cycles.
struct Client {
    n: usize,
    /// The next sequence number: never reused, so a value names one write.
    next: u64,
    /// What the server must hold: every acknowledged write applied to what
    /// the last recovery found.
    expected: State,
    /// The write whose reply had not come when the power failed (or came
    /// after): it may be applied or not.
    in_flight: Option<Write>,
}

impl Client {
    fn new(n: usize) -> Client {
        Client {
            n,
            next: 1,
            expected: State::default(),
            in_flight: None,
        }
    }

    /// Compares what recovery `found` with what was acknowledged (with and
    /// without the write in flight), returns a line per key that matches
    /// neither, and takes `found` as what later writes build on.
    fn settle(&mut self, found: State) -> Vec<String> {
        let mut candidates = vec![self.expected.clone()];
        let in_flight = self.in_flight.take();
        if let Some(write) = in_flight {
            let mut applied = self.expected.clone();
            write.apply(&mut applied, None);
            candidates.push(applied);
        }
        let lines = if candidates.iter().any(|c| differences(c, &found).is_empty()) {
            Vec::new()
        } else {
            let in_flight = match in_flight {
                Some(write) => format!(" (in flight: {write:?})"),
                None => String::new(),
            };
            differences(&candidates[0], &found)
                .into_iter()
                .map(|line| format!("client {}: {line}{in_flight}", self.n))
                .collect()
        };
        self.expected = found;
        lines
    }
}

/// Writes the eleven kinds of write in turn (DEL every third round) until the server is gone or a
/// reply comes after the cut; then the client knows what was acknowledged
/// and which write may or may not have happened.
fn write(port: u16, mut client: Client, cut: &AtomicBool, progress: &AtomicU64) -> Client {
    let mut con = connect(port);
    loop {
        let i = client.next;
        client.next += 1;
        let delete = i.is_multiple_of(3).then_some(Write::Del);
        for write in [
            Some(Write::Set(i)),
            Some(Write::Incr),
            Some(Write::Setbit(i)),
            Some(Write::Rpush(i)),
            Some(Write::Hset(i)),
            Some(Write::Sadd(i)),
            Some(Write::Zadd(i)),
            Some(Write::Xadd(i)),
            Some(Write::Mset(i)),
            delete,
            Some(Write::Exec(i)),
        ]
        .into_iter()
        .flatten()
        {
            client.in_flight = Some(write);
            let Ok((id, value)) = write.send(&mut con, client.n) else {
                return client;
            };
            if cut.load(Ordering::SeqCst) {
                return client;
            }
            client.in_flight = None;
            write.apply(&mut client.expected, id);
            if let Write::Incr = write {
                assert_eq!(
                    Some(value),
                    client.expected.counter,
                    "client {}: INCR's reply",
                    client.n
                );
            }
            progress.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// The bit SETBIT `i` sets: spread over the bitmap's last `BIT_SPAN`
/// bits, so successive writes land on different pages.
fn bit_offset(i: u64) -> u64 {
    BITMAP_BITS - BIT_SPAN + i.wrapping_mul(7_919) % BIT_SPAN
}

/// The offsets of a bitmap's set bits (Redis numbers bits from the most
/// significant bit of byte 0).
fn set_bits(bitmap: &[u8]) -> BTreeSet<u64> {
    let mut bits = BTreeSet::new();
    for (byte_index, &byte) in bitmap.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                bits.insert(byte_index as u64 * 8 + bit);
            }
        }
    }
    bits
}

/// XRANGE's reply: (ID, [field, value]) per entry.
type Entries = Vec<(String, Vec<String>)>;
/// The replies to GET s, GET ctr, LRANGE l, HGETALL h, SMEMBERS set,
/// ZRANGE z WITHSCORES, XRANGE x, MGET m:a m:b m:c.
type Replies = (
    Option<u64>,
    Option<i64>,
    Vec<u64>,
    BTreeMap<String, u64>,
    BTreeSet<u64>,
    Vec<(String, f64)>,
    Entries,
    Vec<Option<u64>>,
);
/// The replies to the reads of an EXEC's keys: GET t:s, LRANGE t:l,
/// HGET t:h seq, SMEMBERS t:set, ZSCORE t:z m, XRANGE t:x.
type ExecReplies = (
    Option<u64>,
    Vec<u64>,
    Option<u64>,
    BTreeSet<u64>,
    Option<f64>,
    Entries,
);

/// Reads one client's keys.
fn read_state(port: u16, n: usize) -> State {
    let mut con = connect(port);
    let key = |name: &str| format!("p{n}:{name}");
    let (string, counter, list, hash, set, zset, stream, mset): Replies = redis::pipe()
        .cmd("GET")
        .arg(key("s"))
        .cmd("GET")
        .arg(key("ctr"))
        .cmd("LRANGE")
        .arg(key("l"))
        .arg(0)
        .arg(-1)
        .cmd("HGETALL")
        .arg(key("h"))
        .cmd("SMEMBERS")
        .arg(key("set"))
        .cmd("ZRANGE")
        .arg(key("z"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .cmd("XRANGE")
        .arg(key("x"))
        .arg("-")
        .arg("+")
        .cmd("MGET")
        .arg(key("m:a"))
        .arg(key("m:b"))
        .arg(key("m:c"))
        .query(&mut con)
        .unwrap_or_else(|e| panic!("client {n}: reading its keys: {e}"));
    let bitmap: Option<Vec<u8>> = redis::cmd("GET")
        .arg(key("bits"))
        .query(&mut con)
        .unwrap_or_else(|e| panic!("client {n}: reading its bitmap: {e}"));
    let (exec_string, exec_list, exec_hash, exec_set, exec_zset, exec_stream): ExecReplies =
        redis::pipe()
            .cmd("GET")
            .arg(key("t:s"))
            .cmd("LRANGE")
            .arg(key("t:l"))
            .arg(0)
            .arg(-1)
            .cmd("HGET")
            .arg(key("t:h"))
            .arg("seq")
            .cmd("SMEMBERS")
            .arg(key("t:set"))
            .cmd("ZSCORE")
            .arg(key("t:z"))
            .arg("m")
            .cmd("XRANGE")
            .arg(key("t:x"))
            .arg("-")
            .arg("+")
            .query(&mut con)
            .unwrap_or_else(|e| panic!("client {n}: reading its EXEC keys: {e}"));
    let entries = |entries: Entries| -> Vec<(Option<String>, u64)> {
        entries
            .into_iter()
            .map(|(id, fields)| {
                assert_eq!(fields.len(), 2, "client {n}: stream entry {id}: {fields:?}");
                assert_eq!(fields[0], "seq", "client {n}: stream entry {id}");
                (Some(id), fields[1].parse().unwrap())
            })
            .collect()
    };
    State {
        string,
        counter,
        bits: set_bits(&bitmap.unwrap_or_default()),
        list,
        hash,
        set,
        zset: zset.into_iter().map(|(m, s)| (m, s as i64)).collect(),
        stream: entries(stream),
        mset: [mset[0], mset[1], mset[2]],
        exec_string,
        exec_list,
        exec_hash,
        exec_set,
        exec_zset: exec_zset.map(|s| s as i64),
        exec_stream: entries(exec_stream),
    }
}

/// A line per key whose state in `found` is not the `expected` one.
fn differences(expected: &State, found: &State) -> Vec<String> {
    let mut lines = Vec::new();
    let mut compare = |key: &str, same: bool, expected: String, found: String| {
        if !same {
            lines.push(format!("{key}: expected {expected}, found {found}"));
        }
    };
    macro_rules! field {
        ($key:literal, $field:ident) => {
            compare(
                $key,
                expected.$field == found.$field,
                brief(&expected.$field),
                brief(&found.$field),
            )
        };
    }
    field!("s (SET)", string);
    field!("ctr (INCR)", counter);
    field!("bits (SETBIT)", bits);
    field!("l (RPUSH)", list);
    field!("h (HSET)", hash);
    field!("set (SADD)", set);
    field!("z (ZADD)", zset);
    compare(
        "x (XADD)",
        same_entries(&expected.stream, &found.stream),
        brief(&expected.stream),
        brief(&found.stream),
    );
    field!("m:a m:b m:c (MSET)", mset);
    field!("t:s (EXEC)", exec_string);
    field!("t:l (EXEC)", exec_list);
    field!("t:h (EXEC)", exec_hash);
    field!("t:set (EXEC)", exec_set);
    field!("t:z (EXEC)", exec_zset);
    compare(
        "t:x (EXEC)",
        same_entries(&expected.exec_stream, &found.exec_stream),
        brief(&expected.exec_stream),
        brief(&found.exec_stream),
    );
    lines
}

/// Stream entries equal in sequence numbers, and in IDs where known.
fn same_entries(expected: &[(Option<String>, u64)], found: &[(Option<String>, u64)]) -> bool {
    expected.len() == found.len()
        && expected
            .iter()
            .zip(found)
            .all(|((id, seq), (found_id, found_seq))| {
                seq == found_seq && (id.is_none() || id == found_id)
            })
}

/// A value for a failure line: whole when short, else its end and size.
fn brief<T: Debug>(value: &T) -> String {
    let text = format!("{value:?}");
    let chars = text.chars().count();
    if chars <= 120 {
        return text;
    }
    let tail: String = text.chars().skip(chars - 100).collect();
    format!("…{tail} ({chars} chars)")
}

/// splitmix64: the cut times, replayable from the printed seed.
struct Rng(u64);

impl Rng {
    fn within(&mut self, range: std::ops::Range<u64>) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        range.start + z % (range.end - range.start)
    }
}
