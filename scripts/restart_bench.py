#!/usr/bin/env python3
"""Restart time: Engram after SHUTDOWN and after SIGKILL, beside Redis's
RDB load of the same data, in the same run (issue 25, item 6).

N keys (`key:0` .. `key:N-1`, values of --value-bytes bytes) are written
through `redis-cli --pipe` into `engram serve` and into redis-server
(with RDB snapshots and no AOF: the persistence Redis's documentation
recommends for a restart that loads a snapshot). Then, per round:

- Redis: SHUTDOWN SAVE, start again on the same directory;
- Engram: SHUTDOWN, start again; then SIGKILL, start again.

The time measured is from the process's start to PING answered and a GET
of the last key written answered with its value; before each start the
page cache's dirty pages are written back (`sync`, then 1 s), so that one
server's stop does not slow the next one's start. Redis has no data that
survives SIGKILL without AOF, so it is measured after SHUTDOWN SAVE only.
Engram's own split (engine recovery, keyspace scan) is read from INFO.
Engram runs at --durability (default its own, `process`); at `always` its
stores are staged, and after SIGKILL the integrity layer distrusts its
marks and checks every page again in the background. Redis's RDB load is
the same whatever the durability: it is the load of its snapshot.
The median of --rounds rounds is reported.

    scripts/restart_bench.py [--engram target/release/engram]
        [--redis-server redis-server] [--keys 5000000] [--value-bytes 200]
        [--rounds 3] [--dir DIR] [--expire-seconds 0]
        [--durability process|everysec|always]

The data lives under --dir (default: a temporary directory under the
current one, so on the disk rather than a tmpfs /tmp). Needs redis-cli
(redis-tools) and redis-py (installed with pip when missing).
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import redis
except ImportError:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "redis"])
    import redis

from pair import free_port


def fill(port, keys, value_bytes, expire_seconds):
    """SET key:i to a value of `value_bytes` bytes (with EX `expire_seconds`
    unless 0), through redis-cli --pipe."""
    value = b"v" * value_bytes
    head = b"*%d\r\n$3\r\nSET\r\n" % (5 if expire_seconds else 3)
    tail = b"$%d\r\n%s\r\n" % (value_bytes, value)
    if expire_seconds:
        seconds = b"%d" % expire_seconds
        tail += b"$2\r\nEX\r\n$%d\r\n%s\r\n" % (len(seconds), seconds)
    pipe = subprocess.Popen(["redis-cli", "-p", str(port), "--pipe"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    batch = []
    for i in range(keys):
        key = b"key:%d" % i
        batch.append(head + b"$%d\r\n%s\r\n" % (len(key), key) + tail)
        if len(batch) == 10000:
            pipe.stdin.write(b"".join(batch))
            batch.clear()
    pipe.stdin.write(b"".join(batch))
    pipe.stdin.close()
    out = pipe.stdout.read().decode()
    if pipe.wait() != 0 or "errors: 0" not in out:
        sys.exit(f"filling port {port} failed: {out}")


def start(command):
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def settle():
    """Lets the previous stop's writeback finish (Redis's SHUTDOWN SAVE
    leaves a 1 GB RDB file dirty in the page cache) so that it does not
    land on the next start's clock."""
    os.sync()
    time.sleep(1)


def ready_after(command, port, last_key, value_bytes):
    """Starts the server; seconds until PING and the last key's GET answer."""
    settle()
    started = time.monotonic()
    proc = start(command)
    client = redis.Redis(port=port, socket_connect_timeout=1)
    while True:
        if proc.poll() is not None:
            sys.exit(f"{command[0]} exited with {proc.returncode}")
        try:
            if client.ping():
                break
        except (redis.exceptions.ConnectionError, redis.exceptions.BusyLoadingError):
            time.sleep(0.002)
    while True:
        try:
            value = client.get(last_key)
            break
        except redis.exceptions.BusyLoadingError:
            time.sleep(0.002)
    elapsed = time.monotonic() - started
    if value is None or len(value) != value_bytes:
        sys.exit(f"{command[0]}: {last_key} not found after the restart")
    return proc, elapsed


def engram_split(port):
    info = redis.Redis(port=port).info("everything")
    return info.get("recovery_ms", 0), info.get("keyspace_scan_ms", 0)


