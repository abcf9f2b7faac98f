#!/usr/bin/env python3
"""A three-node Engram group beside Redis with two replicas, in one run
(issue 26's throughput acceptance).

    scripts/replication_bench.py --engram target/release/engram
        [--requests 200000] [--rounds 3] [--clients 50] [--pipeline 16]
        [--tests set,incr,hset] [--durability everysec] [--threads]

Peers, all on this machine's loopback:
- Redis 7.0: a primary and two replicas (`--replicaof`), asynchronous
  replication as Redis is usually deployed, AOF with the `appendfsync`
  matching `--durability` on each (`everysec` by default, Redis's
  recommended AOF setting; `process` is `no`), no RDB snapshots. A write
  is acknowledged once the primary applied it.
- An Engram group: three `engram serve --node-id N --peers ...` at
  `--durability`; a write is acknowledged once a majority holds its Raft
  entry as durably as that promises (at `always` synced before the
  acknowledgement, at `everysec` within a second, at `process` in the
  mapped file, which survives a crash of the process) and the leader
  applied it.
- A single Engram node at the same durability.

For each round and test, redis-benchmark (the same command line, 100,000
random keys so most writes overwrite) runs against Redis's primary, the
Engram leader and the single node, in that order; the table gives the
median ops/s of the rounds, the ratios, and server CPU (user + system,
summed over every process of the deployment) per operation.

The second table says what a group ÷ single of 0.5 asks of the group on
a machine whose cores the client shares. redis-benchmark's own CPU per
request (`client`) is measured in the same rounds. When the single node
keeps every core busy, its throughput is about cores ÷ (single + client),
so a group at half of it may spend at most 2 × (single + client) −
client µs of CPU per write over its three members (`budget`). `cores
busy` (ops/s × (server + client CPU per operation)) says how far each
run kept the machine's cores busy: the budget holds where both are
near the core count.

`--threads` prints, after each Engram run, every process's CPU per
operation by thread name (the apply, the network loops, the Raft loop,
the bus, the engine's background threads): where a write's cost goes.
"""
import argparse
import collections
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(port, *args):
    out = subprocess.run(["redis-cli", "-p", str(port), *args],
                         capture_output=True, text=True, timeout=10)
    return out.stdout.strip()


