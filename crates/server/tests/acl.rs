//! ACL users and permissions, through real connections, each reply held
//! against redis-server 7.0's in the same run where the setup can be the
//! same: rules and their descriptions, denials and their ACL LOG entries,
//! selectors, read/write key patterns, channels, MULTI/EXEC and scripts
//! under changed rules, disconnections on DELUSER and revoked channels;
//! then the ACL file and configuration-file users, and requirepass as the
//! default user's password.

mod common;

use std::io::Read;
use std::time::Duration;

use common::{beside_redis, same, start_with, Client, RedisServer};
use engram_server::{Config, Server};

/// The ACL LOG entries as `count reason context object username` lines
/// (age and client details differ between any two runs).
fn log_lines(c: &mut Client) -> Vec<String> {
    c.send("ACL LOG");
    let reply = c.reply();
    // `[["count", (integer) 1, "reason", "key", ...], [...]]`
    reply
        .split("\"count\", ")
        .skip(1)
        .map(|entry| {
            let fields: Vec<&str> = entry.split(", ").collect();
            let value = |name: &str| {
                let at = fields
                    .iter()
                    .position(|f| *f == format!("\"{name}\""))
                    .unwrap_or_else(|| panic!("no {name} in {entry}"));
                fields[at + 1].trim_end_matches(']').to_string()
            };
            format!(
                "{} {} {} {} {}",
                fields[0],
                value("reason"),
                value("context"),
                value("object"),
                value("username")
            )
        })
        .collect()
}

/// A second client of each server, authenticated as `user`.
fn logged_in(engram: &Server, redis: &RedisServer, user: &str, pass: &str) -> (Client, Client) {
    let mut e = Client::connect(engram);
    let mut r = redis.client();
    let auth = format!("AUTH {user} {pass}");
    same(&mut e, &mut r, &[&auth]);
    (e, r)
}

#[test]
fn acl_commands_reply_as_redis() {
    let (_server, _dir, _redis, mut e, mut r) = beside_redis();
    same(
        &mut e,
        &mut r,
        &[
            "ACL SETUSER app on >secret ~app:* +@read",
            "ACL GETUSER app",
            "ACL SETUSER app %R~r:* %W~w:* &news.* -get (+hset ~h:*)",
            "ACL GETUSER app",
            "ACL SETUSER other",
            "ACL LIST",
            "ACL USERS",
            "ACL WHOAMI",
            "ACL CAT",
            "ACL CAT nosuch",
            "ACL SETUSER app +nosuch",
            "ACL SETUSER app +@nosuch",
            "ACL SETUSER app allkeys ~more",
            "ACL SETUSER app allchannels &more",
            "ACL SETUSER app <notapassword",
            "ACL SETUSER app #abc",
            "ACL SETUSER app +config|get|x",
            "ACL SETUSER app +select|",
            "ACL SETUSER app (+get ~x",
            "ACL SETUSER bad\\suser on",
            // A failed SETUSER changed nothing.
            "ACL GETUSER app",
            "ACL GETUSER nobody",
            "ACL SETUSER first +select|0 +@all -@all +select|1",
            "ACL GETUSER first",
            "ACL SETUSER first reset",
            "ACL GETUSER first",
            "ACL DELUSER default",
            "ACL DELUSER nobody first",
            "ACL USERS",
            "ACL GENPASS 0",
            "ACL GENPASS 5000",
            "ACL GENPASS x",
            "ACL LOAD",
            "ACL SAVE",
            "ACL nosuch",
            "ACL HELP extra",
            "ACL",
            "AUTH justapassword",
            "AUTH nobody pw",
            "READONLY",
        ],
    );
    // Generated passwords: hex, 64 characters by default, bits/4 rounded up.
    for (args, len) in [("", 64), (" 1", 1), (" 5", 2), (" 4096", 1024)] {
        let pass = e.call(&format!("ACL GENPASS{args}"));
        let pass = pass.trim_matches('"');
        assert_eq!(pass.len(), len, "ACL GENPASS{args}: {pass}");
        assert!(pass.bytes().all(|b| b.is_ascii_hexdigit()));
    }
    assert_ne!(e.call("ACL GENPASS"), e.call("ACL GENPASS"));
}

