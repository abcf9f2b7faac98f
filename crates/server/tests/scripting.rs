//! Lua scripting and functions against a real redis-server 7.0.15: a
//! table of scripts (conversions both ways, RESP3, errors, flags, the
//! sandbox, cjson and bit) whose replies must be Redis's; EVALSHA and
//! NOSCRIPT; SCRIPT's subcommands; BUSY, SCRIPT KILL and UNKILLABLE;
//! FUNCTION's family, a FUNCTION DUMP moved both ways, and libraries that
//! survive a restart.

mod common;

use std::io::Write;
use std::time::{Duration, Instant};

use common::{beside_redis, config_in, Client};
use engram_server::Server;

/// Sends one command given as whole words (scripts hold spaces).
fn call(client: &mut Client, words: &[&str]) -> String {
    let mut request = format!("*{}\r\n", words.len());
    for word in words {
        request.push_str(&format!("${}\r\n{word}\r\n", word.len()));
    }
    client.writer.write_all(request.as_bytes()).unwrap();
    client.reply()
}

/// Runs each command on both servers; Engram's reply must be Redis's.
fn same(engram: &mut Client, redis: &mut Client, commands: &[&[&str]]) {
    for words in commands {
        let expected = call(redis, words);
        let got = call(engram, words);
        assert_eq!(
            got, expected,
            "reply to {words:?} (left: Engram, right: Redis)"
        );
    }
}

#[test]
fn scripts_reply_as_redis() {
    let (_server, _dir, _redis, mut engram, mut redis) = beside_redis();
    let cases: &[&[&str]] = &[
        &["eval", "return 'hello'", "0"],
        &["eval", "return 100.5", "0"],
        &["eval", "return {1,2,3,'ciao',{1,2}}", "0"],
        &["eval", "return {1,2,3,nil,4}", "0"],
        &["eval", "return true", "0"],
        &["eval", "return false", "0"],
        &["eval", "return nil", "0"],
        &["eval", "return {err='My Error'}", "0"],
        &["eval", "return redis.error_reply('My Error')", "0"],
        &["eval", "return redis.status_reply('FINE')", "0"],
        &["eval", "return {double=3.5}", "0"],
        &["eval", "return redis.sha1hex('Pizza & Mandolino')", "0"],
        &["eval", "return redis.call('set', KEYS[1], ARGV[1])", "1", "k", "v"],
        &["eval", "return redis.call('get', KEYS[1])", "1", "k"],
        &["eval", "return redis.call('incr', 'n')", "0"],
        &["eval", "return redis.call('get', 'nokey')", "0"],
        &["eval", "redis.call('rpush', 'l', 'a', 'b'); return redis.call('lrange', 'l', 0, -1)", "0"],
        &["eval", "return redis.pcall('incr', 'k')", "0"],
        &["eval", "return redis.call('incr', 'k')", "0"],
        &["eval", "return redis.call('nosuch')", "0"],
        &["eval", "return redis.call('incr', 'a', 'b')", "0"],
        &["eval", "return redis.call('multi')", "0"],
        &["eval", "return redis.call('blpop', 'l', 0)", "0"],
        &["eval", "return a", "0"],
        &["eval", "a = 10", "0"],
        &["eval", "return nil + 1", "0"],
        &["eval", "error('boom')", "0"],
        &["eval", "error({err='X boom'})", "0"],
        &["eval", "local ok, e = pcall(redis.call, 'nosuch'); return e", "0"],
        &["eval", "setmetatable(_G, {})", "0"],
        &["eval", "local g = getmetatable(_G); g.__index = {}", "0"],
        &["eval", "redis.call = function() return 1 end", "0"],
        &["eval", "cjson.encode = 1", "0"],
        &["eval", "bit.lshift = 1", "0"],
        &["eval", "_G = {}", "0"],
        &["eval", "print('x')", "0"],
        &["eval", "loadfile('x')", "0"],
        &["eval", "return _G", "0"],
        &["eval", "return loadstring(string.dump(function() return 1 end))()", "0"],
        &["eval", "return cjson.encode({a={1,2,3}, b='x/y', c=0.5})", "0"],
        &["eval", "return cjson.decode('[1,2,{\"a\":\"b\"}]')[3].a", "0"],
        &["eval", "return cjson.encode(cjson.decode('{\"x\":[true,false,null]}'))", "0"],
        &["eval", "return {bit.tobit(4294967295), bit.band(7, 3), bit.bor(1,2,4), bit.bxor(1,3)}", "0"],
        &["eval", "return {bit.tohex(65535), bit.tohex(-1, -4), bit.lshift(1, 4), bit.rshift(-1, 28), bit.arshift(-16, 2)}", "0"],
        &["eval", "return {bit.rol(1, 33), bit.ror(1, 1), bit.bswap(1), bit.bnot(0)}", "0"],
        &["eval", "return redis.REDIS_VERSION", "0"],
        &["eval", "return 1", "-1"],
        &["eval", "return 1", "5"],
        &["eval", "return {", "0"],
        &["eval", "#!lua flags=no-writes\nreturn redis.call('set', 'x', 1)", "0"],
        &["eval", "#!lua flags=bogus\nreturn 1", "0"],
        &["eval", "#!lua", "0"],
        &["eval_ro", "return redis.call('set', 'x', 1)", "0"],
        &["eval_ro", "#!lua\nreturn 1", "0"],
        &["eval_ro", "#!lua flags=no-writes\nreturn redis.call('get', 'k')", "0"],
        &["eval", "redis.setresp(3); return redis.call('hgetall', 'nohash')", "0"],
        &["eval", "redis.setresp(4)", "0"],
        &["eval", "redis.call('select', 1); redis.call('set', 'in1', 'x'); return 1", "0"],
        &["get", "in1"],
        &["eval", "local a = {}; local b = {a}; a[1] = b; return #cjson.encode({1})", "0"],
        // redis.call's arguments off Lua's stack: numbers as Redis writes
        // them, anything else refused, none refused, and 8,000 of them (at
        // Lua's limit, with no room left for the reply until they go).
        &["eval", "redis.call('set', 'num', 3.25); return redis.call('get', 'num')", "0"],
        &["eval", "redis.call('set', 'num', 1e20); return redis.call('get', 'num')", "0"],
        &["eval", "redis.call('set', 'num', -7); return redis.call('get', 'num')", "0"],
        &["eval", "return redis.call('set', 'num', {})", "0"],
        &["eval", "return redis.pcall('set', 'num', true)", "0"],
        &["eval", "return redis.call()", "0"],
        &["eval", "local a = {} for i = 1, 7999 do a[i] = 1 end return redis.call('lpush', 'big', unpack(a))", "0"],
        &["eval", "local a = {} for i = 1, 7999 do a[i] = 1 end return redis.pcall('nosuch', unpack(a))", "0"],
    ];
    same(&mut engram, &mut redis, cases);

    // RESP3 conversions both ways.
    call(&mut engram, &["hello", "3"]);
    call(&mut redis, &["hello", "3"]);
    same(
        &mut engram,
        &mut redis,
        &[
            &["hset", "h", "f", "v"],
            &[
                "eval",
                "redis.setresp(3); return redis.call('hgetall', 'h')",
                "0",
            ],
            &[
                "eval",
                "redis.setresp(3); return redis.call('hgetall', 'nohash')",
                "0",
            ],
            &["eval", "return {double=1.5}", "0"],
            &["eval", "return true", "0"],
            &["eval", "return {map={a=1}}", "0"],
            &[
                "eval",
                "return {big_number='123456789012345678901234567890'}",
                "0",
            ],
            &[
                "eval",
                "return {verbatim_string={format='txt', string='hi'}}",
                "0",
            ],
            &[
                "eval",
                "redis.setresp(3); return redis.call('get', 'nokey')",
                "0",
            ],
        ],
    );
}

