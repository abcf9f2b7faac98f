#!/usr/bin/env python3
"""Commands on large sorted sets: Engram against Redis in the same run.

What a command costs should depend on what it touches, not on the size of
the set: a transaction changing one member (MULTI / ZINCRBY / EXEC), a
plain ZINCRBY, ZSCORE, and a whole ZSCAN with COUNT 1000 (its total time
and its slowest step: a step holds the key's shard). For each size both
servers get the same sorted set; one client; the script prints both
servers' numbers and the Engram/Redis ratio.

    scripts/large_collections.py [--engram target/release/engram]
        [--redis-server redis-server] [--sizes 1000,100000] [--rounds 2000]

Starts both servers on free loopback ports in a temporary directory (Redis
with AOF and appendfsync no, Engram with durability process: the same
promise) and stops them at the end. Installs redis-py with pip if missing.
"""

import argparse
import subprocess
import sys

try:
    import redis
except ImportError:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "redis"])
    import redis

from pair import servers


def measure(port, size, rounds):
    r = redis.Redis(port=port)
    key = f"z{size}"
    r.delete(key)
    pipe = r.pipeline(transaction=False)
    for i in range(size):
        pipe.zadd(key, {f"m{i}": i})
        if i % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()
    assert r.zcard(key) == size
    started = time.perf_counter()
    for i in range(rounds):
        tx = r.pipeline(transaction=True)
        tx.zincrby(key, 1, f"m{i % size}")
        tx.execute()
    multi = (time.perf_counter() - started) / rounds
    started = time.perf_counter()
    for i in range(rounds):
        r.zincrby(key, 1, f"m{i % size}")
    plain = (time.perf_counter() - started) / rounds
    started = time.perf_counter()
    for i in range(rounds):
        r.zscore(key, f"m{i * 37 % size}")
    score = (time.perf_counter() - started) / rounds
    started = time.perf_counter()
    cursor, seen, slowest = 0, 0, 0.0
    while True:
        step = time.perf_counter()
        cursor, batch = r.zscan(key, cursor, count=1000)
        slowest = max(slowest, time.perf_counter() - step)
        seen += len(batch)
        if cursor == 0:
            break
    scan = time.perf_counter() - started
    assert seen >= size, f"ZSCAN returned {seen} of {size}"
    return [
        ("MULTI/ZINCRBY/EXEC", "µs", multi * 1e6),
        ("ZINCRBY", "µs", plain * 1e6),
        ("ZSCORE", "µs", score * 1e6),
        ("ZSCAN COUNT 1000, all", "ms", scan * 1e3),
        ("ZSCAN, slowest step", "ms", slowest * 1e3),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engram", default="target/release/engram")
    parser.add_argument("--redis-server", default="redis-server")
    parser.add_argument("--sizes", default="1000,100000")
    parser.add_argument("--rounds", type=int, default=2000)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with servers(args.engram, args.redis_server, "process", "engram-multi-") as running:
        engram_port, redis_port = running["engram"][0], running["redis"][0]
        print(f"{'size':>8} {'command':<24} {'unit':<4} {'engram':>10} {'redis':>10} {'ratio':>6}")
        for size in sizes:
            ours = measure(engram_port, size, args.rounds)
            theirs = measure(redis_port, size, args.rounds)
            for (name, unit, e), (_, _, r) in zip(ours, theirs):
                print(f"{size:>8} {name:<24} {unit:<4} {e:>10.1f} {r:>10.1f} {e / r:>6.2f}")


if __name__ == "__main__":
    main()