#[test]
fn a_read_only_user_of_app_keys_is_refused_writes_and_other_keys() {
    let (engram, _dir, redis, mut e, mut r) = beside_redis();
    same(
        &mut e,
        &mut r,
        &["ACL SETUSER app on >pw ~app:* +@read", "SET app:1 v"],
    );
    let (mut ue, mut ur) = logged_in(&engram, &redis, "app", "pw");
    same(
        &mut ue,
        &mut ur,
        &[
            "ACL WHOAMI",
            "GET app:1",
            "SET app:1 w",
            "GET other",
            "MGET app:1 other",
            "DEL app:1",
            "CONFIG GET maxmemory",
            "CLIENT LIST",
            "PING",
            "GET app:1",
        ],
    );
    // A failed AUTH as another user is logged too, under that user.
    same(&mut ue, &mut ur, &["AUTH app wrong", "AUTH ghost x"]);
    let expected = log_lines(&mut r);
    assert_eq!(log_lines(&mut e), expected);
    assert!(
        expected.contains(&"(integer) 2 \"key\" \"toplevel\" \"other\" \"app\"".to_string()),
        "{expected:?}"
    );
    // CLIENT LIST names the user.
    let list = e.call("CLIENT LIST");
    assert!(list.contains("user=app"), "{list}");
    assert!(list.contains("user=default"), "{list}");
    same(&mut e, &mut r, &["ACL LOG RESET", "ACL LOG"]);
}

#[test]
fn selectors_read_write_patterns_and_channels_match_redis() {
    let (engram, _dir, redis, mut e, mut r) = beside_redis();
    same(
        &mut e,
        &mut r,
        &[
            "ACL SETUSER u on nopass %R~r:* %W~w:* ~rw:* &news.* +@all (+set ~x ~y)",
            "SET r:1 a",
            "SET w:1 b",
        ],
    );
    let (mut ue, mut ur) = logged_in(&engram, &redis, "u", "any");
    same(
        &mut ue,
        &mut ur,
        &[
            "GET r:1",
            "SET r:1 x",
            "SET w:1 x",
            "GET w:1",
            "APPEND w:1 x",
            "EXISTS w:1",
            "COPY r:1 w:2",
            "COPY w:1 r:2",
            "SET x 1",
            "GET x",
            "MSET x 1 y 2",
            "MSET x 1 rw:1 2",
            "PUBLISH news.a hi",
            "PUBLISH sport hi",
            "SPUBLISH news.b hi",
            "ACL DRYRUN u get w:1",
            "ACL DRYRUN u set x 1",
            "ACL DRYRUN u publish sport x",
        ],
    );
    same(&mut ue, &mut ur, &["SUBSCRIBE sport"]);
    same(&mut ue, &mut ur, &["PSUBSCRIBE news.a*"]);
    same(&mut ue, &mut ur, &["PSUBSCRIBE news.*"]);
    assert_eq!(log_lines(&mut e), log_lines(&mut r));
}

#[test]
fn exec_refuses_what_changed_rules_forbid_and_scripts_obey_the_caller() {
    let (engram, _dir, redis, mut e, mut r) = beside_redis();
    same(
        &mut e,
        &mut r,
        &["ACL SETUSER app on >pw ~app:* +@all -flushall"],
    );
    let (mut ue, mut ur) = logged_in(&engram, &redis, "app", "pw");
    same(
        &mut ue,
        &mut ur,
        &[
            "MULTI",
            "SET app:1 a",
            "SET other b",
            "GET app:1",
            "FLUSHALL",
        ],
    );
    same(&mut e, &mut r, &["ACL SETUSER app -get"]);
    same(
        &mut ue,
        &mut ur,
        &[
            "EXEC",
            "GET app:1",
            "EVAL return\\sredis.call('set','app:2','x') 0",
            "EVAL return\\sredis.call('set','elsewhere','x') 0",
            "EVAL return\\sredis.pcall('get','app:1') 0",
            "EVAL return\\sredis.call('flushall') 0",
            "GET app:2",
        ],
    );
    assert_eq!(log_lines(&mut e), log_lines(&mut r));
}

/// Whether the server closed `c`'s connection (within a few seconds).
fn closed(c: &mut Client) -> bool {
    c.writer
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut byte = [0u8; 1];
    matches!(c.reader.read(&mut byte), Ok(0) | Err(_))
}

