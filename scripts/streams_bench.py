#!/usr/bin/env python3
"""Streams beside Redis, in one run: DRAM per entry and throughput.

    scripts/streams_bench.py --engram target/release/engram [--entries 1000000]
        [--clients 50] [--requests 200000] [--durability process|everysec|always]

1. Memory: one stream of N entries of three small fields (`XADD s * a <i>
   b x c y`, pipelined through redis-cli --pipe) in a fresh redis-server
   and a fresh `engram serve`; each side's growth of INFO memory's DRAM
   figure (Redis: `used_memory`; Engram: `used_memory_dram`, what its
   allocator holds: the stream lives in DRAM, its persistent copy is the
   operation log and checkpoint images) divided by N, right after the
   fill and 5 s later (Engram's checkpointer has folded the log by then,
   and keeps its buffers); and MEMORY USAGE of the stream / N.
2. Throughput: redis-benchmark, the same command lines against both, 50
   clients: `XADD bench * f v`, then on that stream with a group
   `XREADGROUP GROUP g c COUNT 1 STREAMS bench >` (each read delivers one
   new entry and adds it to the PEL). XACK is not measured this way:
   redis-benchmark cannot name the IDs a read returned.

Redis runs with appendonly at the matching appendfsync (process: no AOF).
Both servers are killed at the end.
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port):
    for _ in range(300):
        try:
            out = subprocess.run(["redis-cli", "-p", str(port), "PING"],
                                 capture_output=True, text=True, timeout=5)
            if out.stdout.strip() == "PONG":
                return
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.1)
    sys.exit(f"server on {port} never answered")


def info(port, field):
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "memory"],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith(field + ":"):
            return int(line.split(":")[1])
    sys.exit(f"no {field} in INFO memory on {port}")


def cli(port, *args):
    return subprocess.run(["redis-cli", "-p", str(port), *args],
                          capture_output=True, text=True).stdout.strip()


def start(kind, engram, durability, work):
    port = free_port()
    d = os.path.join(work, kind)
    os.makedirs(d)
    if kind == "redis":
        aof = {"process": ["--appendonly", "no"],
               "everysec": ["--appendonly", "yes", "--appendfsync", "everysec"],
               "always": ["--appendonly", "yes", "--appendfsync", "always"]}[durability]
        cmd = ["redis-server", "--port", str(port), "--dir", d, "--save", ""] + aof
    else:
        cmd = [engram, "serve", "--port", str(port), "--dir", d,
               "--durability", durability]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_ready(port)
    return proc, port


def fill(port, entries):
    lines = "".join(
        f"*9\r\n$4\r\nXADD\r\n$1\r\ns\r\n$1\r\n*\r\n$1\r\na\r\n${len(str(i))}\r\n{i}\r\n"
        "$1\r\nb\r\n$1\r\nx\r\n$1\r\nc\r\n$1\r\ny\r\n" for i in range(entries))
    subprocess.run(["redis-cli", "-p", str(port), "--pipe"], input=lines.encode(),
                   capture_output=True, check=True)


def bench(port, clients, requests, *command):
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-c", str(clients),
                          "-n", str(requests), "--csv", *command],
                         capture_output=True, text=True).stdout
    last = [l for l in out.splitlines() if l.startswith('"')][-1]
    return float(last.split(",")[1].strip('"'))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engram", required=True)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--durability", default="process",
                    choices=["process", "everysec", "always"])
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="streams-bench-")
    procs = []
    try:
        rows = {}
        for kind in ("redis", "engram"):
            proc, port = start(kind, args.engram, args.durability, work)
            procs.append(proc)
            field = "used_memory" if kind == "redis" else "used_memory_dram"
            before = info(port, field)
            fill(port, args.entries)
            assert int(cli(port, "XLEN", "s")) == args.entries
            after = info(port, field)
            per_entry = (after - before) / args.entries
            # Engram's checkpointer folds the log into an image in the
            # background; what it keeps after is counted too.
            time.sleep(5)
            settled = (info(port, field) - before) / args.entries
            usage = int(cli(port, "MEMORY", "USAGE", "s", "SAMPLES", "0")) / args.entries
            xadd = bench(port, args.clients, args.requests, "XADD", "bench", "*", "f", "v")
            cli(port, "XGROUP", "CREATE", "bench", "g", "0")
            read = bench(port, args.clients, args.requests,
                         "XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "bench", ">")
            pending = int(cli(port, "XPENDING", "bench", "g").split()[0])
            rows[kind] = (per_entry, settled, usage, xadd, read, pending)
            proc.kill()
            proc.wait()
        print(f"durability {args.durability}, {args.entries} entries, "
              f"{args.clients} clients, {args.requests} requests")
        print(f"{'':8} {'DRAM B/entry':>13} {'after 5 s':>10} {'MEMORY USAGE':>13} "
              f"{'XADD/s':>10} {'XREADGROUP/s':>13} {'pending':>8}")
        for kind, (per_entry, settled, usage, xadd, read, pending) in rows.items():
            print(f"{kind:8} {per_entry:13.1f} {settled:10.1f} {usage:13.1f} "
                  f"{xadd:10.0f} {read:13.0f} {pending:8}")
        r, e = rows["redis"], rows["engram"]
        print(f"{'ratio':8} {e[0] / r[0]:13.2f} {e[1] / r[1]:10.2f} {e[2] / r[2]:13.2f} "
              f"{e[3] / r[3]:10.2f} {e[4] / r[4]:13.2f}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