def stop(proc, port, how):
    if how == "kill":
        proc.send_signal(signal.SIGKILL)
    else:
        try:
            redis.Redis(port=port).execute_command("SHUTDOWN", *([how] if how else []))
        except redis.exceptions.ConnectionError:
            pass
    proc.wait(timeout=120)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engram", default="target/release/engram")
    p.add_argument("--redis-server", default="redis-server")
    p.add_argument("--keys", type=int, default=5_000_000)
    p.add_argument("--value-bytes", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default=None)
    p.add_argument("--expire-seconds", type=int, default=0,
                   help="write every key with this expiry (a cache's keys); 0: none")
    p.add_argument("--durability", choices=["process", "everysec", "always"],
                   default="process", help="Engram's durability")
    args = p.parse_args()

    root = tempfile.mkdtemp(prefix="restart-bench-", dir=args.dir or os.getcwd())
    try:
        engram_port, redis_port = free_port(), free_port()
        engram_cmd = [args.engram, "serve", "--port", str(engram_port),
                      "--dir", os.path.join(root, "engram"),
                      "--durability", args.durability]
        redis_dir = os.path.join(root, "redis")
        os.mkdir(redis_dir)
        redis_cmd = [args.redis_server, "--port", str(redis_port), "--dir", redis_dir,
                     "--save", "3600 1", "--appendonly", "no"]
        last_key = f"key:{args.keys - 1}"

        print(f"filling {args.keys:,} keys of {args.value_bytes} bytes ...", flush=True)
        engram = start(engram_cmd)
        peer = start(redis_cmd)
        for port, proc in ((engram_port, engram), (redis_port, peer)):
            deadline = time.time() + 30
            while True:
                try:
                    redis.Redis(port=port).ping()
                    break
                except redis.exceptions.ConnectionError:
                    if time.time() > deadline or proc.poll() is not None:
                        sys.exit(f"server on port {port} did not start")
                    time.sleep(0.05)
        for port in (engram_port, redis_port):
            t = time.monotonic()
            fill(port, args.keys, args.value_bytes, args.expire_seconds)
            print(f"  port {port}: {time.monotonic() - t:.1f} s", flush=True)
        stop(engram, engram_port, None)
        stop(peer, redis_port, "SAVE")

        times = {"redis_rdb": [], "engram_shutdown": [], "engram_kill": []}
        splits = {"engram_shutdown": [], "engram_kill": []}
        for round_number in range(args.rounds):
            peer, elapsed = ready_after(redis_cmd, redis_port, last_key, args.value_bytes)
            times["redis_rdb"].append(elapsed)
            stop(peer, redis_port, "SAVE")
            # After SHUTDOWN (the previous stop was one), then after SIGKILL.
            engram, elapsed = ready_after(engram_cmd, engram_port, last_key, args.value_bytes)
            times["engram_shutdown"].append(elapsed)
            splits["engram_shutdown"].append(engram_split(engram_port))
            stop(engram, engram_port, "kill")
            engram, elapsed = ready_after(engram_cmd, engram_port, last_key, args.value_bytes)
            times["engram_kill"].append(elapsed)
            splits["engram_kill"].append(engram_split(engram_port))
            stop(engram, engram_port, None)
            print(f"round {round_number + 1}: " + ", ".join(
                f"{name} {values[-1]:.3f} s" for name, values in times.items()), flush=True)

        redis_median = statistics.median(times["redis_rdb"])
        print()
        expiry = f", each expiring in {args.expire_seconds} s" if args.expire_seconds else ""
        print(f"{args.keys:,} keys, {args.value_bytes}-byte values{expiry}, "
              f"Engram at {args.durability}, median of {args.rounds}")
        print(f"{'restart':<28} {'ready (s)':>10} {'vs Redis':>9} {'engine ms':>10} {'scan ms':>8}")
        print(f"{'redis RDB load':<28} {redis_median:>10.3f} {'1.00x':>9}")
        for name, label in (("engram_shutdown", "engram after SHUTDOWN"),
                            ("engram_kill", "engram after SIGKILL")):
            median = statistics.median(times[name])
            engine = statistics.median(s[0] for s in splits[name])
            scan = statistics.median(s[1] for s in splits[name])
            print(f"{label:<28} {median:>10.3f} {median / redis_median:>8.2f}x "
                  f"{engine:>10} {scan:>8}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
