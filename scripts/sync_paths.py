#!/usr/bin/env python3
"""Which way of making a small append durable is cheaper on this disk:
stores to a shared mapping and `msync` of the touched range (Engram's
`always` path on emulated memory), or `write` + `fdatasync` of a journal
(Redis's `appendfsync always`)? Issue 25, item 2, asks to decide a separate
journal by measurement.

    scripts/sync_paths.py [--dir DIR] [--syncs 5000] [--bytes 4000] [--rounds 3]

Each round appends `--bytes` then makes it durable, `--syncs` times, in a
fresh file under DIR (default: a temporary directory beside the data, in
the current directory: the file system matters), by each of:

- mmap + msync: a file written with zeros a page at a time (as the
  engine's regions grow under `always`), mapped shared and faulted in
  for reading; each append stored to the mapping and the pages it
  touched `msync`ed (MS_SYNC);
- fallocate, mmap + msync: the same in a file made with `posix_fallocate`
  (as the engine's regions grew until the twenty-sixth session): its
  blocks are reserved but unwritten, and the first writeback of each
  page converts its extent, so a sync also writes file system metadata;
- append + fdatasync: `write` to an O_APPEND file (the file grows: each
  sync also commits its size), as Redis's AOF;
- pwrite + fdatasync: `pwrite` into a file written with zeros and synced
  first (no size or extent change per sync), the best case of a journal
  that is preallocated and reused.

Prints wall time and CPU time (user + system) per durable append: the
median of the rounds.
"""
import argparse
import mmap
import os
import statistics
import tempfile
import time


def timed(n, step):
    c0, t0 = os.times(), time.perf_counter()
    for i in range(n):
        step(i)
    c1, t1 = os.times(), time.perf_counter()
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    return (t1 - t0) / n * 1e6, cpu / n * 1e6


def appends_to_mapping(fd, size, n, chunk):
    """Times `n` stores of `chunk` bytes to the mapped file, each followed
    by an `msync` of the pages it touched; closes the file."""
    m = mmap.mmap(fd, size)
    for off in range(0, size, 4096):
        m[off]  # faulted in for reading, as the engine populates
    data = b"x" * chunk

    def step(i):
        off = i * chunk
        m[off:off + chunk] = data
        start = off & ~4095
        m.flush(start, off + chunk - start)

    result = timed(n, step)
    m.close()
    os.close(fd)
    return result


def mapped(path, n, chunk):
    size = n * chunk + (1 << 20)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    # A page at a time, as the engine's regions grow: larger writes make
    # large folios, and an msync then writes a whole folio back.
    page = b"\0" * 4096
    for off in range(0, size, len(page)):
        os.pwrite(fd, page, off)
    os.fsync(fd)
    return appends_to_mapping(fd, size, n, chunk)


def fallocated(path, n, chunk):
    size = n * chunk + (1 << 20)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    os.posix_fallocate(fd, 0, size)
    os.fsync(fd)
    return appends_to_mapping(fd, size, n, chunk)


def appended(path, n, chunk):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND)
    data = b"x" * chunk

    def step(_):
        os.write(fd, data)
        os.fdatasync(fd)

    result = timed(n, step)
    os.close(fd)
    return result


def rewritten(path, n, chunk):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    zeros = b"\0" * (1 << 20)
    for _ in range((n * chunk) // len(zeros) + 2):
        os.write(fd, zeros)
    os.fsync(fd)
    data = b"x" * chunk

    def step(i):
        os.pwrite(fd, data, i * chunk)
        os.fdatasync(fd)

    result = timed(n, step)
    os.close(fd)
    return result


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", default=None)
    p.add_argument("--syncs", type=int, default=5000)
    p.add_argument("--bytes", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    ways = [("mmap + msync", mapped), ("fallocate, mmap + msync", fallocated),
            ("append + fdatasync", appended),
            ("pwrite + fdatasync", rewritten)]
    results = {name: [] for name, _ in ways}
    with tempfile.TemporaryDirectory(dir=args.dir or ".") as d:
        for _ in range(args.rounds):
            for name, way in ways:
                path = os.path.join(d, "f")
                results[name].append(way(path, args.syncs, args.bytes))
                os.unlink(path)
    print(f"{args.syncs} durable appends of {args.bytes} bytes, median of {args.rounds} rounds")
    print("| way | wall µs per append | CPU µs per append |")
    print("|---|---:|---:|")
    for name, _ in ways:
        wall = statistics.median(r[0] for r in results[name])
        cpu = statistics.median(r[1] for r in results[name])
        print(f"| {name} | {wall:.0f} | {cpu:.0f} |")


if __name__ == "__main__":
    main()
