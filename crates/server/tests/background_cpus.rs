//! `background-cpus`: the server's background threads start on the cores it
//! names; CONFIG GET and INFO show it; a core the process may not use is
//! refused at start. One test (the choice is process-wide).

mod common;

use common::{start_with, Client};
use engram_server::{Config, Server, StartError};
use engram_threads::{self as background, BackgroundCpus};

/// The cores the threads named `comm` (as the kernel truncates it) may run
/// on, from /proc.
fn cores_of_threads(comm: &str) -> Vec<String> {
    let mut found = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let task = task.unwrap().path();
        let Ok(name) = std::fs::read_to_string(task.join("comm")) else {
            continue;
        };
        if name.trim() != comm {
            continue;
        }
        let status = std::fs::read_to_string(task.join("status")).unwrap();
        let cores = status
            .lines()
            .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
            .unwrap();
        found.push(cores.trim().to_string());
    }
    found
}

#[test]
fn background_threads_start_on_the_configured_cores() {
    let allowed = background::allowed_cpus();
    let first = allowed[0];
    let (server, _dir) = start_with(Config {
        background_cpus: BackgroundCpus::List(vec![first]),
        ..Config::default()
    });
    let mut c = Client::connect(&server);
    c.script(&[(
        "CONFIG GET background-cpus",
        &format!(r#"["background-cpus", "{first}"]"#),
    )]);
    let info = c.call("INFO engram");
    assert!(info.contains(&format!("background_cpus:{first}")), "{info}");
    // (Two compactors: the strings' store's and the collection images'.)
    for comm in [
        "engram-checkpoi",
        "engram-expire",
        "engram-compact",
        "engram-integrit",
    ] {
        // A thread names itself once it first runs: on a busy machine that
        // can be a while after it was spawned.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut cores = cores_of_threads(comm);
        while cores.is_empty() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            cores = cores_of_threads(comm);
        }
        assert!(!cores.is_empty(), "no thread named {comm}");
        assert!(
            cores.iter().all(|c| *c == first.to_string()),
            "{comm}: {cores:?}, not all on CPU {first}"
        );
    }
    // Client connections are foreground: they may run anywhere.
    let workers = cores_of_threads("engram-main");
    assert_eq!(workers.len(), 1);
    if allowed.len() > 1 {
        assert_ne!(workers[0], first.to_string(), "with {allowed:?} allowed");
    }
    let refused = c.call("CONFIG SET background-cpus all");
    assert!(refused.contains("fixed at startup"), "{refused}");
    drop(c);
    server.shutdown().unwrap();

    // A core this process may not use is refused, by name, at start.
    let outside = allowed.last().unwrap() + 1;
    let dir = tempfile::tempdir().unwrap();
    let error = Server::start(Config {
        port: 0,
        dir: dir.path().join("data"),
        background_cpus: BackgroundCpus::List(vec![outside]),
        ..Config::default()
    })
    .err()
    .expect("an impossible placement is refused");
    assert!(
        matches!(&error, StartError::Config(text) if text.contains(&format!("CPU {outside} is not among"))),
        "{error}"
    );
    assert!(
        !dir.path().join("data").exists(),
        "nothing is created before the configuration is checked"
    );
}