#[test]
fn evalsha_and_the_script_cache() {
    let (_server, _dir, _redis, mut engram, mut redis) = beside_redis();
    let sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db";
    same(
        &mut engram,
        &mut redis,
        &[
            &["evalsha", sha, "0"],
            &["script", "exists", sha, "ffff"],
            &["script", "load", "return 1"],
            &["script", "exists", sha, "ffff"],
            &["evalsha", sha, "0"],
            &["evalsha", &sha.to_uppercase(), "0"],
            &["script", "flush", "bogus"],
            &["script", "flush"],
            &["evalsha", sha, "0"],
            &["script", "kill"],
            &["script", "bogus"],
        ],
    );
    assert_eq!(
        call(&mut engram, &["script", "help"]),
        call(&mut redis, &["script", "help"])
    );
}

/// A script past busy-reply-threshold: other clients get BUSY, SCRIPT KILL
/// stops one that has not written, and refuses one that has.
#[test]
fn busy_scripts_and_script_kill() {
    let (server, _dir) = common::start();
    let mut admin = Client::connect(&server);
    assert_eq!(
        call(
            &mut admin,
            &["config", "set", "busy-reply-threshold", "100"]
        ),
        "OK"
    );

    let mut looping = Client::connect(&server);
    let endless = "while true do end";
    let request = format!(
        "*3\r\n$4\r\neval\r\n${}\r\n{endless}\r\n$1\r\n0\r\n",
        endless.len()
    );
    looping.writer.write_all(request.as_bytes()).unwrap();
    let started = Instant::now();
    let mut other = Client::connect(&server);
    let reply = loop {
        let reply = call(&mut other, &["ping"]);
        if reply.starts_with("(error) BUSY") || started.elapsed() > Duration::from_secs(10) {
            break reply;
        }
    };
    assert_eq!(
        reply,
        "(error) BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
    );
    assert_eq!(
        call(&mut other, &["function", "kill"]),
        "(error) BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
    );
    // Another script stops waiting for the scripts' gate, which the loop
    // holds, and gets BUSY too.
    assert_eq!(
        call(&mut other, &["eval", "return 1", "0"]),
        "(error) BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
    );
    assert_eq!(call(&mut other, &["script", "kill"]), "OK");
    let killed = looping.reply();
    assert!(
        killed.starts_with("(error) ERR Script killed by user with SCRIPT KILL..."),
        "{killed}"
    );
    assert_eq!(call(&mut other, &["ping"]), "PONG");

    // A script that catches the kill with pcall is killed all the same.
    let catching =
        "local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end";
    let request = format!(
        "*3\r\n$4\r\neval\r\n${}\r\n{catching}\r\n$1\r\n0\r\n",
        catching.len()
    );
    looping.writer.write_all(request.as_bytes()).unwrap();
    let started = Instant::now();
    while !call(&mut other, &["ping"]).starts_with("(error) BUSY") {
        assert!(started.elapsed() < Duration::from_secs(10), "never BUSY");
    }
    assert_eq!(call(&mut other, &["script", "kill"]), "OK");
    let killed = looping.reply();
    assert!(killed.contains("Script killed by user"), "{killed}");
    assert_eq!(call(&mut other, &["eval", "return 1", "0"]), "(integer) 1");

    // A script that wrote cannot be killed.
    let script = "redis.call('set', 'x', 1); local t = redis.call('time')[1] + 2; while tonumber(redis.call('time')[1]) <= t do end; return 7";
    let request = format!(
        "*3\r\n$4\r\neval\r\n${}\r\n{script}\r\n$1\r\n0\r\n",
        script.len()
    );
    looping.writer.write_all(request.as_bytes()).unwrap();
    // Once others get BUSY the script has long run its first line (a
    // SCRIPT KILL sent before that could still stop it).
    let started = Instant::now();
    while !call(&mut other, &["ping"]).starts_with("(error) BUSY") {
        assert!(started.elapsed() < Duration::from_secs(10), "never BUSY");
    }
    let reply = call(&mut other, &["script", "kill"]);
    assert!(reply.starts_with("(error) UNKILLABLE"), "{reply}");
    assert_eq!(looping.reply(), "(integer) 7");
    assert_eq!(call(&mut other, &["get", "x"]), "\"1\"");
    assert_eq!(
        call(&mut other, &["script", "kill"]),
        "(error) NOTBUSY No scripts in execution right now."
    );
}

