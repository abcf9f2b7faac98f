//! A pub/sub subscriber that never reads, against `engram serve` with
//! Redis's default `client-output-buffer-limit` (pubsub 32mb hard, 8mb
//! soft for 60 s): while a publisher sends 1 GiB of messages, the
//! subscriber is disconnected, the server's resident memory (VmRSS of the
//! process) grows by less than 100 MiB, the publisher sees no error, and a
//! subscriber that reads gets every message. The disconnection is logged
//! as Redis logs it.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{connect, serve};

/// The resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kib * 1024
}

#[test]
fn a_subscriber_that_never_reads_cannot_grow_the_server() {
    const MESSAGE: usize = 64 * 1024;
    const MESSAGES: usize = 16 * 1024; // 1 GiB
    let dir = tempfile::tempdir().unwrap();
    let served = serve(&dir.path().join("data"), &[]);
    let pid = served.child.id();
    let mut admin = connect(served.port);

    // The stalled subscriber: subscribes, then never reads again.
    let mut stalled = TcpStream::connect(("127.0.0.1", served.port)).unwrap();
    stalled
        .write_all(b"*2\r\n$9\r\nSUBSCRIBE\r\n$4\r\nfeed\r\n")
        .unwrap();
    // One that reads everything, in a thread. It tells the publisher how
    // far it has read: the publisher keeps within `WINDOW` messages of it
    // (4 MiB, under the 8 MiB soft limit), so that a reader the two busy
    // cores leave unscheduled for a moment is not itself a subscriber
    // that falls 32 MiB behind, which the server would rightly close.
    const WINDOW: usize = 64;
    let received = Arc::new(AtomicUsize::new(0));
    let port = served.port;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let read_so_far = received.clone();
    let reader = std::thread::spawn(move || {
        let mut con = connect(port);
        let mut pubsub = con.as_pubsub();
        pubsub.subscribe("feed").unwrap();
        pubsub
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        ready_tx.send(()).unwrap();
        for i in 0..MESSAGES {
            let message = pubsub.get_message().unwrap();
            let payload = message.get_payload_bytes();
            assert_eq!(payload.len(), MESSAGE);
            assert_eq!(&payload[..8], format!("{i:08}").as_bytes(), "out of order");
            read_so_far.store(i + 1, Ordering::Release);
        }
    });
    ready_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    while redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg("feed")
        .query::<(String, i64)>(&mut admin)
        .unwrap()
        .1
        != 2
    {
        std::thread::sleep(Duration::from_millis(10));
    }

    let before = rss(pid);
    let mut peak = before;
    let mut publisher = connect(served.port);
    let mut receivers = Vec::with_capacity(MESSAGES);
    let mut payload = vec![b'm'; MESSAGE];
    for i in 0..MESSAGES {
        let waited = Instant::now();
        while i >= received.load(Ordering::Acquire) + WINDOW {
            assert!(
                !reader.is_finished() && waited.elapsed() < Duration::from_secs(60),
                "the reading subscriber stopped at message {} of {i}; the server's log:\n{}",
                received.load(Ordering::Acquire),
                served.log_text()
            );
            std::thread::sleep(Duration::from_micros(50));
        }
        payload[..8].copy_from_slice(format!("{i:08}").as_bytes());
        let n: i64 = redis::cmd("PUBLISH")
            .arg("feed")
            .arg(&payload[..])
            .query(&mut publisher)
            .expect("the publisher sees no error");
        receivers.push(n);
        if i % 64 == 0 {
            peak = peak.max(rss(pid));
        }
    }
    if reader.join().is_err() {
        panic!(
            "the reading subscriber failed; the server's log:\n{}",
            served.log_text()
        );
    }
    peak = peak.max(rss(pid));

    assert_eq!(receivers[0], 2);
    assert_eq!(
        *receivers.last().unwrap(),
        1,
        "the stalled subscriber was not disconnected"
    );
    let growth = peak.saturating_sub(before);
    assert!(
        growth < 100 << 20,
        "RSS grew by {} MiB ({before} -> {peak})",
        growth >> 20
    );
    eprintln!(
        "RSS {} MiB before, {} MiB at most while 1 GiB was published",
        before >> 20,
        peak >> 20
    );
    assert!(
        served.logged("scheduled to be closed ASAP for overcoming of output buffer limits"),
        "{}",
        served.log_text()
    );
    drop(stalled);
}