#[test]
fn deleting_a_user_or_revoking_its_channels_disconnects_its_clients() {
    let (engram, _dir, redis, mut e, mut r) = beside_redis();
    same(
        &mut e,
        &mut r,
        &[
            "ACL SETUSER gone on >pw +@all ~*",
            "ACL SETUSER sub on >pw +@all ~* &*",
        ],
    );
    let (mut ge, mut gr) = logged_in(&engram, &redis, "gone", "pw");
    let (mut se, mut sr) = logged_in(&engram, &redis, "sub", "pw");
    let (mut keep_e, mut keep_r) = logged_in(&engram, &redis, "sub", "pw");
    same(&mut se, &mut sr, &["SUBSCRIBE foo"]);
    same(&mut e, &mut r, &["ACL DELUSER gone"]);
    assert!(closed(&mut gr) && closed(&mut ge));
    // Narrowing to channels that still cover `foo` keeps the subscriber.
    same(&mut e, &mut r, &["ACL SETUSER sub resetchannels &foo &bar"]);
    same(&mut e, &mut r, &["PUBLISH foo still"]);
    assert_eq!(se.reply(), sr.reply());
    // Taking `foo` away closes it; a connection of the same user with no
    // subscription stays.
    same(&mut e, &mut r, &["ACL SETUSER sub resetchannels &bar"]);
    assert!(closed(&mut sr) && closed(&mut se));
    same(
        &mut keep_e,
        &mut keep_r,
        &["PING", "PUBLISH foo x", "ACL WHOAMI"],
    );
    // CLIENT KILL USER closes that user's connections only.
    same(&mut e, &mut r, &["ACL SETUSER k on >pw +@all ~*"]);
    let (mut ke, mut kr) = logged_in(&engram, &redis, "k", "pw");
    same(
        &mut e,
        &mut r,
        &[
            "CLIENT KILL USER nobody",
            "CLIENT KILL USER k",
            "CLIENT KILL MAXAGE 1",
        ],
    );
    assert!(closed(&mut kr) && closed(&mut ke));
    same(&mut keep_e, &mut keep_r, &["PING"]);
    // Deleting the user a connection itself is logged in as closes it
    // after the reply.
    same(&mut keep_e, &mut keep_r, &["ACL DELUSER sub"]);
    assert!(closed(&mut keep_r) && closed(&mut keep_e));
}

fn acl_config(path: &std::path::Path) -> Config {
    let mut config = Config::default();
    config
        .set("aclfile", &[path.display().to_string()])
        .unwrap();
    config
}

#[test]
fn the_acl_file_saves_loads_and_outlives_a_restart() {
    let files = tempfile::tempdir().unwrap();
    let path = files.path().join("users.acl");
    std::fs::write(&path, "user default on nopass ~* &* +@all\n").unwrap();
    let redis_path = files.path().join("redis.acl");
    std::fs::write(&redis_path, "user default on nopass ~* &* +@all\n").unwrap();
    let redis = RedisServer::start_with_args(&["--aclfile", redis_path.to_str().unwrap()]);
    let (engram, dir) = start_with(acl_config(&path));
    let (mut e, mut r) = (Client::connect(&engram), redis.client());
    same(
        &mut e,
        &mut r,
        &[
            "ACL SETUSER app on >pw ~app:* +@read (+set ~x)",
            "ACL SAVE",
            "ACL LIST",
        ],
    );
    let saved = std::fs::read_to_string(&path).unwrap();
    assert_eq!(saved, std::fs::read_to_string(&redis_path).unwrap());
    assert!(saved.starts_with("user app on #"), "{saved}");

    // A hand-written user appears on ACL LOAD, and clients of users the
    // load replaced are closed.
    let (mut app_e, mut app_r) = logged_in(&engram, &redis, "app", "pw");
    for file in [&path, &redis_path] {
        let text = std::fs::read_to_string(file).unwrap() + "user ops on >ops +@all\n";
        std::fs::write(file, text).unwrap();
    }
    same(&mut e, &mut r, &["ACL LOAD", "ACL USERS"]);
    assert!(closed(&mut app_r) && closed(&mut app_e));

    // A bad file changes nothing, and says what is wrong where.
    for file in [&path, &redis_path] {
        let text = std::fs::read_to_string(file).unwrap() + "user broken on +nosuch\n";
        std::fs::write(file, text).unwrap();
    }
    let failed = e.call("ACL LOAD");
    assert!(
        failed.contains("Error in applying operation '+nosuch'")
            && failed.ends_with(
                "WARNING: ACL errors detected, no change to the previously active ACL rules was \
                 performed"
            ),
        "{failed}"
    );
    same(&mut e, &mut r, &["ACL USERS"]);

    // Restart: the users are those of the file as last saved.
    same(&mut e, &mut r, &["ACL SAVE"]);
    drop((e, r));
    engram.shutdown().unwrap();
    let restarted = Server::start(Config {
        port: 0,
        dir: dir.path().join("data"),
        ..acl_config(&path)
    })
    .unwrap();
    let mut e = Client::connect(&restarted);
    e.script(&[
        ("ACL USERS", "[\"app\", \"default\", \"ops\"]"),
        ("AUTH ops ops", "OK"),
        ("ACL WHOAMI", "\"ops\""),
    ]);
    // A save that cannot write (its directory is gone) says so and keeps
    // serving.
    let moved = files.path().join("moved");
    std::fs::create_dir(&moved).unwrap();
    let lost = moved.join("users.acl");
    std::fs::copy(&path, &lost).unwrap();
    let (saver, _saver_dir) = start_with(acl_config(&lost));
    std::fs::remove_dir_all(&moved).unwrap();
    let mut s = Client::connect(&saver);
    s.script(&[
        (
            "ACL SAVE",
            "(error) ERR There was an error trying to save the ACLs. Please check the server \
             logs for more information",
        ),
        ("ACL USERS", "[\"app\", \"default\", \"ops\"]"),
    ]);
    drop(s);
    saver.shutdown().unwrap();
    restarted.shutdown().unwrap();

    // A file that does not load stops startup, naming the problem.
    std::fs::write(&path, "user x on +nosuch\n").unwrap();
    let err = Server::start(Config {
        port: 0,
        dir: dir.path().join("data"),
        ..acl_config(&path)
    })
    .err()
    .expect("a bad ACL file stops startup")
    .to_string();
    assert!(
        err.contains("Error in applying operation '+nosuch'"),
        "{err}"
    );
    let missing = files.path().join("missing.acl");
    let err = Server::start(Config {
        port: 0,
        dir: dir.path().join("data"),
        ..acl_config(&missing)
    })
    .err()
    .expect("a missing ACL file stops startup")
    .to_string();
    assert!(err.contains("missing.acl"), "{err}");
}