def wait_until(what, test, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if test():
                return
        except subprocess.TimeoutExpired:
            pass
        time.sleep(0.1)
    sys.exit(f"timed out waiting for {what}")


def stat_seconds(text):
    """User + system CPU seconds of a /proc stat line."""
    fields = text.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        return stat_seconds(f.read())


def thread_seconds(pid):
    """CPU seconds of each thread of `pid`, summed by thread name."""
    by_name = collections.Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                text = f.read()
        except OSError:
            continue  # the thread ended
        by_name[text[text.index("(") + 1:text.rindex(")")]] += stat_seconds(text)
    return by_name


def client_seconds():
    """CPU seconds of this script's reaped children (redis-benchmark)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


TESTS = {
    "set": ["SET", "key:__rand_int__", "xxx"],
    "incr": ["INCR", "counter:__rand_int__"],
    "hset": ["HSET", "myhash", "element:__rand_int__", "xxx"],
}


def bench(port, test, args):
    command = [
        "redis-benchmark", "-p", str(port), "-c", str(args.clients),
        "-n", str(args.requests), "-P", str(args.pipeline), "-r", "100000",
        "-d", "200", "--csv", "-q", *TESTS[test],
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=600)
    for line in out.stdout.splitlines():
        fields = [f.strip('"') for f in line.split('","')]
        if len(fields) >= 2 and re.match(r"^[0-9.]+$", fields[1]):
            return float(fields[1])
    sys.exit(f"redis-benchmark printed no result:\n{out.stdout}\n{out.stderr}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--engram", required=True)
    parser.add_argument("--redis-server", default="redis-server")
    parser.add_argument("--requests", type=int, default=200000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--pipeline", type=int, default=16)
    parser.add_argument("--tests", default="set,incr,hset")
    parser.add_argument("--durability", default="everysec",
                        choices=["process", "everysec", "always"])
    parser.add_argument("--threads", action="store_true",
                        help="print each Engram process's CPU per operation by thread")
    args = parser.parse_args()
    appendfsync = {"process": "no", "everysec": "everysec", "always": "always"}[args.durability]
    for tool in ("redis-benchmark", "redis-cli", args.redis_server):
        if shutil.which(tool) is None:
            sys.exit(f"{tool} is not installed (apt-get install redis-server)")
    tests = args.tests.split(",")
    procs = []
    tmp = tempfile.mkdtemp(prefix="replication-bench-")
    try:
        def start(command, log):
            proc = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                    stderr=open(os.path.join(tmp, log), "w"))
            procs.append(proc)
            return proc

        # Redis: a primary and two replicas.
        redis_ports = [free_port() for _ in range(3)]
        redis_procs = []
        for i, port in enumerate(redis_ports):
            d = os.path.join(tmp, f"redis{i}")
            os.mkdir(d)
            command = [args.redis_server, "--port", str(port), "--dir", d,
                       "--save", "", "--appendonly", "yes",
                       "--appendfsync", appendfsync]
            if i > 0:
                command += ["--replicaof", "127.0.0.1", str(redis_ports[0])]
            redis_procs.append(start(command, f"redis{i}.log"))
        # Connected is not enough: a replica counts as connected while its
        # first sync is still under way. Measure once both stream commands.
        wait_until("Redis's replicas",
                   lambda: cli(redis_ports[0], "INFO", "replication").count("state=online") == 2
                   and all("master_link_status:up" in cli(p, "INFO", "replication")
                           for p in redis_ports[1:]))

        # Engram: three nodes of a group, and a single node.
        ports = [free_port() for _ in range(3)]
        bus = [free_port() for _ in range(3)]
        peers = ",".join(f"{i + 1}@127.0.0.1:{bus[i]}" for i in range(3))
        group_procs = [
            start([args.engram, "serve", "--port", str(ports[i]),
                   "--dir", os.path.join(tmp, f"engram{i}"),
                   "--node-id", str(i + 1), "--peers", peers,
                   "--durability", args.durability], f"engram{i}.log")
            for i in range(3)
        ]
        single_port = free_port()
        single = start([args.engram, "serve", "--port", str(single_port),
                        "--dir", os.path.join(tmp, "single"),
                        "--durability", args.durability], "single.log")
        wait_until("a leader", lambda: sum(
            cli(p, "ROLE").startswith("master") for p in ports) == 1)
        leader = next(p for p in ports if cli(p, "ROLE").startswith("master"))
        wait_until("the single node", lambda: cli(single_port, "PING") == "PONG")

        deployments = [
            ("redis", redis_ports[0], redis_procs),
            ("group", leader, group_procs),
            ("single", single_port, [single]),
        ]
        results = {(d, t): [] for d, _, _ in deployments for t in tests}
        cpu = {(d, t): [] for d, _, _ in deployments for t in tests}
        client = {(d, t): [] for d, _, _ in deployments for t in tests}
        per_op = 1e6 / args.requests
        for round_ in range(args.rounds):
            for test in tests:
                for name, port, ps in deployments:
                    before = sum(cpu_seconds(p.pid) for p in ps)
                    threads_before = [thread_seconds(p.pid) for p in ps]
                    client_before = client_seconds()
                    ops = bench(port, test, args)
                    used = sum(cpu_seconds(p.pid) for p in ps) - before
                    client[(name, test)].append((client_seconds() - client_before) * per_op)
                    results[(name, test)].append(ops)
                    cpu[(name, test)].append(used * per_op)
                    print(f"round {round_ + 1} {test:5} {name:6} {ops:>10.0f} ops/s "
                          f"{used * per_op:6.1f} µs CPU/op", flush=True)
                    if args.threads and name != "redis":
                        roles = ["single"] if name == "single" else [
                            "leader" if p == leader else "member" for p in ports]
                        for p, was, role in zip(ps, threads_before, roles):
                            spent = thread_seconds(p.pid)
                            spent.subtract(was)
                            print(f"    {role:6} " + " ".join(
                                f"{thread}={seconds * per_op:.2f}"
                                for thread, seconds in spent.most_common() if seconds > 0))
        print()
        print(f"durability {args.durability}, -P {args.pipeline}, {args.clients} clients, "
              f"{args.requests} requests, "
              f"median of {args.rounds} rounds; CPU: all processes of the deployment")
        print("| test | Redis + 2 replicas | Engram group | ratio | Engram single | "
              "group ÷ single | CPU µs/op Redis / group / single |")
        print("|---|---|---|---|---|---|---|")
        for test in tests:
            med = {d: statistics.median(results[(d, test)]) for d, _, _ in deployments}
            c = {d: statistics.median(cpu[(d, test)]) for d, _, _ in deployments}
            print(f"| {test.upper()} | {med['redis']:.0f} | {med['group']:.0f} | "
                  f"{med['group'] / med['redis']:.2f} | {med['single']:.0f} | "
                  f"{med['group'] / med['single']:.2f} | "
                  f"{c['redis']:.1f} / {c['group']:.1f} / {c['single']:.1f} |")
        print()
        print("| test | client CPU µs/request | single + client | group CPU µs/op | "
              "budget for group ÷ single = 0.5 | cores busy, single / group |")
        print("|---|---|---|---|---|---|")
        for test in tests:
            own = statistics.median(client[("single", test)])
            single_cpu = statistics.median(cpu[("single", test)])
            group_cpu = statistics.median(cpu[("group", test)])
            busy = {d: statistics.median(results[(d, test)])
                    * (statistics.median(cpu[(d, test)]) + statistics.median(client[(d, test)]))
                    / 1e6 for d in ("single", "group")}
            print(f"| {test.upper()} | {own:.1f} | {single_cpu + own:.1f} | {group_cpu:.1f} | "
                  f"{2 * (single_cpu + own) - own:.1f} | "
                  f"{busy['single']:.2f} / {busy['group']:.2f} |")
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
