#!/usr/bin/env python3
"""EVALSHA of a two-command script: Engram against Redis in the same run.

The script (INCR a key, then GET it back) is loaded with SCRIPT LOAD on
both servers; `redis-benchmark` then calls EVALSHA from 50 clients on
random keys out of 100,000 (most calls update a key that exists), with no
pipelining and with -P 16. Reported per server and pipeline depth: calls
per second (redis-benchmark's count) and the server's CPU time per call
(user + system from /proc: on two cores the clients take most of the
machine, so throughput alone hides the server's cost). Rounds alternate
between the servers, the order flipping each round; the median round is
reported with the Engram/Redis ratios.

    scripts/evalsha_bench.py [--engram target/release/engram]
        [--redis-server redis-server] [--requests 200000] [--rounds 3]
        [--durability process]

Both servers run on free loopback ports in a temporary directory (Redis
with AOF at the matching appendfsync, no RDB snapshots: see pair.py).
Needs redis-benchmark (redis-tools, installed with apt-get when missing)
and redis-py (installed with pip when missing).
"""

import argparse
import shutil
import subprocess
import sys

if not shutil.which("redis-benchmark"):
    subprocess.check_call(["apt-get", "update", "-qq"])
    subprocess.check_call(["apt-get", "install", "-y", "-qq", "redis-tools"])

try:
    import redis
except ImportError:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "redis"])
    import redis

from pair import cpu_seconds, servers

SCRIPT = "redis.call('INCR', KEYS[1]) return redis.call('GET', KEYS[1])"


def one_round(port, pid, pipeline, args):
    sha = redis.Redis(port=port).script_load(SCRIPT)
    cpu = cpu_seconds(pid)
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-c", "50", "-n", str(args.requests),
         "-r", "100000", "-P", str(pipeline), "--csv",
         "EVALSHA", sha, "1", "key:__rand_int__"],
        check=True, capture_output=True, text=True).stdout
    cpu = cpu_seconds(pid) - cpu
    rps = float(out.strip().splitlines()[-1].split(",")[1].strip('"'))
    return rps, cpu / args.requests * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engram", default="target/release/engram")
    p.add_argument("--redis-server", default="redis-server")
    p.add_argument("--requests", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--durability", default="process")
    args = p.parse_args()

    pipelines = (1, 16)
    results = {(name, pl): [] for name in ("engram", "redis") for pl in pipelines}
    with servers(args.engram, args.redis_server, args.durability, "evalsha-") as pair:
        for round_ in range(args.rounds):
            order = ("engram", "redis") if round_ % 2 == 0 else ("redis", "engram")
            for pipeline in pipelines:
                for name in order:
                    port, proc = pair[name]
                    results[(name, pipeline)].append(one_round(port, proc.pid, pipeline, args))

    def median(key):
        runs = sorted(results[key], key=lambda r: r[0])
        return runs[len(runs) // 2]

    print(f"EVALSHA of a two-command script (INCR, GET), 50 clients, 100,000 keys, "
          f"{args.requests} calls per round, durability {args.durability}, "
          f"median of {args.rounds} rounds")
    print(f"{'server':8} {'-P':>3} {'calls/s':>12} {'CPU µs/call':>12}")
    for pipeline in pipelines:
        for name in ("engram", "redis"):
            rps, cpu_us = median((name, pipeline))
            rounds = ", ".join(f"{r:,.0f}" for r, _ in results[(name, pipeline)])
            print(f"{name:8} {pipeline:3} {rps:12,.0f} {cpu_us:12.1f}   rounds: {rounds}")
        e, r = median(("engram", pipeline)), median(("redis", pipeline))
        print(f"ratio (Engram/Redis) at -P {pipeline}: calls/s {e[0] / r[0]:.2f}, "
              f"CPU per call {e[1] / r[1]:.2f}")


if __name__ == "__main__":
    main()
