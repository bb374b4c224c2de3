"""Stock-client checks of a memcached-protocol service with pymemcache.

Usage: python3 pymemcache_check.py HOST:PORT [HOST:PORT ...]

With several addresses they must serve one key space (inec: any node accepts any key): each
check writes through one address and reads back through the next, so values cross nodes.
Prints `ok NAME` or `FAIL NAME: reason` per check, then `N passed, M failed`; exits 1 on any
failure. Flushes the service.
"""

import sys
import time
import traceback

from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError, MemcacheServerError


def parse(addr):
    host, port = addr.rsplit(":", 1)
    return (host, int(port))


ADDRS = [parse(a) for a in sys.argv[1:]]
if not ADDRS:
    sys.exit("usage: pymemcache_check.py HOST:PORT [HOST:PORT ...]")
CLIENTS = [
    Client(a, default_noreply=False, connect_timeout=5, timeout=10) for a in ADDRS
]
PASSED = []
FAILED = []


def c(i):
    """The client of address i (modulo the number of addresses)."""
    return CLIENTS[i % len(CLIENTS)]


def check(name):
    def wrap(f):
        try:
            f()
            PASSED.append(name)
            print("ok", name, flush=True)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            FAILED.append(name)
            detail = "".join(traceback.format_exception_only(type(e), e)).strip()
            print(f"FAIL {name}: {detail}", flush=True)
        return f

    return wrap


def eq(got, want, what=""):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


@check("flush_all")
def _():
    c(0).set(b"f1", b"x")
    eq(c(0).flush_all(), True, "flush_all")
    for i in range(len(CLIENTS)):
        eq(c(i).get(b"f1"), None, f"get after flush via {i}")


@check("set/get")
def _():
    eq(c(0).set(b"k1", b"hello"), True, "set")
    eq(c(1).get(b"k1"), b"hello", "get")
    eq(c(1).get(b"missing-key"), None, "miss")
    eq(c(0).set(b"k1", b"bye", noreply=True), True, "set noreply")
    # Without a reply, only the same connection's next request is ordered after the set.
    eq(c(0).get(b"k1"), b"bye", "get after noreply set, same connection")
    eq(c(1).get(b"k1"), b"bye", "get after noreply set")


@check("flags")
def _():
    c(0).set(b"fl", b"v", flags=12345)
    # raw_command returns the reply up to (without) its terminator END.
    eq(c(1).raw_command(b"get fl", b"END"), b"VALUE fl 12345 1\r\nv\r\n", "raw get")


@check("empty and binary values")
def _():
    eq(c(0).set(b"empty", b""), True, "set empty")
    eq(c(1).get(b"empty"), b"", "get empty")
    blob = bytes(range(256)) * 4 + b"\r\nEND\r\n"
    eq(c(0).set(b"bin", blob), True, "set binary")
    eq(c(1).get(b"bin"), blob, "get binary")


@check("large values")
def _():
    for n in (1, 4095, 4096, 8193, 65537, 500_000, 1_000_000):
        v = bytes((i * 7 + n) & 0xFF for i in range(n))
        eq(c(n).set(b"big%d" % n, v), True, f"set {n}")
        eq(c(n + 1).get(b"big%d" % n), v, f"get {n}")


@check("too large is refused")
def _():
    try:
        ok = c(0).set(b"huge", b"x" * (2 << 20))
    except MemcacheServerError:
        ok = False
    eq(ok, False, "set of 2 MiB")
    eq(c(1).get(b"huge"), None, "get of refused value")
    # The connection still works.
    eq(c(0).set(b"after-huge", b"1"), True, "set after refusal")


@check("get_many")
def _():
    vals = {b"m%d" % i: b"v%d" % i for i in range(20)}
    eq(c(0).set_many(vals), [], "set_many failures")
    got = c(1).get_many(list(vals) + [b"absent1", b"absent2"])
    eq(got, vals, "get_many")


@check("gets/cas")
def _():
    c(0).set(b"ck", b"one")
    v, token = c(1).gets(b"ck")
    eq(v, b"one", "gets value")
    if not token:
        raise AssertionError(f"gets gave no cas token: {token!r}")
    eq(c(0).cas(b"ck", b"two", token), True, "cas with the right token")
    eq(c(1).get(b"ck"), b"two", "value after cas")
    eq(c(1).cas(b"ck", b"three", token), False, "cas with a stale token")
    eq(c(0).get(b"ck"), b"two", "value after failed cas")
    eq(c(0).cas(b"ck-missing", b"x", b"1"), None, "cas of a missing key")
    v2, token2 = c(0).gets(b"ck")
    if token2 == token:
        raise AssertionError("cas token did not change after a write")
    eq(c(1).gets(b"nokey"), (None, None), "gets miss")


@check("gets_many")
def _():
    c(0).set(b"g1", b"a")
    c(0).set(b"g2", b"b")
    got = c(1).gets_many([b"g1", b"g2", b"g3"])
    eq(sorted(got), [b"g1", b"g2"], "keys")
    eq(got[b"g1"][0], b"a", "g1")
    eq(got[b"g2"][0], b"b", "g2")