#[test]
fn configuration_file_users_and_requirepass() {
    let conf = tempfile::tempdir().unwrap();
    let path = conf.path().join("engram.conf");
    std::fs::write(
        &path,
        "requirepass s3cret\nuser app on >pw ~app:* +@read\nuser default on >root ~* &* +@all\n",
    )
    .unwrap();
    let (server, _dir) = start_with(Config::from_file(&path).unwrap());
    let mut c = Client::connect(&server);
    c.script(&[
        ("GET app:1", "(error) NOAUTH Authentication required."),
        // The `user default` line came after requirepass and replaced it.
        (
            "AUTH s3cret",
            "(error) WRONGPASS invalid username-password pair or user is disabled.",
        ),
        ("AUTH root", "OK"),
        ("AUTH app pw", "OK"),
        ("GET app:1", "(nil)"),
        (
            "SET app:1 x",
            "(error) NOPERM this user has no permissions to run the 'set' command",
        ),
    ]);

    // requirepass at runtime is the default user's one password.
    let (server, _dir2) = start_with(Config::default());
    let mut admin = Client::connect(&server);
    admin.script(&[
        ("CONFIG SET requirepass pw", "OK"),
        (
            "ACL GETUSER default",
            "[\"flags\", [\"on\"], \"passwords\", \
             [\"30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4\"], \
             \"commands\", \"+@all\", \"keys\", \"~*\", \"channels\", \"&*\", \"selectors\", []]",
        ),
    ]);
    let mut fresh = Client::connect(&server);
    fresh.script(&[
        ("PING", "(error) NOAUTH Authentication required."),
        ("AUTH pw", "OK"),
        ("CONFIG SET requirepass \"\"", "OK"),
    ]);
    let mut open = Client::connect(&server);
    assert_eq!(open.call("PING"), "PONG");

    // Users in both the configuration file and an ACL file: refused.
    std::fs::write(
        &path,
        format!(
            "user app on >pw\naclfile {}\n",
            conf.path().join("x.acl").display()
        ),
    )
    .unwrap();
    let err = Server::start(Config {
        port: 0,
        dir: conf.path().join("data"),
        ..Config::from_file(&path).unwrap()
    })
    .err()
    .expect("users in both places stop startup")
    .to_string();
    assert!(err.contains("ACL file"), "{err}");
}

#[test]
fn sort_by_and_get_need_read_access_to_every_key() {
    let (engram, _dir, redis, mut e, mut r) = beside_redis();
    same(
        &mut e,
        &mut r,
        &[
            "ACL SETUSER some on nopass ~list +@all",
            "ACL SETUSER reader on nopass %R~* ~list +@all",
            "RPUSH list 2 1",
            "SET w_1 9",
        ],
    );
    for user in ["some", "reader"] {
        let (mut ue, mut ur) = logged_in(&engram, &redis, user, "x");
        same(
            &mut ue,
            &mut ur,
            &[
                "SORT list",
                "SORT list BY w_*",
                "SORT list BY constant",
                "SORT list GET #",
                "SORT list GET w_*",
                "SORT_RO list BY w_*",
            ],
        );
    }
}
