//! Stream trimming with `~` beside a real redis-server 7.0: which whole
//! nodes MAXLEN/MINID `~` and LIMIT remove depends on where nodes end,
//! so the node size is set small (`stream-node-max-entries 10`) and every
//! reply is held to Redis's.
//!
//! A file of its own: `stream-node-max-entries` is process-wide (the
//! collections' node limits), and every server started in the process
//! sets it from its configuration, so a server another test starts
//! meanwhile would change the nodes under this one.

mod common;

use common::{beside_redis, same};

#[test]
fn trims_and_pages_match_redis() {
    let (_server, _dir, _redis, mut engram, mut redis) = beside_redis();
    same(
        &mut engram,
        &mut redis,
        &["CONFIG SET stream-node-max-entries 10"],
    );
    let mut commands = Vec::new();
    for i in 1..=300 {
        commands.push(format!("XADD s {i}-1 f {i} g x"));
        if i % 50 == 0 {
            commands.push(format!("XADD s MAXLEN ~ {} {i}-2 h y", 300 - i));
            commands.push("XLEN s".to_string());
        }
    }
    commands.extend([
        "XTRIM s MAXLEN ~ 100".to_string(),
        "XLEN s".to_string(),
        "XTRIM s MAXLEN ~ 55 LIMIT 30".to_string(),
        "XLEN s".to_string(),
        "XTRIM s MINID ~ 250".to_string(),
        "XRANGE s - + COUNT 3".to_string(),
        "XTRIM s MINID 260-2".to_string(),
        "XRANGE s - + COUNT 3".to_string(),
        "XREVRANGE s + - COUNT 3".to_string(),
        "XRANGE s 270 280".to_string(),
        "XLEN s".to_string(),
    ]);
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    same(&mut engram, &mut redis, &commands);
    same(
        &mut engram,
        &mut redis,
        &["CONFIG SET stream-node-max-entries 100"],
    );
}