@check("add")
def _():
    c(0).delete(b"ak")
    eq(c(0).add(b"ak", b"first"), True, "add new")
    eq(c(1).add(b"ak", b"second"), False, "add existing")
    eq(c(1).get(b"ak"), b"first", "value kept")


@check("replace")
def _():
    c(0).delete(b"rk")
    eq(c(0).replace(b"rk", b"x"), False, "replace missing")
    eq(c(1).get(b"rk"), None, "still missing")
    c(0).set(b"rk", b"old")
    eq(c(1).replace(b"rk", b"new"), True, "replace existing")
    eq(c(0).get(b"rk"), b"new", "replaced")


@check("append/prepend")
def _():
    c(0).set(b"ap", b"mid")
    eq(c(1).append(b"ap", b"-end"), True, "append")
    eq(c(0).prepend(b"ap", b"start-"), True, "prepend")
    eq(c(1).get(b"ap"), b"start-mid-end", "result")
    eq(c(0).append(b"ap-missing", b"x"), False, "append missing")
    eq(c(0).prepend(b"ap-missing", b"x"), False, "prepend missing")
    eq(c(1).get(b"ap-missing"), None, "still missing")


@check("incr/decr")
def _():
    c(0).set(b"n", b"10")
    eq(c(1).incr(b"n", 5), 15, "incr")
    eq(c(0).decr(b"n", 3), 12, "decr")
    eq(c(1).decr(b"n", 100), 0, "decr stops at 0")
    c(0).set(b"n", b"18446744073709551615")
    eq(c(1).incr(b"n", 2), 1, "incr wraps at 2^64")
    eq(c(0).incr(b"n-missing", 1), None, "incr missing")
    eq(c(0).decr(b"n-missing", 1), None, "decr missing")
    c(0).set(b"n", b"100")
    eq(c(1).decr(b"n", 1), 99, "decr 100 by 1")
    eq(c(0).get(b"n"), b"99 ", "memcached keeps the length: '99 '")
    c(0).set(b"nn", b"abc")
    try:
        c(1).incr(b"nn", 1)
        raise AssertionError("incr of a non-number did not fail")
    except MemcacheClientError as e:
        if "non-numeric" not in str(e):
            raise AssertionError(f"unexpected error: {e}") from e


@check("delete")
def _():
    c(0).set(b"dk", b"x")
    eq(c(1).delete(b"dk"), True, "delete existing")
    eq(c(0).get(b"dk"), None, "gone")
    eq(c(0).delete(b"dk"), False, "delete missing")
    c(0).set(b"dk2", b"x")
    eq(c(1).delete_many([b"dk2", b"dk3"]), True, "delete_many")
    eq(c(0).get(b"dk2"), None, "dk2 gone")


@check("touch and expiry")
def _():
    eq(c(0).touch(b"tk-missing", 10), False, "touch missing")
    # memcached's clock ticks once a second: a ttl of n seconds ends between n - 1 and n
    # seconds after the set, so 2 (not 1, which may end at once) and a sleep past it.
    c(0).set(b"tk", b"x", expire=2)
    eq(c(1).touch(b"tk", 100), True, "touch existing")
    c(0).set(b"ex", b"x", expire=2)
    c(0).set(b"keep", b"y", expire=0)
    time.sleep(2.2)
    eq(c(1).get(b"ex"), None, "expired after 2 s")
    eq(c(1).get(b"tk"), b"x", "touched key outlives its first ttl")
    eq(c(1).get(b"keep"), b"y", "no ttl")


@check("gat")
def _():
    c(0).set(b"gk", b"v", expire=2)
    # pymemcache 4 has no gat method: the raw command.
    eq(c(1).raw_command(b"gat 100 gk", b"END"), b"VALUE gk 0 1\r\nv\r\n", "gat")
    time.sleep(2.2)
    eq(c(0).get(b"gk"), b"v", "gat extended the ttl")


@check("flush_all delay")
def _():
    c(0).set(b"fd", b"x")
    # memcached counts the delay in whole seconds of its clock: with 3 the value is still
    # there at once and gone after 3.2 s, whatever the fraction of the second now.
    eq(c(1).flush_all(delay=3), True, "flush_all 3")
    eq(c(0).get(b"fd"), b"x", "still there before the delay")
    time.sleep(3.2)
    eq(c(1).get(b"fd"), None, "gone after the delay")


@check("version and stats")
def _():
    for i in range(len(CLIENTS)):
        v = c(i).version()
        if not v:
            raise AssertionError("empty version")
        st = c(i).stats()
        for name in (b"pid", b"uptime", b"curr_connections"):
            if name not in st:
                raise AssertionError(f"stats lacks {name!r}: {sorted(st)[:8]}")


@check("many keys across addresses")
def _():
    for i in range(300):
        c(i).set(b"x%d" % i, b"%d" % (i * i))
    for i in range(300):
        eq(c(i + 1).get(b"x%d" % i), b"%d" % (i * i), f"x{i}")


for cl in CLIENTS:
    cl.close()
print(f"{len(PASSED)} passed, {len(FAILED)} failed")
sys.exit(1 if FAILED else 0)
