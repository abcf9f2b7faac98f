#!/usr/bin/env python3
"""PUBLISH to many subscribers: Engram against Redis in the same run.

For each server, SUBSCRIBERS `redis-cli subscribe` processes listen on one
channel, then `redis-benchmark` sends PUBLISH from 50 clients. Reported per
server: PUBLISH calls per second (redis-benchmark's count), messages
delivered per second (calls x subscribers), the server's CPU time per
PUBLISH (user + system from /proc: on two cores the clients take most of
the machine, so throughput alone hides the server's cost), and whether
every subscriber got every message. Rounds alternate between the servers;
the median round is reported with the Engram/Redis ratios.

    scripts/pubsub_fanout.py [--engram target/release/engram]
        [--redis-server redis-server] [--subscribers 50] [--requests 200000]
        [--size 32] [--rounds 3] [--durability process]

Both servers run on free loopback ports in a temporary directory (Redis
with AOF at the matching appendfsync, no RDB snapshots: see pair.py; a
PUBLISH writes nothing, so durability does not enter into it). Needs
redis-benchmark and redis-cli (redis-tools, installed with apt-get when
missing) and redis-py (installed with pip when missing).
"""

import argparse
import shutil
import statistics
import subprocess
import sys
import threading
import time

if not shutil.which("redis-benchmark") or not shutil.which("redis-cli"):
    subprocess.check_call(["apt-get", "update", "-qq"])
    subprocess.check_call(["apt-get", "install", "-y", "-qq", "redis-tools"])

try:
    import redis
except ImportError:
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "redis"])
    import redis

from pair import cpu_seconds, servers

CHANNEL = "fanout"


class Subscriber:
    """A redis-cli subscribed to CHANNEL; counts the messages it prints."""

    def __init__(self, port):
        self.proc = subprocess.Popen(
            ["redis-cli", "-p", str(port), "subscribe", CHANNEL],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.received = 0
        self.thread = threading.Thread(target=self._count, daemon=True)
        self.thread.start()

    def _count(self):
        # redis-cli prints each message as three lines: "message", the
        # channel, the payload. Chunks may split a marker: carry a tail.
        marker, tail = b"message\n", b""
        while True:
            chunk = self.proc.stdout.read1(1 << 16)
            if not chunk:
                return
            data = tail + chunk
            self.received += data.count(marker)
            # Shorter than the marker: never counted twice.
            tail = data[-(len(marker) - 1):]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def one_round(port, pid, args):
    r = redis.Redis(port=port)
    subscribers = [Subscriber(port) for _ in range(args.subscribers)]
    deadline = time.time() + 30
    while r.pubsub_numsub(CHANNEL)[0][1] < args.subscribers:
        if time.time() > deadline:
            sys.exit("subscribers did not subscribe")
        time.sleep(0.05)
    cpu = cpu_seconds(pid)
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-c", "50", "-n", str(args.requests),
         "--csv", "PUBLISH", CHANNEL, "x" * args.size],
        check=True, capture_output=True, text=True).stdout
    cpu = cpu_seconds(pid) - cpu
    rps = float(out.strip().splitlines()[-1].split(",")[1].strip('"'))
    # Every subscriber should get every message; wait for the stragglers.
    deadline = time.time() + 60
    while any(s.received < args.requests for s in subscribers) and time.time() < deadline:
        time.sleep(0.1)
    delivered = min(s.received for s in subscribers)
    for s in subscribers:
        s.stop()
    return rps, cpu / args.requests * 1e6, delivered


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engram", default="target/release/engram")
    p.add_argument("--redis-server", default="redis-server")
    p.add_argument("--subscribers", type=int, default=50)
    p.add_argument("--requests", type=int, default=200_000)
    p.add_argument("--size", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--durability", default="process")
    args = p.parse_args()

    results = {"engram": [], "redis": []}
    with servers(args.engram, args.redis_server, args.durability, "pubsub-fanout-") as pair:
        for _ in range(args.rounds):
            for name in ("engram", "redis"):
                port, proc = pair[name]
                results[name].append(one_round(port, proc.pid, args))

    def median(name):
        return sorted(results[name], key=lambda r: r[0])[len(results[name]) // 2]

    print(f"PUBLISH of {args.size}-byte messages to {args.subscribers} subscribers, "
          f"50 publishing clients, {args.requests} calls per round, "
          f"median of {args.rounds} rounds")
    print(f"{'server':8} {'PUBLISH/s':>12} {'messages/s':>12} {'CPU µs/PUBLISH':>15} delivered")
    for name in ("engram", "redis"):
        rps, cpu_us, delivered = median(name)
        print(f"{name:8} {rps:12,.0f} {rps * args.subscribers:12,.0f} {cpu_us:15.1f} "
              f"{delivered}/{args.requests}")
        for round_ in results[name]:
            print(f"         round: {round_[0]:,.0f}/s, {round_[1]:.1f} µs, {round_[2]}")
    e, r = median("engram"), median("redis")
    print(f"ratio (Engram/Redis): PUBLISH/s {e[0] / r[0]:.2f}, "
          f"CPU per PUBLISH {e[1] / r[1]:.2f}")
    lost = [n for n in ("engram", "redis") for x in results[n] if x[2] < args.requests]
    if lost:
        print(f"NOTE: not every message reached every subscriber on: {sorted(set(lost))}")


if __name__ == "__main__":
    main()