/// A function past busy-reply-threshold: FUNCTION STATS answers while it
/// runs (it holds the library set; the counts are kept beside it), names
/// it, and FUNCTION KILL stops it.
#[test]
fn function_stats_and_kill_while_a_function_runs() {
    let (server, _dir) = common::start();
    let mut admin = Client::connect(&server);
    assert_eq!(
        call(&mut admin, &["config", "set", "busy-reply-threshold", "10"]),
        "OK"
    );
    // A function runs first, then a library loads: a load's own hook
    // (its time limit) replaces the runs', which the next run puts back,
    // or FUNCTION KILL below would wait forever.
    let quick = "#!LUA name=quick\nredis.register_function('quick', function() return 1 end)";
    assert_eq!(call(&mut admin, &["function", "load", quick]), "\"quick\"");
    assert_eq!(call(&mut admin, &["fcall", "quick", "0"]), "(integer) 1");
    let lib = "#!LUA name=test\nredis.register_function('test', function() local a = 1 while true do a = a + 1 end end)";
    assert_eq!(call(&mut admin, &["function", "load", lib]), "\"test\"");
    let mut looping = Client::connect(&server);
    looping
        .writer
        .write_all(b"*3\r\n$5\r\nfcall\r\n$4\r\ntest\r\n$1\r\n0\r\n")
        .unwrap();
    let started = Instant::now();
    while !call(&mut admin, &["ping"]).starts_with("(error) BUSY") {
        assert!(started.elapsed() < Duration::from_secs(10), "never BUSY");
    }
    let stats = call(&mut admin, &["function", "stats"]);
    assert!(
        stats.starts_with("[\"running_script\", [\"name\", \"test\", \"command\", [\"fcall\", \"test\", \"0\"], \"duration_ms\", (integer) ")
            && stats.ends_with("\"engines\", [\"LUA\", [\"libraries_count\", (integer) 2, \"functions_count\", (integer) 2]]]"),
        "{stats}"
    );
    assert_eq!(call(&mut admin, &["function", "kill"]), "OK");
    let killed = looping.reply();
    assert!(
        killed.starts_with("(error) ERR Script killed by user"),
        "{killed}"
    );
    assert_eq!(call(&mut admin, &["ping"]), "PONG");
}

