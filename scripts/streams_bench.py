#!/usr/bin/env python3
"""Streams beside Redis, in one run: DRAM per entry and throughput.

    scripts/streams_bench.py --engram target/release/engram [--entries 1000000]
        [--clients 50] [--requests 200000] [--rounds 3]
        [--durability process|everysec|always] [--engram-bench PATH]

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
   new entry and adds it to the PEL); then, on a second group, pairs of
   XREADGROUP COUNT 1 and XACK of the ID it returned, 50 consumers, run by
   `engram-bench stream-pairs` (redis-benchmark cannot name the ID a read
   returned). Beside each figure, the server's CPU per operation
   (utime+stime from /proc, children it reaped included).
3. Rounds (`--rounds`): fresh servers each round, each test run against
   both back to back, the order reversed every other round; the median
   round per cell is reported.

Redis runs with appendonly at the matching appendfsync (process: `no`).
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
        # The matching durability, as `engram-bench server` pairs them:
        # `process` is Redis's AOF written at once, fsynced by the kernel.
        aof = {"process": ["--appendonly", "yes", "--appendfsync", "no"],
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


def cpu_seconds(pid):
    """utime + stime of the server and of the children it reaped (Redis's
    AOF rewrite forks), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3): utime..cstime are fields 14..17.
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def timed(proc, requests, run):
    """Runs `run()` (which returns ops/s) and the server's CPU µs per op."""
    before = cpu_seconds(proc.pid)
    rate = run()
    return rate, (cpu_seconds(proc.pid) - before) / requests * 1e6


def bench(port, clients, requests, *command):
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-c", str(clients),
                          "-n", str(requests), "--csv", *command],
                         capture_output=True, text=True).stdout
    last = [l for l in out.splitlines() if l.startswith('"')][-1]
    return float(last.split(",")[1].strip('"'))


def pairs(engram_bench, port, clients, requests, group):
    out = subprocess.run([engram_bench, "stream-pairs", "--port", str(port),
                          "--clients", str(clients), "--pairs", str(requests),
                          "--stream", "bench", "--group", group],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"stream-pairs against {port} failed: {out.stderr.strip()}")
    return float(out.stdout.strip().split(",")[1].strip('"'))


COLUMNS = ["DRAM B/entry", "after 5 s", "MEMORY USAGE", "XADD/s", "XADD CPU us",
           "XREADGROUP/s", "XRG CPU us", "pairs/s", "pairs CPU us"]
# Columns where Engram is better when its figure is higher (ops/s); for
# the others (bytes, CPU) lower is better. The ratio is Engram / Redis.


def median(values):
    values = sorted(values)
    return values[len(values) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engram", required=True)
    ap.add_argument("--engram-bench", default=None,
                    help="engram-bench for the XREADGROUP+XACK pairs "
                         "(default: the one beside --engram)")
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--requests", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=1,
                    help="fresh servers each round, the order reversed every other "
                         "round; the median round per cell is reported")
    ap.add_argument("--durability", default="process",
                    choices=["process", "everysec", "always"])
    args = ap.parse_args()
    engram_bench = args.engram_bench or os.path.join(
        os.path.dirname(os.path.abspath(args.engram)), "engram-bench")
    if not os.access(engram_bench, os.X_OK):
        sys.exit(f"{engram_bench} is not there: build it (cargo build --release -p engram-bench) "
                 "or name it with --engram-bench")
    work = tempfile.mkdtemp(prefix="streams-bench-")
    procs = []
    try:
        samples = {"redis": [], "engram": []}
        for round_ in range(1, args.rounds + 1):
            order = ["engram", "redis"] if round_ % 2 else ["redis", "engram"]
            servers = {}
            for kind in order:
                proc, port = start(kind, args.engram, args.durability,
                                   os.path.join(work, f"r{round_}"))
                procs.append(proc)
                servers[kind] = (proc, port)
            rows = {kind: {} for kind in order}
            for kind in order:
                proc, port = servers[kind]
                field = "used_memory" if kind == "redis" else "used_memory_dram"
                before = info(port, field)
                fill(port, args.entries)
                assert int(cli(port, "XLEN", "s")) == args.entries
                rows[kind]["DRAM B/entry"] = (info(port, field) - before) / args.entries
                rows[kind]["before"] = before
            # Engram's checkpointer folds the log into an image in the
            # background; what it keeps after is counted too.
            time.sleep(5)
            for kind in order:
                proc, port = servers[kind]
                field = "used_memory" if kind == "redis" else "used_memory_dram"
                rows[kind]["after 5 s"] = (info(port, field) - rows[kind].pop("before")) / args.entries
                rows[kind]["MEMORY USAGE"] = int(
                    cli(port, "MEMORY", "USAGE", "s", "SAMPLES", "0")) / args.entries
            for kind in order:
                proc, port = servers[kind]
                rows[kind]["XADD/s"], rows[kind]["XADD CPU us"] = timed(
                    proc, args.requests,
                    lambda: bench(port, args.clients, args.requests, "XADD", "bench", "*", "f", "v"))
            for kind in order:
                proc, port = servers[kind]
                cli(port, "XGROUP", "CREATE", "bench", "g", "0")
                rows[kind]["XREADGROUP/s"], rows[kind]["XRG CPU us"] = timed(
                    proc, args.requests,
                    lambda: bench(port, args.clients, args.requests, "XREADGROUP", "GROUP", "g",
                                  "c", "COUNT", "1", "STREAMS", "bench", ">"))
                pending = int(cli(port, "XPENDING", "bench", "g").split()[0])
                assert pending == args.requests, f"{kind}: {pending} pending after the reads"
            for kind in order:
                proc, port = servers[kind]
                cli(port, "XGROUP", "CREATE", "bench", "p", "0")
                rows[kind]["pairs/s"], rows[kind]["pairs CPU us"] = timed(
                    proc, args.requests,
                    lambda: pairs(engram_bench, port, args.clients, args.requests, "p"))
                pending = int(cli(port, "XPENDING", "bench", "p").split()[0])
                assert pending == 0, f"{kind}: {pending} still pending after the pairs"
            for kind in order:
                proc, _ = servers[kind]
                proc.kill()
                proc.wait()
                samples[kind].append(rows[kind])
            print(f"round {round_}: " + "; ".join(
                f"{kind} XADD {rows[kind]['XADD/s']:.0f}/s XREADGROUP "
                f"{rows[kind]['XREADGROUP/s']:.0f}/s pairs {rows[kind]['pairs/s']:.0f}/s"
                for kind in order), file=sys.stderr)
        print(f"durability {args.durability}, {args.entries} entries, {args.clients} clients, "
              f"{args.requests} requests, median of {args.rounds} round(s); "
              "CPU us: server CPU (user+system, reaped children included) per operation "
              "(per pair for pairs)")
        print(f"{'':8} " + " ".join(f"{c:>13}" for c in COLUMNS))
        medians = {kind: {c: median([r[c] for r in rows]) for c in COLUMNS}
                   for kind, rows in samples.items()}
        for kind in ("redis", "engram"):
            print(f"{kind:8} " + " ".join(
                f"{medians[kind][c]:13.0f}" if c.endswith("/s") else f"{medians[kind][c]:13.2f}"
                for c in COLUMNS))
        print(f"{'ratio':8} " + " ".join(
            f"{medians['engram'][c] / medians['redis'][c]:13.2f}" for c in COLUMNS))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
