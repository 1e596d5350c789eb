"""Drive the client through the spec's exchanges against a fake server that
plays their server frames: what the client sends must be the vectors'
bytes (ids aside, where the client numbers its own), and what it makes of
each reply must be what PROTOCOL.md §10 says."""

import threading
import time
import unittest

import sluice
from sluice import protocol as P

from . import vectors as V
from .fakeserver import FakeServer, read_frame
from .timing import PATIENT

DRIVEN_SERVERS = ("sluiced", "sluiced-allow", "bare-ipc-server")


def local_refusal(m, setup):
    """Why the client refuses a CHECK itself without sending it, or None."""
    if m["type"] != "CHECK":
        return None
    if not m["checks"]:
        return "no checks"
    if len(m["checks"]) > setup["max_batch"]:
        return "batch"
    for c in m["checks"]:
        if c["cost"] < 1 or c["key"] == "":
            return "invalid check"
    return None


def drivable(steps):
    """Whether the client can replay an exchange: one connection, a v2
    HELLO, canonical CHECK/INSPECT/REPORT frames with ids above 0, each id once."""
    if steps[0]["server"] not in DRIVEN_SERVERS:
        return False
    hello = steps[0]["message"]
    if not hello or hello["type"] != "HELLO" or hello["version"] != 2 or hello["client_name"] != "vectors":
        return False
    ids = set()
    for v in steps:
        if v["conn"] != 1 or v.get("after"):
            return False
        if v["from"] != "client":
            continue
        m = v["message"]
        if not v["canonical"] or m is None or m["type"] not in ("CHECK", "INSPECT", "REPORT"):
            if v is not steps[0]:
                return False
        if "id" in m:
            if m["id"] == 0 or m["id"] in ids:
                return False
            ids.add(m["id"])
    return True


def plan(steps, setup):
    """Split an exchange (after the handshake) into bursts: the client frames
    sent together and the server frames that answer them. Requests the
    client refuses itself, or sends as a bounded key, are set apart."""
    bursts, local = [], []
    i = 2
    while i < len(steps):
        sent, replies = [], []
        while i < len(steps) and steps[i]["from"] == "client":
            m = steps[i]["message"]
            why = local_refusal(m, setup)
            long_key = m["type"] in ("CHECK", "INSPECT") and any(
                len(k.encode()) > setup["max_key_len"]
                for k in ([c["key"] for c in m["checks"]] if m["type"] == "CHECK" else [m["key"]]))
            if why or long_key:
                local.append((steps[i], why))
                # its reply is dropped with it
                skip_id = m["id"]
                steps = [s for s in steps if not (s["from"] == "server" and s["message"].get("id") == skip_id
                                                   and s["step"] > steps[i]["step"])]
            else:
                sent.append(steps[i])
            i += 1
        while i < len(steps) and steps[i]["from"] == "server":
            replies.append(steps[i])
            i += 1
        if sent or replies:
            bursts.append((sent, replies))
    return bursts, local


class ReplayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.data = V.load()
        cls.ex = V.exchanges(cls.data)

    def test_enough_exchanges_are_driven(self):
        driven = [n for n, s in self.ex.items() if drivable(s)]
        for must in ("check-single", "check-multi", "check-shaped", "check-pipelined", "inspect", "report-v2",
                     "request-errors", "key-limits", "error-internal", "check-unknown-rule-deny",
                     "check-unknown-rule-allow", "check-shadow-soft"):
            self.assertIn(must, driven)

    def test_replay(self):
        for name, steps in sorted(self.ex.items()):
            if drivable(steps):
                with self.subTest(exchange=name):
                    self.replay(name, steps)

    def replay(self, name, steps):
        setup = self.data["servers"][steps[0]["server"]]
        bursts, local = plan(steps, setup)
        errors, id_map, extra_reports = [], {}, []

        def serve(c):
            deadline = time.monotonic() + 10
            hello = read_frame(c, deadline)
            if hello.hex() != steps[0]["hex"]:
                errors.append("HELLO %s, want %s" % (hello.hex(), steps[0]["hex"]))
            c.sendall(bytes.fromhex(steps[1]["hex"]))
            for sent, replies in bursts:
                pending = list(sent)
                while pending:
                    got = read_frame(c, deadline)
                    m = V.readable(P.decode(got[4:], from_server=False))
                    match = None
                    for v in pending:
                        want = dict(v["message"])
                        if "id" in want:
                            want["id"] = m.get("id")
                        if want == m:
                            match = v
                            break
                    if match is None and m["type"] == "REPORT":
                        extra_reports.append(m)  # of calls failed open before, as the client must send
                        continue
                    if match is None:
                        errors.append("unexpected frame %r, want one of %r" % (m, [v["message"] for v in pending]))
                        return
                    pending.remove(match)
                    if "id" in m:
                        id_map[match["message"]["id"]] = m["id"]
                        if m["id"] == match["message"]["id"] and got.hex() != match["hex"]:
                            errors.append("%s: sent %s, want %s" % (match["name"], got.hex(), match["hex"]))
                for r in replies:
                    rm = r["message"]
                    out = V.encode(rm, id_map.get(rm.get("id"), rm.get("id")))
                    if id_map.get(rm.get("id"), rm.get("id")) == rm.get("id") and out.hex() != r["hex"]:
                        errors.append("re-encoded %s differs: %s vs %s" % (r["name"], out.hex(), r["hex"]))
                    c.sendall(out)
                    if r.get("closes"):
                        c.close()
                        return
            time.sleep(0.05)

        srv = FakeServer(serve)
        # REPORT exchanges: that many calls fail open before the daemon is there.
        fail_first = sum(v["message"]["failed_open"] for v in steps if v["message"] and v["message"]["type"] == "REPORT")
        srv.sock.close()
        import os
        os.unlink(srv.path)
        client = sluice.Client(socket_path=srv.path, conns=1, name="vectors", timeout=5,
                               reconnect_min=0.005, reconnect_max=0.02, logger=_quiet())
        try:
            for _ in range(fail_first):
                self.assertTrue(client.allow("api", "early").failed_open)
            srv._stop = True
            srv._thread.join(2)
            srv._stop = False
            srv.listen()
            wait_until(lambda: client.up, "the client connects")
            for v, why in local:
                m = v["message"]
                if why:
                    d = client.allow_all([sluice.Check(c["rule"], c["key"], c["cost"]) for c in m["checks"]])
                    self.assertTrue(d.invalid and not d.allowed and not d.failed_open, "%s: %r" % (v["name"], d))
            for sent, replies in bursts:
                by_id = {r["message"].get("id"): r["message"] for r in replies}
                calls = [v for v in sent if v["message"]["type"] != "REPORT"]
                results = [None] * len(calls)

                def run(k, v):
                    m = v["message"]
                    if m["type"] == "CHECK":
                        results[k] = client.allow_all([sluice.Check(c["rule"], c["key"], c["cost"],
                                                                    c.get("max_delay_ns", 0) / 1e9)
                                                       for c in m["checks"]])
                    else:
                        try:
                            results[k] = client.inspect(m["rule"], m["key"])
                        except sluice.SluiceError as e:
                            results[k] = e
                threads = [threading.Thread(target=run, args=(k, v)) for k, v in enumerate(calls)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(10)
                for v, got in zip(calls, results):
                    self.check_outcome(name, v, by_id.get(v["message"]["id"]), got)
            self.assertEqual(errors, [], name)
            st = client.stats()
            reported = fail_first + sum(r["failed_open"] for r in extra_reports)
            self.assertLessEqual(reported, st.failed_open, name)
            self.assertEqual(sum(r["failed_closed"] for r in extra_reports), 0, name)
            if name == "error-internal":
                self.assertEqual(extra_reports, [{"type": "REPORT", "failed_open": 1, "failed_closed": 0}])
            self.assertEqual(srv.errors, [], name)
        finally:
            client.close()
            srv.close()

    def check_outcome(self, name, v, reply, got):
        what = "%s step %d" % (name, v["step"])
        self.assertIsNotNone(reply, what)
        if v["message"]["type"] == "INSPECT":
            if reply["type"] == "BALANCE":
                self.assertEqual(got, sluice.Inspection(reply["known"], float(reply["balance"]), reply["limit"],
                                                        reply["burst"]), what)
            else:
                self.assertIsInstance(got, sluice.ServerError, what)
                self.assertEqual(got.code, reply["code"], what)
            return
        if reply["type"] == "RESULT":
            self.assertFalse(got.failed_open, what)
            self.assertEqual(got.allowed, reply["allowed"], what)
            self.assertEqual([r.status for r in got.results], [r["status"] for r in reply["results"]], what)
            self.assertEqual([r.remaining for r in got.results], [r["remaining"] for r in reply["results"]], what)
            if any(r["status"] == P.STATUS_DELAYED for r in reply["results"]):
                self.assertGreater(got.delay, 0, what)
        else:
            code = reply["code"]
            if 100 <= code < 104:
                self.assertTrue(got.invalid and not got.allowed and not got.failed_open, "%s: %r" % (what, got))
            else:
                self.assertTrue(got.failed_open and got.allowed, "%s: %r" % (what, got))


def _quiet():
    import logging
    lg = logging.getLogger("sluice.test.quiet")
    lg.propagate = False
    lg.addHandler(logging.NullHandler())
    return lg


def wait_until(cond, what, timeout=PATIENT):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %gs waiting until %s" % (timeout, what))
        time.sleep(0.002)


if __name__ == "__main__":
    unittest.main()
