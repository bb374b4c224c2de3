#!/usr/bin/env python3
"""Measures the small-value threshold of the cache (docs/cache.md): for each value size, the
median set and get latency through the key's agent and the record bytes stored per value byte,
once with every value coded (--replicate-below 0) and once with every value replicated on m+1
members. Starts and stops its own loopback clusters with `inec cache up/down`.

usage: scripts/cache-threshold.py [path/to/inec] [--ops N]
"""
import json, os, socket, statistics, subprocess, sys, tempfile, time

INEC = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "target/release/inec"
OPS = int(sys.argv[sys.argv.index("--ops") + 1]) if "--ops" in sys.argv else 300
SIZES = [16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]


def fnv1a(b):
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) % 2**64
    return h


class Conn:
    def __init__(self, addr):
        h, p = addr.split(":")
        self.s = socket.create_connection((h, int(p)))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.s.makefile("rb")

    def cmd(self, data, until):
        self.s.sendall(data)
        out = b""
        while not out.endswith(until):
            line = self.f.readline()
            if not line:
                raise RuntimeError("closed")
            out += line
            if line.startswith(b"SERVER_ERROR") or line.startswith(b"CLIENT_ERROR"):
                raise RuntimeError(line)
        return out

    def stats(self, group):
        out = self.cmd(b"stats %s\r\n" % group, b"END\r\n")
        return dict(l.split(b" ", 2)[1:] for l in out.split(b"\r\n") if l.startswith(b"STAT "))


def run(replicate_below):
    d = tempfile.mkdtemp()
    subprocess.run([INEC, "cache", "up", "--dir", d, "--replicate-below", str(replicate_below), "-m", "256"],
                   check=True, stdout=subprocess.DEVNULL)
    try:
        st = json.load(open(os.path.join(d, "cache.json")))
        addrs = [m["client"] for m in st["members"]]
        n = len(addrs)
        conns = [Conn(a) for a in addrs]
        rows = {}
        for size in SIZES:
            keys = [b"t%d:%d" % (size, i) for i in range(OPS)]
            value = os.urandom(size)
            set_us, get_us = [], []
            for k in keys:
                c = conns[fnv1a(k) % n]  # the key's agent
                t = time.perf_counter()
                c.cmd(b"set %s 0 0 %d\r\n%s\r\n" % (k, size, value), b"\r\n")
                set_us.append((time.perf_counter() - t) * 1e6)
            for k in keys:
                c = conns[fnv1a(k) % n]
                t = time.perf_counter()
                r = c.cmd(b"get %s\r\n" % k, b"END\r\n")
                get_us.append((time.perf_counter() - t) * 1e6)
                assert value in r
            fp = [0, 0, 0, 0]
            for c in conns:
                s = c.stats(b"inec")
                for i, name in enumerate([b"value_bytes_coded", b"value_bytes_replicated",
                                          b"record_bytes_coded", b"record_bytes_replicated"]):
                    fp[i] += int(s[name])
            for k in keys:
                conns[fnv1a(k) % n].cmd(b"delete %s\r\n" % k, b"\r\n")
            per = (fp[2] + fp[3]) / max(1, fp[0] + fp[1])
            rows[size] = (statistics.median(set_us), statistics.median(get_us), per)
        return rows
    finally:
        subprocess.run([INEC, "cache", "down", "--dir", d], stdout=subprocess.DEVNULL)


coded = run(0)
replicated = run(1 << 30)
print(f"{'value_bytes':>11} | {'coded set/get us (p50)':>24} {'B/B':>6} | {'replicated set/get us (p50)':>28} {'B/B':>6}")
for size in SIZES:
    c, r = coded[size], replicated[size]
    print(f"{size:>11} | {c[0]:>11.0f} {c[1]:>12.0f} {c[2]:>6.2f} | {r[0]:>13.0f} {r[1]:>14.0f} {r[2]:>6.2f}")
