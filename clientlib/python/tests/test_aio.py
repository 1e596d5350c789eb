"""The asyncio client against a real sluiced and a silent fake."""

import asyncio
import time
import unittest

import sluice
from sluice.aio import AsyncClient

from .daemon import Daemon, binary
from .fakeserver import FakeServer
from .test_faults import capture_logger, hold


async def apoll(cond, what, timeout=15.0):
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
            c = await AsyncClient.create(socket_path=srv.path, timeout=0.05, logger=capture_logger("aio-silent")[0])
            try:
                self.assertTrue(c.up)
                t0 = time.monotonic()
                d = await c.allow("api", "k")
                self.assertLess(time.monotonic() - t0, 1)
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
            c = await AsyncClient.create(socket_path=self.d.sock, timeout=5, reconnect_min=0.005,
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


async def _decided(c):
    return not (await c.allow("api", "y")).failed_open


if __name__ == "__main__":
    unittest.main()


class AsyncStallTest(unittest.TestCase):
    def test_a_daemon_that_stops_reading_is_dropped(self):
        def handler(c):
            from .fakeserver import handshake
            handshake(c, __import__("sluice").protocol.encode_welcome(2, b"fake", 1 << 20, 4, 1 << 16))
            time.sleep(8)  # reads nothing more
        srv = FakeServer(handler)
        self.addCleanup(srv.close)

        async def main():
            c = await AsyncClient.create(socket_path=srv.path, timeout=0.05, dial_timeout=0.2, conns=1,
                                         reconnect_min=0.5, reconnect_max=1, logger=capture_logger("aio-stall")[0])
            try:
                t_end = time.monotonic() + 10
                worst, causes = 0.0, set()
                while c.up and time.monotonic() < t_end:
                    t0 = time.monotonic()
                    d = await c.allow("r", "k" + "x" * 60000)
                    worst = max(worst, time.monotonic() - t0)
                    self.assertTrue(d.failed_open and d.allowed, d)
                    causes.add(d.cause)
                self.assertFalse(c.up, "the stalled connection was never dropped")
                self.assertLess(worst, 1.0)
                self.assertTrue(causes <= {"timeout", "daemon_down"}, causes)
            finally:
                await c.close()
        asyncio.run(main())
