"""Engram and redis-server side by side, for the measurement scripts in
this directory: free loopback ports, both servers started at the same
durability (Redis configured as its documentation recommends for it: AOF
with the matching appendfsync, no RDB snapshots), readiness, the CPU time
a server process has used, and clean stops. Needs redis-py (installed
with pip by the importing script if missing).
"""

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time

import redis

# Engram's durability → Redis's appendfsync for the same promise.
APPENDFSYNC = {"process": "no", "everysec": "everysec", "always": "always"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port, proc):
    deadline = time.time() + 30
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server on port {port} exited with {proc.returncode}")
        try:
            if redis.Redis(port=port).ping():
                return
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    sys.exit(f"server on port {port} did not start")


def cpu_seconds(pid):
    """User + system CPU time the process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def servers(engram_bin, redis_bin, durability, prefix):
    """Yields {"engram": (port, proc), "redis": (port, proc)}."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        engram_port, redis_port = free_port(), free_port()
        engram = subprocess.Popen(
            [engram_bin, "serve", "--port", str(engram_port),
             "--dir", os.path.join(tmp, "engram"), "--durability", durability],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        redis_dir = os.path.join(tmp, "redis")
        os.mkdir(redis_dir)
        peer = subprocess.Popen(
            [redis_bin, "--port", str(redis_port), "--dir", redis_dir,
             "--save", "", "--appendonly", "yes",
             "--appendfsync", APPENDFSYNC[durability]],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(engram_port, engram)
            wait_ready(redis_port, peer)
            yield {"engram": (engram_port, engram), "redis": (redis_port, peer)}
        finally:
            for proc in (engram, peer):
                proc.terminate()
                proc.wait(timeout=30)
