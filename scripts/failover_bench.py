#!/usr/bin/env python3
"""Failover time of a three-node Engram group (issue 26's acceptance).

    scripts/failover_bench.py --engram target/release/engram [--kills 20]
        [--writers 4] [--extra "--raft-tick-ms 5"]

Three `engram serve --node-id N --peers ...` on loopback. Writer threads
SET keys as fast as the group acknowledges them, each trying the nodes in
turn until one accepts (a follower refuses at once with MOVED; a node that
is down refuses the connection), so finding the new leader costs the
client nothing measurable. Then, `--kills` times: SIGKILL the leader, note
the time, and wait for the first write acknowledged after it (the first
write the new leader committed); restart the killed node from its
directory and let it catch up before the next kill.

Prints the failover time (SIGKILL → first acknowledged write) of each
kill, then p50, p99 and the maximum, and the longest gap between two
acknowledged writes any one writer saw (what a client lives through).
"""
import argparse
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import_error = None
try:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry
except ImportError as e:  # pragma: no cover
    import_error = e


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def role(port):
    try:
        r = redis.Redis(port=port, socket_timeout=0.2, socket_connect_timeout=0.2)
        return r.execute_command("ROLE")[0]
    except Exception:
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--engram", required=True)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--extra", default="", help="more engram serve flags")
    parser.add_argument("--keep", action="store_true",
                        help="keep the nodes' directories and logs (printed at the end)")
    args = parser.parse_args()
    if import_error:
        sys.exit(f"needs redis-py: python3 -m pip install redis ({import_error})")

    tmp = tempfile.mkdtemp(prefix="failover-bench-")
    ports = [free_port() for _ in range(3)]
    bus = [free_port() for _ in range(3)]
    peers = ",".join(f"{i + 1}@127.0.0.1:{bus[i]}" for i in range(3))
    procs = [None, None, None]

    def launch(i):
        procs[i] = subprocess.Popen(
            [args.engram, "serve", "--port", str(ports[i]),
             "--dir", os.path.join(tmp, f"n{i}"), "--node-id", str(i + 1),
             "--peers", peers, *shlex.split(args.extra)],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, f"n{i}.log"), "a"))

    def leader():
        for i in range(3):
            if procs[i] is not None and role(ports[i]) == b"master":
                return i
        return None

    for i in range(3):
        launch(i)
    deadline = time.time() + 30
    while leader() is None:
        if time.time() > deadline:
            sys.exit("no leader")
        time.sleep(0.05)

    acks = []  # (time, writer)
    lock = threading.Lock()
    stop = threading.Event()
    # The kill's time, and the first acknowledgement after it: set by the
    # writers, so the main thread never scans `acks` while they run.
    kill_at = [None]
    first_after = [None]
    # The killed node's port: a reply it sent just before dying does not
    # count.
    victim_port = [None]

    def writer(w):
        conns = {}
        n = 0
        turn = w
        while not stop.is_set():
            port = ports[turn % 3]
            try:
                c = conns.get(port)
                if c is None:
                    # No retries: redis-py's default retries a lost
                    # connection with backoff (seconds), which would be
                    # measured here as failover time.
                    c = redis.Redis(port=port, socket_timeout=0.5,
                                    socket_connect_timeout=0.1,
                                    retry=Retry(NoBackoff(), 0))
                    conns[port] = c
                c.set(f"w{w}:{n}", "x")
                now = time.monotonic()
                with lock:
                    acks.append((now, w))
                    if (kill_at[0] is not None and now > kill_at[0]
                            and port != victim_port[0] and first_after[0] is None):
                        first_after[0] = now
                n += 1
            except Exception:
                conns.pop(port, None)
                turn += 1
                time.sleep(0.0005)

    threads = [threading.Thread(target=writer, args=(w,), daemon=True)
               for w in range(args.writers)]
    for t in threads:
        t.start()
    times = []
    gaps = []
    try:
        for k in range(args.kills):
            time.sleep(1.0)
            with lock:
                # Only the last second before the kill matters for gaps.
                del acks[:]
            victim = leader()
            while victim is None:
                time.sleep(0.01)
                victim = leader()
            with lock:
                first_after[0] = None
                victim_port[0] = ports[victim]
                procs[victim].kill()
                killed = time.monotonic()
                kill_at[0] = killed
            procs[victim].wait()
            procs[victim] = None
            deadline = killed + 10
            while first_after[0] is None and time.monotonic() < deadline:
                time.sleep(0.001)
            first = first_after[0]
            if first is None:
                sys.exit(f"kill {k + 1}: no write acknowledged within 10 s")
            # The longest stretch without an acknowledgement, per writer,
            # around the kill.
            time.sleep(0.2)
            with lock:
                window = [(t, w) for t, w in acks if killed - 1 < t < killed + 2]
            for w in range(args.writers):
                ts = sorted(t for t, ww in window if ww == w)
                if len(ts) > 1:
                    gaps.append(max(b - a for a, b in zip(ts, ts[1:])))
            times.append((first - killed) * 1000)
            print(f"kill {k + 1}: first write acknowledged {times[-1]:.1f} ms after SIGKILL",
                  flush=True)
            launch(victim)
            time.sleep(0.5)
    finally:
        stop.set()
        for p in procs:
            if p is not None:
                p.kill()
                p.wait()
        if args.keep:
            print(f"nodes' directories and logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    times.sort()
    p99 = times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))]
    print()
    print(f"failover over {len(times)} kills: p50 {statistics.median(times):.1f} ms, "
          f"p99 {p99:.1f} ms, max {times[-1]:.1f} ms; longest gap a writer saw: "
          f"{max(gaps, default=0) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
