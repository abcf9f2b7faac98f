#!/usr/bin/env python3
"""Persistent bytes written per write: a three-node group against a single
node (issue 26's coupled-log question).

    scripts/replication_bytes.py --engram target/release/engram [--requests 200000]

For each of SET and HSET (redis-benchmark, 50 clients, -P 16, 100-byte
values, keys drawn from 100,000 so most writes overwrite), on a fresh
single node and on a fresh group: the growth of each server process's
`write_bytes` (/proc/PID/io: bytes it caused to be written to storage,
counted when a page turns dirty, so a page written again before its
write-back counts once) over the run, per acknowledged write. The group's
figure is the leader's and each follower's, and their sum.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

try:
    import redis
    from pair import free_port, wait_ready
except ImportError as e:  # pragma: no cover
    sys.exit(f"needs redis-py: python3 -m pip install redis ({e})")


def write_bytes(pid):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    return 0


def bench(port, test, requests):
    subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", test, "-n", str(requests), "-r", "100000",
         "-d", "100", "-P", "16", "-c", "50", "-q"],
        check=True, stdout=subprocess.DEVNULL)


def measure(engram, test, requests, group):
    tmp = tempfile.mkdtemp(prefix="replication-bytes-")
    procs = []
    try:
        n = 3 if group else 1
        ports = [free_port() for _ in range(n)]
        bus = [free_port() for _ in range(n)]
        peers = ",".join(f"{i + 1}@127.0.0.1:{bus[i]}" for i in range(n))
        for i in range(n):
            extra = ["--node-id", str(i + 1), "--peers", peers] if group else []
            procs.append(subprocess.Popen(
                [engram, "serve", "--port", str(ports[i]), "--dir", os.path.join(tmp, f"n{i}"),
                 *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for port, proc in zip(ports, procs):
            wait_ready(port, proc)
        leader = 0
        if group:
            deadline = time.time() + 30
            while True:
                roles = [redis.Redis(port=p).execute_command("ROLE")[0] for p in ports]
                if b"master" in roles:
                    leader = roles.index(b"master")
                    break
                if time.time() > deadline:
                    sys.exit("no leader")
                time.sleep(0.05)
        # Warm up (first writes create keys and grow files), then measure.
        bench(ports[leader], test, requests // 4)
        time.sleep(1)
        before = [write_bytes(p.pid) for p in procs]
        bench(ports[leader], test, requests)
        # Background write-back of what the run dirtied.
        time.sleep(2)
        after = [write_bytes(p.pid) for p in procs]
        per = [(a - b) / requests for a, b in zip(after, before)]
        roles = ["leader" if i == leader else "follower" for i in range(n)]
        return list(zip(roles, per))
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--engram", required=True)
    parser.add_argument("--requests", type=int, default=200_000)
    args = parser.parse_args()
    print("| test | single node B/write | group leader | group followers | group total | total ÷ single |")
    print("|---|---:|---:|---:|---:|---:|")
    for test in ["set", "hset"]:
        single = measure(args.engram, test, args.requests, False)[0][1]
        nodes = measure(args.engram, test, args.requests, True)
        leader = sum(b for r, b in nodes if r == "leader")
        followers = [b for r, b in nodes if r == "follower"]
        total = leader + sum(followers)
        # A short run at `process` may dirty no page not already dirty.
        ratio = f"{total / single:.2f}" if single > 0 else "n/a (single node wrote nothing new)"
        print(f"| {test.upper()} | {single:,.0f} | {leader:,.0f} | "
              f"{' / '.join(f'{b:,.0f}' for b in followers)} | {total:,.0f} | "
              f"{ratio} |", flush=True)


if __name__ == "__main__":
    main()
