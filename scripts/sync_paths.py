#!/usr/bin/env python3
"""Which way of making a small append durable is cheaper on this disk:
stores to a shared mapping and `msync` of the touched range (Engram's
`always` path on emulated memory), or `write` + `fdatasync` of a journal
(Redis's `appendfsync always`)? Issue 25, item 2, asks to decide a separate
journal by measurement.

    scripts/sync_paths.py [--dir DIR] [--syncs 5000] [--bytes 4000] [--rounds 3]
        [--busy]

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
  that is preallocated and reused;
- private mmap, pwrite + fdatasync: the zeroed file mapped private (stores
  go to the process's own copy of each page, not to the page cache), each
  append stored there, then the touched range `pwrite`n from the mapping
  to the file and `fdatasync`ed: no page of the file is mapped writable,
  so its writeback has no page-table entry to clean.

`--busy` keeps a second thread of the process running meanwhile (a C
`memset` loop, outside Python's lock), as the server's other network loop
and background threads run beside its sync: writing back a page mapped
writable write-protects its entry, and with another thread of the
process on another core each such entry costs an inter-processor TLB
flush (the thirty-second session's profile of MSET -P 16 at `always`).
Large `--bytes` (many pages a sync) show it; one page a sync does not.

Prints wall time and CPU time per durable append: the syncing thread's
(user + system; under `--busy` the other thread's is not counted, though
the flushes interrupt it too), the median of the rounds.
"""
import argparse
import ctypes
import ctypes.util
import mmap
import os
import statistics
import tempfile
import threading
import time


def timed(n, step):
    c0, t0 = time.thread_time(), time.perf_counter()
    for i in range(n):
        step(i)
    c1, t1 = time.thread_time(), time.perf_counter()
    return (t1 - t0) / n * 1e6, (c1 - c0) / n * 1e6


class Busy:
    """A thread of this process kept running on another core: `memset` of
    a 16 MiB buffer over and over, in C, so it holds Python's lock only
    between calls."""

    def __init__(self):
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"))
        self.buffer = ctypes.create_string_buffer(16 << 20)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.spin, daemon=True)

    def spin(self):
        while not self.stop.is_set():
            self.libc.memset(self.buffer, 1, len(self.buffer))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.thread.join()


def appends_to_mapping(fd, size, n, chunk, private=False):
    """Times `n` stores of `chunk` bytes to the mapped file, each made
    durable: with a shared mapping by an `msync` of the pages it touched,
    with a private one by a `pwrite` of them from the mapping and an
    `fdatasync`. Closes the file."""
    if private:
        m = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    else:
        m = mmap.mmap(fd, size)
    for off in range(0, size, 4096):
        m[off]  # faulted in for reading, as the engine populates
    data = b"x" * chunk

    def step(i):
        off = i * chunk
        m[off:off + chunk] = data
        start = off & ~4095
        if private:
            end = min(size, (off + chunk + 4095) & ~4095)
            os.pwrite(fd, m[start:end], start)
            os.fdatasync(fd)
        else:
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


def zeroed(path, n, chunk):
    """A file of zeros, written and synced, large enough for `n` appends."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    zeros = b"\0" * (1 << 20)
    for _ in range((n * chunk) // len(zeros) + 2):
        os.write(fd, zeros)
    os.fsync(fd)
    return fd


def privately_mapped(path, n, chunk):
    fd = zeroed(path, n, chunk)
    return appends_to_mapping(fd, os.fstat(fd).st_size, n, chunk, private=True)


def rewritten(path, n, chunk):
    fd = zeroed(path, n, chunk)
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
    p.add_argument("--busy", action="store_true",
                   help="keep a second thread of the process running meanwhile")
    args = p.parse_args()
    ways = [("mmap + msync", mapped), ("fallocate, mmap + msync", fallocated),
            ("append + fdatasync", appended),
            ("pwrite + fdatasync", rewritten),
            ("private mmap, pwrite + fdatasync", privately_mapped)]
    results = {name: [] for name, _ in ways}
    with tempfile.TemporaryDirectory(dir=args.dir or ".") as d:
        for _ in range(args.rounds):
            for name, way in ways:
                path = os.path.join(d, "f")
                if args.busy:
                    with Busy():
                        results[name].append(way(path, args.syncs, args.bytes))
                else:
                    results[name].append(way(path, args.syncs, args.bytes))
                os.unlink(path)
    busy = ", a second thread busy" if args.busy else ""
    print(f"{args.syncs} durable appends of {args.bytes} bytes{busy}, median of {args.rounds} rounds")
    print("| way | wall µs per append | syncing thread's CPU µs per append |")
    print("|---|---:|---:|")
    for name, _ in ways:
        wall = statistics.median(r[0] for r in results[name])
        cpu = statistics.median(r[1] for r in results[name])
        print(f"| {name} | {wall:.0f} | {cpu:.0f} |")


if __name__ == "__main__":
    main()