#[test]
fn functions_as_redis() {
    let (_server, _dir, _redis, mut engram, mut redis) = beside_redis();
    // One function per library: Redis lists a library's functions in its
    // hash table's order.
    let lib = "#!lua name=mylib\nredis.register_function('myf', function(keys, args) return redis.call('set', keys[1], args[1]) end)";
    let ro_lib = "#!lua name=rolib\nredis.register_function{function_name='myro', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}, description='reads'}";
    same(
        &mut engram,
        &mut redis,
        &[
            &["function", "load", lib],
            &["function", "load", lib],
            &["function", "load", "replace", lib],
            &["function", "load", ro_lib],
            &["fcall", "myf", "1", "k", "v"],
            &["fcall_ro", "myro", "1", "k"],
            &["fcall_ro", "myf", "1", "k", "v"],
            &["fcall", "nosuch", "0"],
            // Redis lists libraries in its hash table's order: one at a time.
            &["function", "list", "libraryname", "mylib"],
            &["function", "list", "libraryname", "rolib"],
            &["function", "list", "withcode", "libraryname", "my*"],
            &["function", "list", "libraryname", "zz*"],
            &["function", "stats"],
            &["function", "load", "return 1"],
            &["function", "load", "#!lua name=x\nlocal a = 1"],
            &[
                "function",
                "load",
                "#!lua name=bad-name\nredis.register_function('f', function() end)",
            ],
            &[
                "function",
                "load",
                "#!lua name=lib2\nredis.register_function('myf', function() end)",
            ],
            &["function", "load", "#!lua name=lib2\nreturn math.random()"],
            &[
                "function",
                "load",
                "#!lua name=lib2\nreturn redis.call('ping')",
            ],
            &["function", "delete", "nosuch"],
            &["function", "kill"],
            &["function", "restore", "bogus"],
            &["function", "restore", "a", "b", "c"],
            &["function", "flush", "bogus"],
            &["function", "flush", "sync", "extra"],
            &["fcall", "myf", "bad_arg"],
            &["fcall", "myf", "-1"],
            &["fcall", "myf", "5", "k"],
            &["xgroup", "create", "s"],
            &["pubsub", "channels", "a", "b"],
            &["function", "delete", "mylib"],
            &["function", "delete", "rolib"],
            &["function", "list"],
            &["function", "help"],
        ],
    );
}

#[test]
fn function_dumps_move_between_redis_and_engram() {
    let (_server, _dir, redis_server, mut engram, mut redis) = beside_redis();
    let lib = "#!lua name=moved\nredis.register_function('moved_f', function() return 42 end)";
    assert_eq!(call(&mut redis, &["function", "load", lib]), "\"moved\"");
    let mut redis_con = redis_server.con();
    let payload: Vec<u8> = redis::cmd("FUNCTION")
        .arg("DUMP")
        .query(&mut redis_con)
        .unwrap();
    let mut engram_con = common::redis_con(_server.addr);
    let _: () = redis::cmd("FUNCTION")
        .arg("RESTORE")
        .arg(&payload)
        .query(&mut engram_con)
        .unwrap();
    assert_eq!(
        call(&mut engram, &["fcall", "moved_f", "0"]),
        "(integer) 42"
    );
    // Engram's own dump goes back into Redis.
    let back: Vec<u8> = redis::cmd("FUNCTION")
        .arg("DUMP")
        .query(&mut engram_con)
        .unwrap();
    // Redis compresses the code (LZF), Engram does not: the bytes differ,
    // the libraries do not.
    let _: () = redis::cmd("FUNCTION")
        .arg("RESTORE")
        .arg(&back)
        .arg("REPLACE")
        .query(&mut redis_con)
        .unwrap();
    assert_eq!(call(&mut redis, &["fcall", "moved_f", "0"]), "(integer) 42");
}

#[test]
fn libraries_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(config_in(dir.path())).unwrap();
    let mut client = Client::connect(&server);
    let lib = "#!lua name=kept\nredis.register_function('kept_f', function(keys) return redis.call('incr', keys[1]) end)";
    assert_eq!(call(&mut client, &["function", "load", lib]), "\"kept\"");
    assert_eq!(
        call(&mut client, &["fcall", "kept_f", "1", "n"]),
        "(integer) 1"
    );
    drop(client);
    server.shutdown().unwrap();

    let server = Server::start(config_in(dir.path())).unwrap();
    let mut client = Client::connect(&server);
    assert_eq!(
        call(&mut client, &["fcall", "kept_f", "1", "n"]),
        "(integer) 2"
    );
    assert_eq!(call(&mut client, &["function", "delete", "kept"]), "OK");
    drop(client);
    server.shutdown().unwrap();

    let server = Server::start(config_in(dir.path())).unwrap();
    let mut client = Client::connect(&server);
    assert_eq!(
        call(&mut client, &["fcall", "kept_f", "1", "n"]),
        "(error) ERR Function not found"
    );
    drop(client);
    server.shutdown().unwrap();
}

