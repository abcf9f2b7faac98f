//! `disable-thp`: Redis's default `yes` turns transparent huge pages off for
//! the server's process at start (the kernel shows it in /proc as
//! `THP_enabled: 0`); `no` leaves them as they were. One test: the flag is
//! process-wide, so the order of the two starts matters.

mod common;

use common::{start_with, Client};
use engram_server::Config;

/// The kernel's `THP_enabled` for this process (true: huge pages may be
/// used; false once `PR_SET_THP_DISABLE` is set).
fn thp_enabled() -> bool {
    engram_memory::huge_pages_allowed()
        .expect("a kernel that reports THP_enabled (Linux 5.0 and later)")
}

fn with_disable_thp(value: &str) -> Config {
    let mut config = Config::default();
    config
        .set("disable-thp", &[value.to_string()])
        .expect("yes and no are both accepted");
    config
}

#[test]
fn disable_thp_turns_huge_pages_off_for_the_process_unless_it_is_no() {
    assert!(thp_enabled(), "the test process starts with THP allowed");

    let (server, _dir) = start_with(with_disable_thp("no"));
    let mut c = Client::connect(&server);
    c.script(&[(r#"CONFIG GET disable-thp"#, r#"["disable-thp", "no"]"#)]);
    assert!(thp_enabled(), "disable-thp no leaves huge pages alone");
    drop(c);
    server.shutdown().unwrap();

    let (server, _dir) = start_with(Config::default());
    let mut c = Client::connect(&server);
    c.script(&[(r#"CONFIG GET disable-thp"#, r#"["disable-thp", "yes"]"#)]);
    assert!(!thp_enabled(), "the default, yes, turns them off");
    // Fixed at start, as in Redis.
    let refused = c.call("CONFIG SET disable-thp no");
    assert!(refused.contains("immutable"), "{refused}");
    drop(c);
    server.shutdown().unwrap();

    // A value that is neither is refused by name.
    let error = Config::default()
        .set("disable-thp", &["maybe".to_string()])
        .unwrap_err();
    assert!(error.contains("disable-thp"), "{error}");
}
