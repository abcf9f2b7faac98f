//! Collection writes larger than one segment of the operation log (8 MiB
//! by default): a 20 MiB hash field, a SADD of 300,000 members, the
//! SUNIONSTORE that copies them, through a real Redis client, answered and
//! still there after a restart.

mod common;

use common::{config_in, redis_con};
use engram_server::Server;
use redis::Commands;

const FIELD_BYTES: usize = 20 << 20;
const MEMBERS: usize = 300_000;

fn member(i: usize) -> String {
    format!("member-{i:033}")
}

#[test]
fn writes_larger_than_a_log_segment_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(config_in(dir.path())).unwrap();
    let mut con = redis_con(server.addr);
    let field: Vec<u8> = (0..FIELD_BYTES).map(|i| (i % 251) as u8).collect();
    let added: i64 = con.hset("h", "f", &field).unwrap();
    assert_eq!(added, 1);
    let members: Vec<String> = (0..MEMBERS).map(member).collect();
    let added: i64 = con.sadd("s", &members).unwrap();
    assert_eq!(added, MEMBERS as i64);
    // The union's result is one record holding the whole set.
    let stored: i64 = redis::cmd("SUNIONSTORE")
        .arg("u")
        .arg("s")
        .arg("empty")
        .query(&mut con)
        .unwrap();
    assert_eq!(stored, MEMBERS as i64);
    let read: Vec<u8> = con.hget("h", "f").unwrap();
    assert!(read == field, "the field reads back whole");
    server.shutdown().unwrap();

    let server = Server::start(config_in(dir.path())).unwrap();
    let mut con = redis_con(server.addr);
    let read: Vec<u8> = con.hget("h", "f").unwrap();
    assert!(read == field, "the field survives a restart whole");
    for key in ["s", "u"] {
        let count: i64 = con.scard(key).unwrap();
        assert_eq!(count, MEMBERS as i64, "{key}");
        for i in [0, MEMBERS / 2, MEMBERS - 1] {
            let is: bool = con.sismember(key, member(i)).unwrap();
            assert!(is, "{key} keeps {}", member(i));
        }
    }
    server.shutdown().unwrap();
}