/// CLIENT PAUSE WRITE holds scripts that may write, and lets through what
/// cannot: EVAL_RO, scripts and functions flagged `no-writes` (Redis
/// takes EVAL's and FCALL's flags from the script's).
#[test]
fn a_write_pause_lets_read_only_scripts_through() {
    let (server, _dir) = common::start();
    let mut admin = Client::connect(&server);
    let lib = "#!lua name=f1\nredis.register_function{function_name='f1', callback=function() return 'hello' end, flags={'no-writes'}}";
    assert_eq!(call(&mut admin, &["function", "load", lib]), "\"f1\"");
    assert_eq!(
        call(&mut admin, &["client", "pause", "60000", "write"]),
        "OK"
    );
    let mut reader = Client::connect(&server);
    let no_writes = "#!lua flags=no-writes\nreturn 'unique script'";
    assert_eq!(
        call(&mut reader, &["eval", no_writes, "0"]),
        "\"unique script\""
    );
    assert_eq!(
        call(&mut reader, &["eval_ro", "return 2", "0"]),
        "(integer) 2"
    );
    assert_eq!(call(&mut reader, &["fcall", "f1", "0"]), "\"hello\"");
    assert_eq!(call(&mut reader, &["fcall_ro", "f1", "0"]), "\"hello\"");
    // In a transaction too: EXEC is held only if a queued command writes.
    assert_eq!(call(&mut reader, &["multi"]), "OK");
    assert_eq!(call(&mut reader, &["eval", no_writes, "0"]), "QUEUED");
    assert_eq!(call(&mut reader, &["fcall", "f1", "0"]), "QUEUED");
    assert_eq!(
        call(&mut reader, &["exec"]),
        "[\"unique script\", \"hello\"]"
    );

    // A script without flags may write: held until the pause ends.
    let mut writer = Client::connect(&server);
    writer
        .writer
        .write_all(b"*3\r\n$4\r\neval\r\n$8\r\nreturn 3\r\n$1\r\n0\r\n")
        .unwrap();
    let started = Instant::now();
    while !call(&mut admin, &["info", "clients"]).contains("blocked_clients:1") {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the EVAL was not held"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(call(&mut admin, &["client", "unpause"]), "OK");
    assert_eq!(writer.reply(), "(integer) 3");
}

/// Over maxmemory, a script without a shebang is checked command by
/// command (a read runs), one with flags is refused whole unless it is
/// allow-oom or no-writes; DEBUG SET-DISABLE-DENY-SCRIPTS lets scripts
/// call DEBUG. The same replies as redis-server's.
#[test]
fn oom_checks_and_denied_commands_as_redis() {
    let (server, _dir, _conf) = common::start_debuggable();
    let redis = common::RedisServer::start();
    let (mut engram, mut redis_client) = (Client::connect(&server), redis.client());
    same(
        &mut engram,
        &mut redis_client,
        &[
            &["set", "x", "123"],
            &["config", "set", "maxmemory", "1"],
            &["eval", "redis.call('set','x',1) return 1", "1", "x"],
            &["eval", "return redis.call('get','x')", "1", "x"],
            &["eval", "#!lua flags=\nreturn 1", "0"],
            &[
                "eval",
                "#!lua flags=allow-oom\nredis.call('set','x',1) return 1",
                "1",
                "x",
            ],
            &[
                "eval",
                "#!lua flags=no-writes\nreturn redis.call('get','x')",
                "0",
            ],
            &["config", "set", "maxmemory", "0"],
            &["eval", "return redis.call('debug','protocol','true')", "0"],
            &["debug", "set-disable-deny-scripts", "1"],
            &["eval", "return redis.call('debug','protocol','true')", "0"],
            &[
                "eval",
                "return redis.call('debug','protocol','bignum')",
                "0",
            ],
            &["debug", "set-disable-deny-scripts", "0"],
            &["eval", "return redis.call('debug','protocol','true')", "0"],
        ],
    );
}

/// What Redis does differently for a script's calls: a set sorted BY a
/// constant comes back ordered, XREAD may not BLOCK, `redis.acl_check_cmd`
/// answers for the calling user; and INFO counts the cached scripts.
#[test]
fn script_calls_sort_sets_refuse_block_and_check_acl_as_redis() {
    let (_server, _dir, _redis, mut e, mut r) = beside_redis();
    same(
        &mut e,
        &mut r,
        &[
            &["sadd", "s", "u", "i", "f", "aa", "d", "z", "b", "h", "a", "azz"],
            &["mset", "w_a", "1", "w_b", "2"],
            &["eval", "return redis.call('sort', KEYS[1], 'by', 'nosort')", "1", "s"],
            &["eval", "return redis.call('sort', KEYS[1], 'by', 'nosort', 'get', 'w_*')", "1", "s"],
            &["eval", "return redis.pcall('xread', 'BLOCK', '0', 'STREAMS', 'x', '$')", "0"],
            &["eval", "return redis.pcall('XREADGROUP', 'GROUP', 'g', 'c', 'BLOCK', '10', 'STREAMS', 'x', '>')", "0"],
            &["eval", "return redis.pcall('xread', 'STREAMS', 'block', '0')", "0"],
            &["acl", "setuser", "bob", "on", ">123", "+@scripting", "+set", "~x*"],
            &["auth", "bob", "123"],
            &["eval", "return redis.acl_check_cmd('set', 'xx', 1)", "1", "xx"],
            &["eval", "return redis.acl_check_cmd('hset', 'xx', 'f', 1)", "1", "xx"],
            &["eval", "return redis.acl_check_cmd('set', 'yy', 1)", "0"],
            // Its arguments read as `redis.call`'s are; its refusals, and
            // setresp's and set_repl's, name the script's line also when
            // called as a tail call (Redis's are C functions, which a tail
            // call does not take the script's frame from).
            &["eval", "return redis.acl_check_cmd('set', 'xx', 2.5)", "0"],
            &["eval", "local ok = redis.acl_check_cmd('set', 'xx', {}) return ok", "0"],
            &["eval", "local ok = redis.acl_check_cmd() return ok", "0"],
            &["eval", "return redis.acl_check_cmd('set', 'xx', {})", "0"],
            &["eval", "return redis.acl_check_cmd()", "0"],
            &["eval", "return redis.acl_check_cmd('nosuchcommand')", "0"],
            &["eval", "return redis.setresp(4)", "0"],
            &["eval", "return redis.setresp()", "0"],
            &["eval", "return redis.set_repl(8)", "0"],
            &["eval", "\nreturn redis.set_repl()", "0"],
            &["eval", "return pcall(redis.setresp, 4)", "0"],
            &["eval", "return redis.setresp(3)", "0"],
        ],
    );
    let mut c = Client::connect(&_server);
    c.call("SCRIPT FLUSH");
    c.call("SCRIPT LOAD return\\s1");
    c.call("EVAL return\\s2 0");
    assert_eq!(
        common::info_number(&mut c, "memory", "number_of_cached_scripts"),
        2
    );
    c.call("SCRIPT FLUSH ASYNC");
    assert_eq!(
        common::info_number(&mut c, "memory", "number_of_cached_scripts"),
        0
    );
}

/// Function names in any case, a quoted library name, and FUNCTION LIST's
/// options given twice, beside Redis.
#[test]
fn function_names_and_list_options_as_redis() {
    let (_server, _dir, _redis, mut e, mut r) = beside_redis();
    same(
        &mut e,
        &mut r,
        &[
            &[
                "function",
                "load",
                "#!lua name=\"quoted\"\nredis.register_function('MyFn', function() return 1 end)",
            ],
            &["fcall", "myfn", "0"],
            &["fcall", "MYFN", "0"],
            &[
                "function",
                "load",
                "#!lua name=other\nredis.register_function('myfn', function() return 2 end)",
            ],
            &["function", "list", "withcode", "withcode"],
            &[
                "function",
                "list",
                "withcode",
                "libraryname",
                "foo",
                "libraryname",
                "foo",
            ],
            &["function", "list", "libraryname", "quoted"],
            &["function", "delete", "quoted"],
            &["fcall", "myfn", "0"],
        ],
    );
}

/// A script's bytes in hex, for comparing encodings.
const HEX: &str =
    "local h = '' for i = 1, #e do h = h .. string.format('%02x', string.byte(e, i)) end return h";

/// cmsgpack: the bytes of every encoding form and the values decoded,
/// beside Redis.
#[test]
fn cmsgpack_as_redis() {
    let (_server, _dir, _redis, mut e, mut r) = beside_redis();
    let packs = [
        "0.1",
        "0.5",
        "-1099511627776",
        "1, 127, 128, 255, 256, 65535, 65536, 4294967295, 4294967296",
        "-1, -32, -33, -128, -129, -32768, -32769, -2147483648, -2147483649",
        "true, false, nil",
        "'', string.rep('x', 31), string.rep('y', 32)",
        "string.rep('z', 255), string.rep('z', 256)",
        "{}",
        "{1, 2, 3}",
        "{1, nil, 3}",
        "{a = 1}",
        "{[1] = 'a', [3] = 'c'}",
        "{0.5, {1, {2, {3}}}}",
        "1/0",
        "-1/0",
    ];
    for pack in packs {
        let script = format!("local e = cmsgpack.pack({pack}) {HEX}");
        same(&mut e, &mut r, &[&["eval", &script, "0"]]);
    }
    let roundtrips = [
        "return {cmsgpack.unpack(cmsgpack.pack(1, 'two', {3, 4}, {k = 'v'}, true, 0.25))}",
        "local e = cmsgpack.pack(string.rep('w', 70000)) return {#e, string.byte(e, 1, 5)}",
        "local e = cmsgpack.pack(string.rep('w', 300)) return {#e, string.byte(e, 1, 3)}",
        "local a = {y = 5} a.x = a local r = cmsgpack.unpack(cmsgpack.pack(a)) return {r.x.x.y, r.y}",
        "local a = {y = 5} a.x = a local e = cmsgpack.pack(a) return #e",
        "local e = cmsgpack.pack('a', 'b', 'c') return {cmsgpack.unpack_one(e)}",
        "local e = cmsgpack.pack('a', 'b', 'c') return {cmsgpack.unpack_limit(e, 2, 0)}",
        "local e = cmsgpack.pack('a', 'b', 'c') return {cmsgpack.unpack_limit(e, 1, 4)}",
        "local e = cmsgpack.pack('a') return {cmsgpack.unpack_one(e, 0)}",
        "return cmsgpack.unpack(string.char(0xcd, 0x01))",
        "return cmsgpack.unpack(string.char(0xc1))",
        "return cmsgpack.pack()",
        "return cmsgpack.unpack_one('abc', 9)",
        "cmsgpack.pack = function() return 1 end",
        // Maps and arrays of 100,000 entries (Redis's smoke test): no
        // stack overflow, the same bytes' length, every entry back.
        "local m = {} for i = 1, 100000 do m[tostring(i)] = i end \
         local e = cmsgpack.pack({m = m}) local d = cmsgpack.unpack(e) \
         local n = 0 for k, v in pairs(d.m) do if tonumber(k) == v then n = n + 1 end end \
         return {#e, n}",
        "local a = {} for i = 1, 100000 do a[i] = i end \
         local e = cmsgpack.pack(a) return {#e, #cmsgpack.unpack(e)}",
    ];
    for script in roundtrips {
        same(&mut e, &mut r, &[&["eval", script, "0"]]);
    }
}

/// Time stands still inside a script, as Redis's time snapshot: a key set
/// to expire in 1 ms still exists after the script slept 10 ms, and is gone
/// for the next command.
#[test]
fn a_script_sees_the_time_it_started_at() {
    let (server, _dir, _conf) = common::start_debuggable();
    let redis = common::RedisServer::start();
    let (mut e, mut r) = (Client::connect(&server), redis.client());
    let script = "redis.call('SET', 'key', 'value', 'PX', '1') \
                  redis.call('DEBUG', 'SLEEP', 0.01) \
                  return redis.call('EXISTS', 'key')";
    same(
        &mut e,
        &mut r,
        &[
            &["debug", "set-disable-deny-scripts", "1"],
            &["eval", script, "0"],
            &["exists", "key"],
            &["debug", "set-disable-deny-scripts", "0"],
        ],
    );
}

/// A command a script's `redis.call` is refused (over maxmemory, a write
/// from a read-only script) counts as that command's rejected call in INFO
/// commandstats, as in Redis.
#[test]
fn refused_script_calls_are_rejected_calls_as_in_redis() {
    let (_server, _dir, _redis, mut e, mut r) = beside_redis();
    let counts = |c: &mut Client, command: &str| -> String {
        let info = c.call("INFO commandstats");
        let line = format!("cmdstat_{command}:");
        let Some(at) = info.find(&line) else {
            return "absent".to_string();
        };
        let rest = &info[at + line.len()..];
        let end = rest.find("\\r\\n").unwrap_or(rest.len());
        // calls=..,usec=..,usec_per_call=..,rejected_calls=..,failed_calls=..
        rest[..end]
            .split(',')
            .filter(|part| !part.starts_with("usec"))
            .collect::<Vec<_>>()
            .join(",")
    };
    for (setup, script, read_only) in [
        (
            "CONFIG SET maxmemory 1",
            "return redis.pcall('set','x','y')",
            false,
        ),
        (
            "CONFIG SET maxmemory 0",
            "return redis.pcall('set','x','y')",
            true,
        ),
        (
            "CONFIG SET maxmemory 0",
            "return redis.pcall('select',99)",
            false,
        ),
    ] {
        for c in [&mut e, &mut r] {
            c.call("CONFIG RESETSTAT");
            c.call(setup);
        }
        let command = if read_only { "eval_ro" } else { "eval" };
        same(&mut e, &mut r, &[&[command, script, "1", "x"]]);
        for name in ["set", "select", command] {
            assert_eq!(
                counts(&mut e, name),
                counts(&mut r, name),
                "cmdstat_{name} after {script} ({setup}; left: Engram, right: Redis)"
            );
        }
    }
    for c in [&mut e, &mut r] {
        c.call("CONFIG SET maxmemory 0");
    }
}

/// A key past its expiry that nothing deleted yet: DEBUG OBJECT still
/// shows it (Redis looks in its dictionary directly), a script's EXISTS
/// does not see it, and it is gone afterwards (Redis's "Script delete the
/// expired key").
#[test]
fn an_expired_key_is_shown_by_debug_object_and_not_by_a_script() {
    let (server, _dir, _conf) = common::start_debuggable();
    let redis = common::RedisServer::start();
    let (mut e, mut r) = (Client::connect(&server), redis.client());
    same(
        &mut e,
        &mut r,
        &[
            &["debug", "set-active-expire", "0"],
            &["set", "key", "value", "px", "1"],
        ],
    );
    std::thread::sleep(Duration::from_millis(20));
    for c in [&mut e, &mut r] {
        let shown = call(c, &["debug", "object", "key"]);
        assert!(shown.starts_with("Value at:"), "{shown}");
    }
    same(
        &mut e,
        &mut r,
        &[
            &["eval", "return redis.call('EXISTS', 'key')", "0"],
            &["exists", "key"],
            &["debug", "object", "key"],
            &["debug", "set-active-expire", "1"],
        ],
    );
}

/// FUNCTION LOAD is refused over maxmemory (its subcommand's denyoom flag,
/// which FUNCTION RESTORE shares), and a function flagged allow-oom still
/// writes, as in Redis.
#[test]
fn function_load_is_refused_over_maxmemory_as_in_redis() {
    let (_server, _dir, _redis, mut e, mut r) = beside_redis();
    let library = "#!lua name=test\nredis.register_function('f1', function() return 1 end)";
    let oom_free = "#!lua name=f1\nredis.register_function{function_name='f1', \
                    callback=function() return redis.call('set', 'x', '1') end, \
                    flags={'allow-oom'}}";
    same(&mut e, &mut r, &[&["function", "load", "replace", library]]);
    same(
        &mut e,
        &mut r,
        &[
            &["config", "set", "maxmemory", "1"],
            &["function", "flush"],
            &["function", "load", "replace", library],
            &["function", "list"],
            // Another container's denyoom subcommand.
            &["xgroup", "create", "s", "g", "$", "mkstream"],
            &["config", "set", "maxmemory", "0"],
            &["function", "load", "replace", oom_free],
            &["config", "set", "maxmemory", "1"],
            &["fcall", "f1", "1", "x"],
            &["get", "x"],
            &["config", "set", "maxmemory", "0"],
        ],
    );
}

/// KEYS, SCAN and RANDOMKEY inside MULTI and inside a script see the
/// transaction's own writes (buffered until it commits), as Redis's do.
#[test]
fn keys_scan_and_randomkey_see_a_transactions_own_writes_as_in_redis() {
    let (_server, _dir, _redis, mut engram, mut redis) = beside_redis();
    same(
        &mut engram,
        &mut redis,
        &[
            &["flushall"],
            &["set", "a", "1"],
            &["multi"],
            &["del", "a"],
            &["set", "c", "3"],
            &["keys", "*"],
            &["scan", "0"],
            &["randomkey"],
            &["dbsize"],
            &["exec"],
            &[
                "eval",
                "redis.call('del', 'c') redis.call('set', 'e', '5') \
                 return {redis.call('keys', '*'), redis.call('scan', '0'), \
                 redis.call('randomkey'), redis.call('dbsize')}",
                "0",
            ],
            &[
                "eval",
                "redis.call('del', 'e') return redis.call('randomkey')",
                "0",
            ],
            &["multi"],
            &["set", "f", "6"],
            &["expire", "f", "100"],
            &["scan", "0", "match", "f"],
            &["exec"],
            &["keys", "*"],
        ],
    );
}

/// INFO memory's scripting lines, beside Redis's: every one Redis 7.0
/// shows, the cache and library counts and sizes following SCRIPT LOAD,
/// FUNCTION LOAD and SCRIPT FLUSH, and the Lua heap staying under the
/// bound Redis's own suite sets ("EVAL does not leak in the Lua stack":
/// 100 KB after 10,000 runs), which the collector's steps between runs
/// keep.
#[test]
fn info_memory_shows_scripting_as_redis() {
    use common::info_number;
    const FIELDS: [&str; 13] = [
        "used_memory_lua",
        "used_memory_vm_eval",
        "used_memory_lua_human",
        "used_memory_scripts_eval",
        "number_of_cached_scripts",
        "number_of_functions",
        "number_of_libraries",
        "used_memory_vm_functions",
        "used_memory_vm_total",
        "used_memory_vm_total_human",
        "used_memory_functions",
        "used_memory_scripts",
        "used_memory_scripts_human",
    ];
    let (_server, _dir, _redis, mut engram, mut redis) = beside_redis();
    let names = |c: &mut Client| -> Vec<String> {
        // The bulk reply as `Client` renders it: escaped line ends.
        c.call("INFO memory")
            .split("\\r\\n")
            .filter_map(|line| line.split_once(':').map(|(name, _)| name.to_string()))
            .filter(|name| FIELDS.contains(&name.as_str()))
            .collect()
    };
    assert_eq!(
        names(&mut engram),
        names(&mut redis),
        "the same lines in the same order"
    );
    assert_eq!(
        names(&mut redis).len(),
        FIELDS.len(),
        "Redis 7.0 shows them all"
    );

    let library = "#!lua name=lib\nredis.register_function('f', function() return 1 end)";
    for c in [&mut engram, &mut redis] {
        assert_eq!(info_number(c, "memory", "used_memory_scripts_eval"), 0);
        call(c, &["SCRIPT", "LOAD", "return 1"]);
        call(c, &["FUNCTION", "LOAD", library]);
        assert_eq!(info_number(c, "memory", "number_of_cached_scripts"), 1);
        assert_eq!(info_number(c, "memory", "number_of_functions"), 1);
        assert_eq!(info_number(c, "memory", "number_of_libraries"), 1);
        assert!(info_number(c, "memory", "used_memory_scripts_eval") > 0);
        assert!(info_number(c, "memory", "used_memory_functions") > 0);
        // A script already cached adds nothing; a new one adds its bytes.
        let one = info_number(c, "memory", "used_memory_scripts_eval");
        call(c, &["SCRIPT", "LOAD", "return 1"]);
        assert_eq!(info_number(c, "memory", "used_memory_scripts_eval"), one);
        call(c, &["SCRIPT", "LOAD", "return 2"]);
        assert!(info_number(c, "memory", "used_memory_scripts_eval") > one);
        assert_eq!(info_number(c, "memory", "number_of_cached_scripts"), 2);
        let runs: Vec<String> = (0..10_000)
            .map(|_| "EVAL return\\sredis.call('incr',KEYS[1]) 1 x".to_string())
            .collect();
        let lines: Vec<&str> = runs.iter().map(String::as_str).collect();
        for chunk in lines.chunks(1000) {
            c.pipeline(chunk);
        }
        assert_eq!(call(c, &["GET", "x"]), "\"10000\"");
        let lua = info_number(c, "memory", "used_memory_lua");
        assert!(
            lua > 0 && lua < 100 * 1024,
            "the Lua heap after 10,000 runs: {lua} bytes"
        );
        let (eval_vm, functions_vm) = (
            info_number(c, "memory", "used_memory_vm_eval"),
            info_number(c, "memory", "used_memory_vm_functions"),
        );
        assert_eq!(eval_vm, lua);
        assert_eq!(
            info_number(c, "memory", "used_memory_vm_total"),
            eval_vm + functions_vm
        );
        call(c, &["SCRIPT", "FLUSH"]);
        assert_eq!(info_number(c, "memory", "number_of_cached_scripts"), 0);
        assert_eq!(info_number(c, "memory", "used_memory_scripts_eval"), 0);
        assert_eq!(
            info_number(c, "memory", "used_memory_scripts"),
            info_number(c, "memory", "used_memory_functions")
        );
    }
}
