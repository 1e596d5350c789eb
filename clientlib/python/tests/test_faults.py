"""The client's promises against fake servers that misbehave: untrusted
peers, silence, garbage, closing, refusing, not reading."""

import logging
import os
import statistics
import threading
import time
import unittest

import sluice
from sluice import protocol as P
from sluice.client import Options, _Core

from .fakeserver import FakeServer, handshake, read_frame
from .test_replay import wait_until
from .timing import DIAL_PATIENT, PATIENT, fastest


class ListHandler(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []
        self._mu = threading.Lock()

    def emit(self, record):
        with self._mu:
            self.lines.append(record.getMessage())

    def matching(self, s):
        with self._mu:
            return [ln for ln in self.lines if s in ln]


def capture_logger(name):
    lg = logging.getLogger("sluice.test." + name)
    lg.propagate = False
    h = ListHandler()
    lg.handlers = [h]
    lg.setLevel(logging.DEBUG)
    return lg, h


def hold(c):
    """Handshake, then keep reading (and answering nothing) until the client goes."""
    handshake(c)
    try:
        while True:
            read_frame(c, time.monotonic() + 30)
    except (EOFError, OSError):
        pass


class FaultTest(unittest.TestCase):
    def setUp(self):
        self.cleanup = []

    def tearDown(self):
        for f in reversed(self.cleanup):
            f()

    def server(self, handler):
        s = FakeServer(handler)
        self.cleanup.append(s.close)
        return s

    def client(self, path, **kw):
        kw.setdefault("logger", capture_logger(self.id())[0])
        kw.setdefault("reconnect_min", 0.005)
        kw.setdefault("reconnect_max", 0.05)
        kw.setdefault("dial_timeout", DIAL_PATIENT)  # a starved fake server still answers in time
        c = sluice.Client(socket_path=path, **kw)
        self.cleanup.append(c.close)
        return c

    def test_untrusted_daemon_gets_nothing_and_calls_fail_open(self):
        received = []

        def handler(c):
            c.settimeout(PATIENT)
            received.append(c.recv(100))  # b"": closed without a byte sent
        srv = self.server(handler)
        lg, h = capture_logger("untrusted")
        # One dial in the test's life: a re-dial to a starved fake server can fail
        # otherwise (EAGAIN on a full backlog) and change the cause under test.
        c = self.client(srv.path, daemon_uids=[4242], logger=lg, timeout=1, reconnect_min=PATIENT,
                        reconnect_max=PATIENT)
        wait_until(lambda: c.stats().untrusted >= 1, "the untrusted daemon is refused")
        d = c.allow("api", "k")
        self.assertTrue(d.allowed and d.failed_open, d)
        self.assertEqual(d.cause, "untrusted_daemon")
        wait_until(lambda: received, "the fake server sees the client go")
        self.assertEqual(received[0], b"", "the client sent bytes to an untrusted daemon")
        lines = h.matching("cannot reach sluiced")
        self.assertTrue(lines and srv.path in lines[0] and "uid %d" % os.geteuid() in lines[0] and "4242" in lines[0],
                        h.lines)
        self.assertEqual(len(lines), 1, h.lines)

    def test_trusted_uid_from_environment(self):
        srv = self.server(hold)
        old = os.environ.get("SLUICE_DAEMON_UIDS")
        os.environ["SLUICE_DAEMON_UIDS"] = "4242, %d" % os.geteuid()
        try:
            c = self.client(srv.path)
        finally:
            if old is None:
                del os.environ["SLUICE_DAEMON_UIDS"]
            else:
                os.environ["SLUICE_DAEMON_UIDS"] = old
        self.assertEqual(c.opts.daemon_uids, [4242, os.geteuid()])
        wait_until(lambda: c.up, "connected")

    def test_silent_daemon_times_out_within_the_deadline(self):
        srv = self.server(hold)
        c = self.client(srv.path, timeout=0.05)
        wait_until(lambda: c.up, "connected")
        calls = {}
        for fail_closed in (False, True):
            c.opts.fail_closed = fail_closed
            # The daemon never answers: a call that ignored its deadline would
            # never return, one on a longer deadline would take over 1 s every
            # time; a starved test process makes only some calls slow.
            got, best = fastest(lambda: c.allow("api", "k"), 1.0)
            calls[fail_closed] = len(got)
            for d in got:
                self.assertTrue(d.failed_open and d.allowed != fail_closed, d)
                self.assertEqual(d.cause, "timeout")
            self.assertLess(best, 1.0, "a 50 ms deadline took at best %.3fs in %d calls" % (best, len(got)))
        st = c.stats()
        self.assertEqual((st.failed_open, st.failed_closed, st.timeouts),
                         (calls[False], calls[True], calls[False] + calls[True]))
        self.assertEqual(c.fail_opens()["timeout"], calls[False] + calls[True])

    def test_per_call_timeout_shortens_the_deadline(self):
        srv = self.server(hold)
        c = self.client(srv.path, timeout=5)
        wait_until(lambda: c.up, "connected")
        t0 = time.monotonic()
        d = c.allow("api", "k", timeout=0.02)
        self.assertTrue(d.failed_open and d.cause == "timeout")
        self.assertLess(time.monotonic() - t0, 2)

    def test_garbage_reply_is_a_protocol_failure_and_reconnects(self):
        def handler(c):
            handshake(c)
            read_frame(c, time.monotonic() + 5)
            c.sendall(P.frame(b"\xc1"))  # never valid msgpack
            time.sleep(0.5)
        srv = self.server(handler)
        c = self.client(srv.path, timeout=5)
        wait_until(lambda: c.up, "connected")
        d = c.allow("api", "k")
        self.assertTrue(d.failed_open and d.allowed)
        self.assertEqual(d.cause, "protocol")
        wait_until(lambda: srv.accepted >= 2, "the client reconnects")

    def test_error_id_zero_fails_pending_calls_at_once(self):
        def handler(c):
            handshake(c)
            read_frame(c, time.monotonic() + 5)
            c.sendall(P.encode_error(0, P.CODE_SHUTTING_DOWN, b"daemon shutting down"))
            c.close()
        srv = self.server(handler)
        c = self.client(srv.path, timeout=5)
        wait_until(lambda: c.up, "connected")
        t0 = time.monotonic()
        d = c.allow("api", "k")
        self.assertLess(time.monotonic() - t0, 4, "the call waited for its deadline")
        self.assertTrue(d.failed_open and d.cause == "daemon_down", d)

    def test_refusal_before_welcome(self):
        def handler(c):
            c.sendall(P.encode_error(0, P.CODE_PEER_REFUSED, b"uid 0 not allowed"))
            c.close()
        srv = self.server(handler)
        lg, h = capture_logger("refused")
        c = self.client(srv.path, logger=lg)
        wait_until(lambda: h.matching("peer_refused"), "the refusal is logged")
        self.assertTrue(c.allow("api", "k").failed_open)
        self.assertFalse(c.up)

    def test_connections_dying_young_are_redialled_with_backoff(self):
        def handler(c):
            handshake(c)
            c.close()  # accepts, handshakes, then hangs up: must not be hammered
        srv = self.server(handler)
        self.client(srv.path, reconnect_min=0.01, reconnect_max=0.2, conns=1)
        time.sleep(1.0)  # a window to count dials in, not a wait for an outcome
        # Without backoff this would be hundreds; with it 0.005+0.01+0.02+...+0.2 caps at ~8.
        self.assertLess(srv.accepted, 20)
        self.assertGreaterEqual(srv.accepted, 2)

    def test_backoff_is_jittered_in_half_open_interval_and_capped(self):
        core = _Core()
        core.opts = Options(reconnect_min=0.01, reconnect_max=0.08)
        for j, want in ((0.0, 0.005), (0.5, 0.0075), (0.999, 0.009995)):
            core.opts.jitter = lambda j=j: j
            w, nxt = core._backoff_wait(0.01)
            self.assertAlmostEqual(w, want)
            self.assertEqual(nxt, 0.02)
        self.assertEqual(core._backoff_wait(0.08)[1], 0.08)

    def test_limits_of_welcome_are_respected(self):
        got = []

        def handler(c):
            handshake(c, P.encode_welcome(2, b"fake", 256, 2, 16))
            while True:
                f = read_frame(c, time.monotonic() + 10)
                m = P.decode(f[4:], from_server=False)
                got.append(m)
                if m["type"] == "CHECK":
                    c.sendall(P.encode_result(m["id"], True, [(0, 5, 4, 0, 1, 10)] * len(m["checks"])))
        srv = self.server(handler)
        c = self.client(srv.path, timeout=5, conns=1)
        wait_until(lambda: c.up, "connected")
        d = c.allow_all([sluice.Check("r", "a"), sluice.Check("r", "b"), sluice.Check("r", "c")])
        self.assertTrue(d.invalid and not d.allowed and not d.failed_open, d)
        d = c.allow("r" * 300, "a")
        self.assertTrue(d.invalid and not d.allowed, d)
        long_key = "user:" + "x" * 40
        d = c.allow("r", long_key)
        self.assertTrue(d.allowed and not d.failed_open, d)
        self.assertEqual([m["type"] for m in got], ["CHECK"], "refused requests must not be sent")
        self.assertEqual(got[0]["checks"][0]["key"], P.bounded_key(long_key, 16))
        for bad in ([], [sluice.Check("r", "")], [sluice.Check("r", "k", 0)]):
            d = c.allow_all(bad)
            self.assertTrue(d.invalid and not d.allowed, d)
        self.assertEqual(c.stats().invalid, 5)

    def test_a_daemon_that_stops_reading_cannot_hold_calls(self):
        release = threading.Event()
        self.cleanup.append(release.set)

        def handler(c):
            handshake(c, P.encode_welcome(2, b"fake", 1 << 20, 4, 1 << 16))
            release.wait(PATIENT)  # reads nothing more until the test ends
        srv = self.server(handler)
        # dial_timeout 30 s: the client's own stall detection (max(timeout,
        # dial_timeout, 1 s)) must not be what frees a held call.
        c = self.client(srv.path, timeout=0.05, conns=1, dial_timeout=DIAL_PATIENT)
        wait_until(lambda: c.up, "connected")
        took = []
        causes = set()
        for i in range(40):  # 40 x 60 KiB: well past the socket buffer and the 1 MiB queue
            t0 = time.monotonic()
            d = c.allow("r", ("k%d-" % i) + "x" * 60000)
            took.append(time.monotonic() - t0)
            self.assertTrue(d.failed_open and d.allowed, d)
            causes.add(d.cause)
        # A call held by the unread socket would take 30 s or more; a
        # starved test process delays a few calls by seconds, not most of
        # them past 1 s.
        self.assertLess(max(took), 10.0, "a call took %.3fs with a 50 ms deadline" % max(took))
        self.assertLess(statistics.median(took), 1.0, "the median call took %.3fs with a 50 ms deadline"
                        % statistics.median(took))
        self.assertTrue(causes <= {"timeout", "daemon_down"}, causes)

    def test_rate_limited_log_one_line_per_cause_per_interval(self):
        now = [100.0]
        lg, h = capture_logger("ratelimited")
        fl = sluice.FailOpenLog(lg, 10.0, False, now=lambda: now[0])
        for _ in range(50):
            fl.record(sluice.Timeout("slow"))
            fl.record(sluice.DaemonDown("down"))
        self.assertEqual(len(h.lines), 2)
        self.assertIn("cause=timeout count=1", h.lines[0])
        now[0] += 10
        fl.record(sluice.Timeout("slow"))
        self.assertEqual(len(h.lines), 3)
        self.assertIn("cause=timeout count=50", h.lines[2])
        self.assertEqual(fl.totals()["timeout"], 51)
        self.assertEqual(fl.totals()["daemon_down"], 50)

    def test_absent_daemon_fails_open_at_once_and_says_why(self):
        lg, h = capture_logger("absent")
        c = self.client("/nonexistent/sluice/d.sock", logger=lg)
        t0 = time.monotonic()
        for _ in range(100):
            d = c.allow("api", "k")
            self.assertTrue(d.allowed and d.failed_open and d.cause == "daemon_down", d)
        self.assertLess(time.monotonic() - t0, 1.0)
        self.assertEqual(c.stats().failed_open, 100)
        lines = h.matching("socket missing")
        self.assertTrue(lines and "/nonexistent/sluice/d.sock" in lines[0], h.lines)
        self.assertEqual(len(h.matching("failing open")), 1, "one line per cause per interval")

    def test_closed_client_fails_open_with_closed(self):
        srv = self.server(hold)
        c = self.client(srv.path)
        c.close()
        d = c.allow("api", "k")
        self.assertTrue(d.failed_open and d.cause == "closed")


if __name__ == "__main__":
    unittest.main()
