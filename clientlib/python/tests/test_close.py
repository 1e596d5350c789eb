"""close() racing the background reconnect: it returns, bounded, and leaves
no connection open, wherever the reconnect loop is when it is called."""

import asyncio
import threading
import time
import unittest
from unittest import mock

from sluice import Client
from sluice.aio import AsyncClient

from .fakeserver import FakeServer, handshake, read_frame
from .test_faults import capture_logger

BOUND = 10.0  # seconds a close() may take before the test calls it hung; it takes milliseconds


class Tracker:
    """A fake daemon that answers the handshake, then reads until the client
    hangs up, counting connections that are still open."""

    def __init__(self):
        self.lock = threading.Lock()
        self.open = 0
        self.srv = FakeServer(self._serve)

    def _serve(self, c):
        with self.lock:
            self.open += 1
        try:
            handshake(c)
            while True:
                read_frame(c, time.monotonic() + 30)
        except (EOFError, OSError):
            pass
        finally:
            with self.lock:
                self.open -= 1

    def wait_all_closed(self, test):
        deadline = time.monotonic() + BOUND
        while time.monotonic() < deadline:
            with self.lock:
                if self.open == 0 and self.srv.accepted > 0:
                    return
            time.sleep(0.01)  # polling the fake server's count, not waiting for an outcome blindly
        test.fail("%d connection(s) still open %gs after close()" % (self.open, BOUND))


class AsyncCloseTest(unittest.TestCase):
    def setUp(self):
        self.t = Tracker()
        self.addCleanup(self.t.srv.close)

    def test_close_as_a_dial_completes_returns(self):
        """Python 3.11's asyncio.wait_for returns the inner result when a
        cancel lands in the step its inner await completes (CPython
        gh-86296): the reconnect task then swallowed close()'s cancel,
        went back to waiting for a kick, and close() awaited it forever.
        The second of two dials is parked inside _dial's wait_for; the test
        releases it and calls close() in the same loop step."""
        real_open = asyncio.open_unix_connection

        async def main():
            loop = asyncio.get_running_loop()
            parked, gate = loop.create_future(), loop.create_future()
            n = 0

            async def gated_open(*a, **kw):
                nonlocal n
                n += 1
                rw = await real_open(*a, **kw)
                if n == 2:
                    parked.set_result(None)
                    await gate
                return rw

            with mock.patch("asyncio.open_unix_connection", gated_open):
                c = await AsyncClient.create(socket_path=self.t.srv.path, conns=2, dial_timeout=5,
                                             logger=capture_logger("aio-close")[0])
                await asyncio.wait_for(parked, BOUND)
                gate.set_result(None)  # the dial's inner await completes in the next step...
                closing = loop.create_task(c.close())  # ...and close() cancels the dial in that step
                done, _ = await asyncio.wait({closing}, timeout=BOUND)
                if not done:
                    c._task.cancel()  # let asyncio.run finish on the old code
                    await asyncio.wait({closing}, timeout=BOUND)
                    self.fail("AsyncClient.close() did not return within %gs" % BOUND)
                closing.result()
                self.assertFalse(c.up)
                self.assertTrue(c._task.done())
                self.assertEqual(c._slots, [None, None])
                d = await c.allow("api", "k")
                self.assertTrue(d.failed_open and d.cause == "closed", d)
        asyncio.run(main())
        self.t.wait_all_closed(self)

    def test_close_at_every_point_of_a_dial_returns(self):
        """close() called after k loop steps of a start, for each k up to
        the first connection: it returns and leaves nothing open."""
        async def main(k):
            c = AsyncClient(socket_path=self.t.srv.path, conns=2, dial_timeout=5,
                            logger=capture_logger("aio-close-k")[0])
            await c.start()
            for _ in range(k):
                await asyncio.sleep(0)
            done, _ = await asyncio.wait({asyncio.ensure_future(c.close())}, timeout=BOUND)
            self.assertTrue(done, "close() after %d steps did not return within %gs" % (k, BOUND))
            self.assertEqual(c._slots, [None, None])
        for k in range(40):
            asyncio.run(main(k))
        self.t.wait_all_closed(self)


class SyncCloseTest(unittest.TestCase):
    def test_a_dial_finishing_as_close_runs_is_not_kept(self):
        """The reconnect thread checked closed, then stored its new
        connection; a close() in between swept the slots first and the
        connection stayed open. The thread is held at its first look at
        closed after the dial (with what it read before) until close() is
        waiting for it."""
        t = Tracker()
        self.addCleanup(t.srv.close)
        dialed, release = threading.Event(), threading.Event()
        real_dial = Client._dial

        class Held(threading.Event):
            armed = True

            def is_set(self):
                v = super().is_set()
                if Held.armed and threading.current_thread().name == "sluice-reconnect":
                    Held.armed = False
                    release.wait(BOUND)
                return v

        def held_dial(self):
            cn = real_dial(self)
            if not dialed.is_set():
                self._closed = Held()  # nothing has closed the client yet: a fresh event is equivalent
                dialed.set()
            return cn

        with mock.patch.object(Client, "_dial", held_dial):
            c = Client(socket_path=t.srv.path, conns=1, dial_timeout=5, logger=capture_logger("sync-close")[0])
            self.assertTrue(dialed.wait(BOUND), "the reconnect thread never dialed")
            real_join = c._loop.join

            def join(timeout=None):
                release.set()  # close() has done all it does before waiting for the thread
                real_join(timeout)
            c._loop.join = join
            closer = threading.Thread(target=c.close)
            closer.start()
            closer.join(BOUND)
        self.assertFalse(closer.is_alive(), "Client.close() did not return within %gs" % BOUND)
        real_join(BOUND)
        self.assertFalse(c._loop.is_alive())
        self.assertEqual(c._slots, [None])
        self.assertFalse(c.up)
        t.wait_all_closed(self)


if __name__ == "__main__":
    unittest.main()
