#!/usr/bin/env python3
"""Commands on a large bitmap: Engram against Redis in the same run.

Both servers get the same 100 MB string of random bytes (one SET), then:
BITCOUNT of the whole value, BITCOUNT of a 1 MB byte range, BITPOS of the
first clear bit, GETBIT, and SETBIT at random offsets (each SETBIT is a
durable write at the chosen durability). For every command it prints the
mean time per call as the client sees it and the server process's CPU
time per call (user + system, from /proc: on two cores the client takes
one, so throughput alone would hide the server's cost), for both servers,
and the Engram/Redis ratio.

    scripts/large_bitmaps.py [--engram target/release/engram]
        [--redis-server redis-server] [--mb 100] [--rounds 50]
        [--durability everysec]

Starts both servers on free loopback ports in a temporary directory (Redis
with AOF at the matching appendfsync, no RDB snapshots; see pair.py) and
stops them at the end. Installs redis-py with pip if missing.
"""

import argparse
import random
import subprocess
import sys
import time

try:
    import redis
except ImportError:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "redis"])
    import redis

from pair import cpu_seconds, servers


def timed(pid, rounds, call):
    cpu, started = cpu_seconds(pid), time.perf_counter()
    for i in range(rounds):
        call(i)
    wall = (time.perf_counter() - started) / rounds
    return wall, (cpu_seconds(pid) - cpu) / rounds


def measure(port, pid, value, rounds):
    r = redis.Redis(port=port)
    r.set("bitmap", value)
    bits = len(value) * 8
    rng = random.Random(7)
    offsets = [rng.randrange(bits) for _ in range(rounds)]
    expected = bin(int.from_bytes(value, "big")).count("1")
    assert r.bitcount("bitmap") == expected, "BITCOUNT differs from the value's"
    results = [
        ("BITCOUNT whole", timed(pid, rounds, lambda i: r.bitcount("bitmap"))),
        ("BITCOUNT 1 MB range", timed(
            pid, rounds, lambda i: r.bitcount("bitmap", i << 20, (i << 20) + (1 << 20) - 1))),
        ("BITPOS 0", timed(pid, rounds, lambda i: r.bitpos("bitmap", 0))),
        ("GETBIT", timed(pid, rounds * 20, lambda i: r.getbit("bitmap", offsets[i % rounds]))),
        ("SETBIT", timed(pid, rounds * 20, lambda i: r.setbit("bitmap", offsets[i % rounds], i & 1))),
        ("GETBIT after SETBIT", timed(
            pid, rounds * 20, lambda i: r.getbit("bitmap", offsets[i % rounds]))),
    ]
    r.delete("bitmap")
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engram", default="target/release/engram")
    parser.add_argument("--redis-server", default="redis-server")
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--durability", default="everysec",
                        choices=["process", "everysec", "always"])
    args = parser.parse_args()
    value = random.Random(1).randbytes(args.mb << 20)
    with servers(args.engram, args.redis_server, args.durability, "engram-bits-") as running:
        results = {name: measure(port, proc.pid, value, args.rounds)
                   for name, (port, proc) in running.items()}
    print(f"{args.mb} MB bitmap, durability {args.durability}, {args.rounds} rounds "
          f"(GETBIT/SETBIT: {args.rounds * 20})")
    print(f"{'command':<22} {'engram µs':>10} {'redis µs':>10} {'ratio':>6}"
          f" {'engram cpu µs':>14} {'redis cpu µs':>13} {'ratio':>6}")
    for (name, (ew, ec)), (_, (rw, rc)) in zip(results["engram"], results["redis"]):
        print(f"{name:<22} {ew * 1e6:>10.1f} {rw * 1e6:>10.1f} {ew / rw:>6.2f}"
              f" {ec * 1e6:>14.1f} {rc * 1e6:>13.1f} {ec / max(rc, 1e-9):>6.2f}")


if __name__ == "__main__":
    main()
