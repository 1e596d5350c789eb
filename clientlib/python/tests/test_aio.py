"""The asyncio client against a real sluiced and a silent fake."""

import asyncio
import statistics
import threading
import time
import unittest

import sluice
from sluice.aio import AsyncClient

from .daemon import Daemon, binary
from .fakeserver import FakeServer
from .test_faults import capture_logger, hold
from .timing import DIAL_PATIENT, PATIENT, afastest


async def apoll(cond, what, timeout=PATIENT):
    deadline = time.monotonic() + timeout
    while True:
        v = await cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %gs waiting until %s" % (timeout, what))
        await asyncio.sleep(0.005)


class AsyncFakeTest(unittest.TestCase):
    def test_silent_daemon_times_out_and_absent_fails_open(self):
        srv = FakeServer(hold)
        self.addCleanup(srv.close)

        async def main():
            c = await AsyncClient.create(socket_path=srv.path, timeout=0.05, dial_timeout=DIAL_PATIENT,
                                         logger=capture_logger("aio-silent")[0])
            try:
                self.assertTrue(c.up)
                # The daemon never answers: a call that ignored its deadline would
                # never return, one on a longer deadline would take over 1 s every
                # time; a starved test process makes only some calls slow.
                got, best = await afastest(lambda: c.allow("api", "k"), 1.0)
                self.assertLess(best, 1.0, "a 50 ms deadline took at best %.3fs in %d calls" % (best, len(got)))
                for d in got:
                    self.assertTrue(d.failed_open and d.allowed and d.cause == "timeout", d)
            finally:
                await c.close()
            c = await AsyncClient.create(socket_path="/nonexistent/d.sock", fail_closed=True,
                                         logger=capture_logger("aio-absent")[0])
            try:
                d = await c.allow("api", "k")
                self.assertTrue(d.failed_open and not d.allowed and d.cause == "daemon_down", d)
                self.assertEqual(c.stats().failed_closed, 1)
            finally:
                await c.close()
        asyncio.run(main())


class AsyncSluicedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        binary()

    def setUp(self):
        self.d = Daemon().start()
        self.addCleanup(self.d.close)

    def test_decisions_multi_inspect_concurrency_reconnect(self):
        async def main():
            c = await AsyncClient.create(socket_path=self.d.sock, timeout=PATIENT, dial_timeout=DIAL_PATIENT,
                                         reconnect_min=0.005,
                                         reconnect_max=0.05, logger=capture_logger("aio-real")[0])
            try:
                got = [await c.allow("api", "a") for _ in range(4)]
                self.assertEqual([d.allowed for d in got], [True, True, True, False])
                self.assertFalse(any(d.failed_open for d in got))
                d = await c.allow_all([sluice.Check("user", "u"), sluice.Check("route", "/r", 1)])
                self.assertTrue(d.allowed)
                i = await c.inspect("route", "/r")
                self.assertTrue(i.known and i.burst == 100 and 98.9 < i.balance < 99.1, i)
                ds = await asyncio.gather(*(c.allow("many", "same") for _ in range(50)))
                self.assertEqual(sum(d.allowed for d in ds), 20)
                self.assertFalse(any(d.failed_open for d in ds))
                self.d.kill()
                await apoll(lambda: _failed(c), "calls fail open once the daemon is dead")
                self.d.start()
                await apoll(lambda: _decided(c), "decisions again after a restart")
                self.assertGreaterEqual(c.stats().reconnects, 1)
            finally:
                await c.close()
        asyncio.run(main())


async def _failed(c):
    d = await c.allow("api", "x")
    return d.failed_open and d.allowed


async def _up(c):
    return c.up


async def _decided(c):
    return not (await c.allow("api", "y")).failed_open


if __name__ == "__main__":
    unittest.main()


class AsyncStallTest(unittest.TestCase):
    def test_a_daemon_that_stops_reading_is_dropped(self):
        release = threading.Event()

        def handler(c):
            from .fakeserver import handshake
            handshake(c, __import__("sluice").protocol.encode_welcome(2, b"fake", 1 << 20, 4, 1 << 16))
            release.wait(PATIENT)  # reads nothing more until the test ends
        srv = FakeServer(handler)
        self.addCleanup(srv.close)
        self.addCleanup(release.set)

        async def main():
            # The stall is detected after max(timeout, dial_timeout, 1 s) = 1 s;
            # the daemon would read again only after 60 s.
            c = await AsyncClient.create(socket_path=srv.path, timeout=0.05, dial_timeout=1.0, conns=1,
                                         reconnect_min=0.5, reconnect_max=1, logger=capture_logger("aio-stall")[0])
            self.assertTrue(c.up or await apoll(lambda: _up(c), "connected"))
            try:
                t_end = time.monotonic() + PATIENT / 2
                took, causes = [], set()
                while c.up and time.monotonic() < t_end:
                    t0 = time.monotonic()
                    d = await c.allow("r", "k" + "x" * 60000)
                    took.append(time.monotonic() - t0)
                    self.assertTrue(d.failed_open and d.allowed, d)
                    causes.add(d.cause)
                self.assertFalse(c.up, "the stalled connection was never dropped")
                # A call held by the unread socket would take until the daemon
                # reads again; a starved test process delays a few calls by
                # seconds, not most of them past 1 s.
                self.assertLess(max(took), 10.0)
                self.assertLess(statistics.median(took), 1.0, took)
                self.assertTrue(causes <= {"timeout", "daemon_down"}, causes)
            finally:
                await c.close()
        asyncio.run(main())
