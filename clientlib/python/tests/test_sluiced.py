"""The client against a real sluiced process: decisions, limits,
multi-checks, INSPECT, threads, and the fail-open cases (daemon absent,
killed, stopped), reconnection and REPORT."""

import statistics
import threading
import time
import unittest

import sluice

from .daemon import Daemon, binary, poll
from .test_faults import capture_logger
from .timing import DIAL_PATIENT, PATIENT


class SluicedTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        binary()

    def setUp(self):
        self.d = Daemon().start()
        self.addCleanup(self.d.close)

    def client(self, **kw):
        # Deadlines a starved machine still meets: what these tests assert is
        # the decision, not how fast it came (the timeout tests set their own).
        kw.setdefault("timeout", PATIENT)
        kw.setdefault("dial_timeout", DIAL_PATIENT)
        kw.setdefault("reconnect_min", 0.005)
        kw.setdefault("reconnect_max", 0.05)
        kw.setdefault("logger", capture_logger(self.id())[0])
        c = sluice.Client.dial(socket_path=self.d.sock, **kw)
        self.addCleanup(c.close)
        return c

    def test_decisions_and_limits(self):
        c = self.client()
        got = [c.allow("api", "alice") for _ in range(4)]
        self.assertEqual([d.allowed for d in got], [True, True, True, False])
        self.assertEqual([d.remaining for d in got[:3]], [2, 1, 0])
        last = got[3]
        self.assertFalse(last.failed_open)
        self.assertEqual((last.limit, last.status, last.denied, last.period), (3, 1, 0, 3600.0))
        self.assertGreater(last.retry_after, 1000)
        self.assertTrue(c.allow("api", "bob").allowed, "keys are limited apart")
        d = c.allow("no-such-rule", "alice")
        self.assertFalse(d.allowed or d.failed_open)
        self.assertEqual(d.status, 2)
        d = c.allow("api", "carol", cost=4)  # above the burst: could never pass
        self.assertTrue(d.invalid and not d.allowed and not d.failed_open, d)
        st = c.stats()
        self.assertEqual((st.decisions, st.failed_open, st.invalid), (6, 0, 1))

    def test_multi_check_is_all_or_nothing(self):
        c = self.client()
        both = lambda: c.allow_all([sluice.Check("user", "u1"), sluice.Check("route", "/search")])  # noqa: E731
        self.assertTrue(both().allowed)
        self.assertTrue(both().allowed)
        d = both()
        self.assertFalse(d.allowed)
        self.assertEqual(d.denied, 0)
        self.assertEqual([r.status for r in d.results], [1, 0])
        self.assertEqual(c.inspect("route", "/search").balance // 1, 98, "a refused request charged nothing")

    def test_inspect(self):
        c = self.client()
        c.allow("api", "seen")
        i = c.inspect("api", "seen")
        self.assertTrue(i.known)
        self.assertEqual((i.limit, i.burst), (3, 3))
        self.assertGreater(i.balance, 1.9)
        self.assertLess(i.balance, 2.1)
        self.assertEqual(c.inspect("api", "never").balance, 3.0)
        self.assertFalse(c.inspect("nope", "seen").known)
        long_key = "user:" + "x" * 1000  # over sluiced's 256: bounded for checks and inspection alike
        c.allow("api", long_key)
        self.assertLess(c.inspect("api", long_key).balance, 2.1)

    def test_threads_share_one_client(self):
        c = self.client()
        admitted, errors = [], []
        lock = threading.Lock()

        def work():
            for _ in range(40):
                d = c.allow("shared", "one-key")
                with lock:
                    if d.failed_open:
                        errors.append(d)
                    elif d.allowed:
                        admitted.append(d)
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(2 * PATIENT)
        self.assertEqual(errors, [])
        self.assertEqual(len(admitted), 100, "320 calls on a 100/1h limit")
        self.assertEqual(c.stats().decisions, 320)

    def test_absent_daemon_fails_open_then_connects_when_it_starts(self):
        self.d.kill()
        c = sluice.Client(socket_path=self.d.sock, timeout=PATIENT, dial_timeout=DIAL_PATIENT, reconnect_min=0.005,
                          reconnect_max=0.05, logger=capture_logger("absent")[0])
        self.addCleanup(c.close)
        t0 = time.monotonic()
        d = c.allow("api", "k")
        self.assertTrue(d.allowed and d.failed_open and d.cause == "daemon_down", d)
        # At once, not at the 60 s deadline; 10 s leaves room for a starved process.
        self.assertLess(time.monotonic() - t0, 10)
        self.d.start()
        poll(lambda: c.up, "the client connects to the new daemon")
        self.assertFalse(c.allow("api", "k").failed_open)

    def test_killed_daemon_fails_open_and_reconnects_and_reports(self):
        c = self.client(conns=1)
        self.assertFalse(c.allow("api", "k").failed_open)
        self.d.kill()
        poll(lambda: c.allow("api", "k").failed_open, "calls fail open once the daemon is dead")
        for _ in range(20):
            t0 = time.monotonic()
            d = c.allow("api", "k")
            # At once, not at the 60 s deadline; 10 s leaves room for a starved process.
            self.assertLess(time.monotonic() - t0, 10, "calls while down must fail at once")
            self.assertTrue(d.allowed and d.failed_open, d)
        failed = c.stats().failed_open
        self.d.start()  # on the same path: the stale socket is replaced
        poll(lambda: c.up, "the client reconnects")
        d = poll(lambda: (lambda d: [d] if not d.failed_open else None)(c.allow("api", "k2")), "a decision again")[0]
        self.assertTrue(d.allowed)
        self.assertGreaterEqual(c.stats().reconnects, 1)
        total = c.stats().failed_open
        self.assertGreaterEqual(total, failed)
        poll(lambda: self.d.metric("sluice_client_failed_open_total") == total,
             "the daemon counts the %d fail-opens the client reported" % total)

    def test_stopped_daemon_times_out_within_the_deadline(self):
        c = self.client(timeout=0.1)
        poll(lambda: not c.allow("api", "warm").failed_open, "a decision")
        # The warm-up may itself time out on a starved machine: count from here.
        timeouts, logged = c.stats().timeouts, c.fail_opens().get("timeout", 0)
        self.d.stop()
        self.addCleanup(self.d.cont)
        took = []
        for _ in range(10):
            t0 = time.monotonic()
            d = c.allow("api", "k")
            took.append(time.monotonic() - t0)
            self.assertTrue(d.allowed and d.failed_open and d.cause == "timeout", d)
        # The stopped daemon never answers: a call on a longer deadline would
        # make every call slow; a starved test process makes only a few slow.
        self.assertLess(statistics.median(took), 1.0, "a 100 ms deadline took %s" % took)
        self.assertEqual(c.stats().timeouts - timeouts, 10)
        self.assertEqual(c.fail_opens()["timeout"] - logged, 10)
        self.d.cont()
        poll(lambda: not c.allow("api", "after").failed_open, "decisions resume after SIGCONT")

    def test_fail_closed(self):
        c = self.client(fail_closed=True)
        self.assertTrue(c.allow("api", "k").allowed)
        self.d.kill()
        d = poll(lambda: (lambda d: [d] if d.failed_open else None)(c.allow("api", "k")), "calls fail")[0]
        self.assertFalse(d.allowed)
        self.assertGreaterEqual(c.stats().failed_closed, 1)
        self.assertEqual(c.stats().failed_open, 0)

    def test_untrusted_real_daemon(self):
        c = sluice.Client(socket_path=self.d.sock, timeout=5, daemon_uids=[4242], dial_timeout=DIAL_PATIENT,
                          logger=capture_logger("untrusted-real")[0])
        self.addCleanup(c.close)
        poll(lambda: c.stats().untrusted >= 1, "the daemon (not uid 4242) is refused")
        d = c.allow("api", "k")
        self.assertTrue(d.failed_open and d.cause == "untrusted_daemon")


if __name__ == "__main__":
    unittest.main()
