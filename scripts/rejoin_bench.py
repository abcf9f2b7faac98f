#!/usr/bin/env python3
"""A replica that lost its disk rejoins: Engram's snapshot beside Redis's
full resynchronization (issue 26).

    scripts/rejoin_bench.py --engram target/release/engram [--keys 1000000]
        [--value-bytes 100] [--rounds 3]

Engram: three `engram serve --node-id N --peers ...` on loopback with
`--raft-compact-bytes 1mb`. The keys are written through the leader
(redis-benchmark, SET of `key:__rand_int__` over --keys, pipelined), a
follower is killed and its directory emptied, the group writes 4 MB more
(so its logs compact past the lost follower), and the follower restarts
empty. Timed from its start to the moment its applied index reaches the
leader's commit index (INFO replication), with the snapshot's size and
build time from the leader's log, and the longest stall of a client
writing to the leader meanwhile (the snapshot is built on the leader's
apply thread).

Redis 7.0: a master with the same keys (`save ""`, no AOF, its default
diskless sync through a fork with `repl-diskless-sync-delay 0`: the
default waits 5 s for more replicas to share the transfer) and a fresh
`redis-server --replicaof`; timed from the replica's start to
`master_link_status:up` with no sync in progress, with the same client
writing to the master meanwhile.

Rounds alternate which system goes first; the median of each column is
printed with the ratio.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

try:
    import redis
    from pair import free_port, wait_ready
except ImportError as e:  # pragma: no cover
    sys.exit(f"needs redis-py: python3 -m pip install redis ({e})")


def info(port, section="replication"):
    r = redis.Redis(port=port, socket_timeout=2)
    return r.info(section)


def fill(port, keys, value_bytes):
    done = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", "set", "-n", str(keys * 2),
         "-r", str(keys), "-d", str(value_bytes), "-P", "16", "-c", "20", "-q"],
        capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"redis-benchmark failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


class Stalls:
    """A client SETting on `port` in a loop; the longest gap between two
    acknowledgements while it runs."""

    def __init__(self, port):
        self.port = port
        self.stop = threading.Event()
        self.longest = 0.0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        r = redis.Redis(port=self.port, socket_timeout=30)
        last = time.monotonic()
        n = 0
        while not self.stop.is_set():
            r.set(f"stall:{n % 1000}", "x")
            now = time.monotonic()
            self.longest = max(self.longest, now - last)
            last = now
            n += 1
            time.sleep(0.001)

    def finish(self):
        self.stop.set()
        self.thread.join()
        return self.longest


def engram_round(args, keys):
    tmp = tempfile.mkdtemp(prefix="rejoin-bench-")
    ports = [free_port() for _ in range(3)]
    bus = [free_port() for _ in range(3)]
    peers = ",".join(f"{i + 1}@127.0.0.1:{bus[i]}" for i in range(3))
    procs = [None] * 3
    logs = [os.path.join(tmp, f"n{i}.log") for i in range(3)]

    def launch(i):
        procs[i] = subprocess.Popen(
            [args.engram, "serve", "--port", str(ports[i]), "--dir",
             os.path.join(tmp, f"n{i}"), "--node-id", str(i + 1), "--peers", peers,
             "--raft-compact-bytes", "1mb"],
            stdout=subprocess.DEVNULL, stderr=open(logs[i], "a"))

    try:
        for i in range(3):
            launch(i)
        for i, port in enumerate(ports):
            wait_ready(port, procs[i])
        deadline = time.time() + 30
        leader = None
        while leader is None:
            for i in range(3):
                try:
                    if info(ports[i]).get("role") == "master":
                        leader = i
                except Exception:
                    pass
            if time.time() > deadline:
                sys.exit("no leader")
            time.sleep(0.05)
        fill(ports[leader], keys, args.value_bytes)
        lost = (leader + 1) % 3
        procs[lost].kill()
        procs[lost].wait()
        shutil.rmtree(os.path.join(tmp, f"n{lost}"))
        # 4 MB more: past four times the compaction threshold.
        r = redis.Redis(port=ports[leader])
        pipe = r.pipeline(transaction=False)
        for i in range(40_000):
            pipe.set(f"more:{i}", "m" * 100)
        pipe.execute()
        stalls = Stalls(ports[leader])
        started = time.monotonic()
        launch(lost)
        wait_ready(ports[lost], procs[lost])
        while True:
            target = info(ports[leader])["raft_commit_index"]
            if info(ports[lost])["raft_applied_index"] >= target:
                break
            if time.monotonic() - started > 600:
                sys.exit("the rejoining node never caught up")
            time.sleep(0.01)
        elapsed = time.monotonic() - started
        stall = stalls.finish()
        installed = info(ports[lost])["raft_snapshots_installed"]
        built = re.findall(r"built a snapshot at index \d+ \((\d+) bytes\) in ([0-9.]+)(ms|s|µs)",
                           open(logs[leader]).read())
        size, build = None, None
        if built:
            size = int(built[-1][0])
            value, unit = float(built[-1][1]), built[-1][2]
            build = value / {"s": 1, "ms": 1000, "µs": 1e6}[unit]
        return {"rejoin_s": elapsed, "stall_ms": stall * 1000, "snapshot_mb": (size or 0) / 1e6,
                "build_s": build or 0.0, "snapshots": installed}
    finally:
        for p in procs:
            if p is not None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def redis_round(args, keys):
    tmp = tempfile.mkdtemp(prefix="rejoin-bench-redis-")
    master_port, replica_port = free_port(), free_port()
    procs = []
    try:
        procs.append(subprocess.Popen(
            ["redis-server", "--port", str(master_port), "--save", "", "--appendonly", "no",
             "--dir", tmp, "--dbfilename", "master.rdb",
             # Its default waits 5 s for more replicas before a diskless
             # transfer starts: not what one replica's resync costs.
             "--repl-diskless-sync-delay", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_ready(master_port, procs[0])
        fill(master_port, keys, args.value_bytes)
        stalls = Stalls(master_port)
        started = time.monotonic()
        procs.append(subprocess.Popen(
            ["redis-server", "--port", str(replica_port), "--save", "", "--appendonly", "no",
             "--dir", tmp, "--dbfilename", "replica.rdb",
             "--replicaof", "127.0.0.1", str(master_port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_ready(replica_port, procs[1])
        while True:
            i = info(replica_port)
            if i.get("master_link_status") == "up" and not i.get("master_sync_in_progress"):
                break
            if time.monotonic() - started > 600:
                sys.exit("the Redis replica never synced")
            time.sleep(0.01)
        elapsed = time.monotonic() - started
        stall = stalls.finish()
        return {"rejoin_s": elapsed, "stall_ms": stall * 1000}
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--engram", required=True)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results = {"engram": [], "redis": []}
    for round_ in range(args.rounds):
        order = ["engram", "redis"] if round_ % 2 == 0 else ["redis", "engram"]
        for system in order:
            run = engram_round if system == "engram" else redis_round
            result = run(args, args.keys)
            results[system].append(result)
            print(f"round {round_ + 1} {system}: " +
                  ", ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                            for k, v in result.items()), flush=True)
    med = {s: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
           for s, rs in results.items()}
    print()
    print(f"{args.keys} keys of {args.value_bytes} bytes, medians of {args.rounds} rounds:")
    print(f"  rejoin: engram {med['engram']['rejoin_s']:.2f} s, redis {med['redis']['rejoin_s']:.2f} s, "
          f"ratio (redis/engram, above 1: Engram faster) "
          f"{med['redis']['rejoin_s'] / med['engram']['rejoin_s']:.2f}")
    print(f"  longest write stall on the leader/master meanwhile: engram "
          f"{med['engram']['stall_ms']:.0f} ms, redis {med['redis']['stall_ms']:.0f} ms")
    print(f"  engram snapshot: {med['engram']['snapshot_mb']:.1f} MB built in "
          f"{med['engram']['build_s']:.2f} s; snapshots installed per rejoin: "
          f"{med['engram']['snapshots']:.0f}")


if __name__ == "__main__":
    main()
