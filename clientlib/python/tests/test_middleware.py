"""WSGI and ASGI middleware: the same headers and answers as Go's httplimit."""

import asyncio
import json
import time
import unittest

import sluice
from sluice.aio import AsyncClient
from sluice.decision import Result, decision_of
from sluice.middleware import (ASGIMiddleware, HEADERS_DRAFT, HEADERS_LEGACY, Identity, Limit, Route, Shape,
                               WSGIMiddleware, rate_limit_headers)

from .daemon import Daemon, binary
from .test_faults import capture_logger


class FakeClient:
    """Answers with a fixed decision and records the checks asked."""

    def __init__(self, d, fail_closed=False):
        self.d, self.asked = d, []
        self.opts = sluice.Options(fail_closed=fail_closed)

    def allow_all(self, checks, timeout=None):
        self.asked.append(checks)
        return self.d


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("X-Reached", "yes")])
    return [b"hello"]


def wsgi_call(mw, path="/", method="GET", headers=None, remote="192.0.2.7"):
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "REMOTE_ADDR": remote}
    for k, v in (headers or {}).items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    out = {}

    def start_response(status, hs, exc_info=None):
        out["status"], out["headers"] = int(status.split()[0]), dict(hs)
    body = b"".join(mw(environ, start_response))
    return out["status"], out["headers"], body


def result(status, limit, remaining, retry_s, reset_s, period_s):
    return Result(status, limit, remaining, int(retry_s * 1e9), int(reset_s * 1e9), int(period_s * 1e9))


class HeadersTest(unittest.TestCase):
    def test_admitted_request_carries_every_header(self):
        d = decision_of(True, [result(0, 10, 7, 0, 1.5, 60)])
        c = FakeClient(d)
        st, hs, body = wsgi_call(WSGIMiddleware(app, c, identity=Identity(header="X-API-Key", client_ip=True),
                                                default=[Limit("api")]), headers={"X-API-Key": "k1"})
        self.assertEqual((st, body, hs["X-Reached"]), (200, b"hello", "yes"))
        want = {"X-Ratelimit-Limit": "10", "X-Ratelimit-Remaining": "7", "X-Ratelimit-Reset": "2",
                "X-Ratelimit-Retry-After": "0", "RateLimit-Policy": '"api";q=10;w=60', "RateLimit": '"api";r=7;t=2'}
        for k, v in want.items():
            self.assertEqual(hs.get(k), v, k)
        self.assertNotIn("Retry-After", hs)
        self.assertEqual(c.asked[0][0].key, "key:k1")

    def test_throttled_request_gets_429_with_retry_after(self):
        d = decision_of(False, [result(1, 10, 0, 2.2, 30, 60)])
        st, hs, body = wsgi_call(WSGIMiddleware(app, FakeClient(d), default=[Limit("api")]))
        self.assertEqual(st, 429)
        self.assertNotIn("X-Reached", hs)
        self.assertEqual((hs["Retry-After"], hs["X-Ratelimit-Reset"], hs["X-Ratelimit-Retry-After"]), ("3", "3", "3"))
        self.assertEqual(hs["RateLimit"], '"api";r=0;t=3')
        self.assertEqual(hs["Content-Type"], "application/problem+json")
        p = json.loads(body)
        self.assertEqual((p["status"], p["retry_after"], p["rule"]), (429, 3, "api"))

    def test_remaining_is_capped_at_limit_and_families_can_be_chosen(self):
        d = decision_of(True, [result(0, 10, 15, 0, 0, 60)])
        self.assertIn(("X-Ratelimit-Remaining", "10"), rate_limit_headers(d, [sluice.Check("api", "k")]))
        names = {n for n, _ in rate_limit_headers(d, [sluice.Check("api", "k")], HEADERS_LEGACY)}
        self.assertNotIn("RateLimit", names)
        names = {n for n, _ in rate_limit_headers(d, [sluice.Check("api", "k")], HEADERS_DRAFT)}
        self.assertEqual(names, {"RateLimit", "RateLimit-Policy"})

    def test_undecided_passes_without_headers_or_503_when_failing_closed(self):
        fo = sluice.Decision(allowed=True, failed_open=True, error=sluice.DaemonDown("down"), cause="daemon_down")
        mw = WSGIMiddleware(app, FakeClient(fo), default=[Limit("api")])
        st, hs, _ = wsgi_call(mw)
        self.assertEqual((st, hs.get("X-Reached")), (200, "yes"))
        self.assertNotIn("X-Ratelimit-Limit", hs)
        self.assertEqual(mw.limiter.events.fail_open.totals()["daemon_down"], 1)
        fc = sluice.Decision(allowed=False, failed_open=True, error=sluice.DaemonDown("down"), cause="daemon_down")
        st, hs, _ = wsgi_call(WSGIMiddleware(app, FakeClient(fc, fail_closed=True), default=[Limit("api")]))
        self.assertEqual(st, 503)
        self.assertIn(int(hs["Retry-After"]), range(1, 6))

    def test_invalid_and_unknown_rules(self):
        inv = sluice.Decision(allowed=False, invalid=True, error=sluice.InvalidRequest("cost"))
        mw = WSGIMiddleware(app, FakeClient(inv), default=[Limit("api", cost=9)])
        st, hs, body = wsgi_call(mw)
        self.assertEqual(st, 500)
        self.assertEqual(mw.limiter.events.invalid, 1)
        unk = decision_of(True, [result(3, 0, 0, 0, 0, 0)])
        mw = WSGIMiddleware(app, FakeClient(unk), default=[Limit("nope")])
        st, hs, _ = wsgi_call(mw)
        self.assertEqual((st, hs.get("X-Ratelimit-Limit")), (200, None))
        self.assertEqual(mw.limiter.events.unknown_rule, 1)

    def test_routes_and_identity(self):
        d = decision_of(True, [result(0, 10, 7, 0, 1, 60)])
        c = FakeClient(d)
        mw = WSGIMiddleware(app, c, identity=Identity(client_ip=True, trusted_proxies=["10.0.0.0/8"]),
                            routes=[Route("/api/", [Limit("api")]),
                                    Route("POST /api/upload", [Limit("upload", cost=5), Limit("uploads", per_route=True)]),
                                    Route("/health", [])])
        wsgi_call(mw, "/api/x", remote="10.1.1.1", headers={"X-Forwarded-For": "198.51.100.9, 10.2.2.2"})
        self.assertEqual([(k.rule, k.key, k.cost) for k in c.asked[-1]], [("api", "ip:198.51.100.9", 1)])
        wsgi_call(mw, "/api/upload", method="POST", remote="203.0.113.5",
                  headers={"X-Forwarded-For": "1.2.3.4"})  # an untrusted peer's header is ignored
        self.assertEqual([(k.rule, k.key, k.cost) for k in c.asked[-1]],
                         [("upload", "ip:203.0.113.5", 5), ("uploads", "route:POST /api/upload", 1)])
        n = len(c.asked)
        st, _, _ = wsgi_call(mw, "/health")
        self.assertEqual((st, len(c.asked)), (200, n), "a route without limits is not limited")
        st, _, _ = wsgi_call(mw, "/other")
        self.assertEqual(len(c.asked), n, "no default: unmatched requests pass unlimited")
        fwd = Identity(client_ip=True, trusted_proxies=["10.0.0.0/8"], forwarded_header="Forwarded")
        self.assertEqual(str(fwd.client_addr({"forwarded": ['for="[2001:db8::1]:4711"']}, "10.1.1.1:80")),
                         "2001:db8::1")
        self.assertEqual(Identity().key({}, "", {}), "anonymous")


async def asgi_app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x-reached", b"yes")]})
    await send({"type": "http.response.body", "body": b"hello"})


async def asgi_call(mw, path="/", headers=()):
    scope = {"type": "http", "method": "GET", "path": path, "client": ("192.0.2.9", 5555),
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers]}
    sent = []

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(m):
        sent.append(m)
    await mw(scope, receive, send)
    start = sent[0]
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, b"".join(
        m.get("body", b"") for m in sent[1:])


class RealDaemonMiddlewareTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        binary()

    def setUp(self):
        self.d = Daemon().start()
        self.addCleanup(self.d.close)

    def test_wsgi_shaping_holds_requests_over_the_limit(self):
        c = sluice.Client.dial(socket_path=self.d.sock, timeout=5, logger=capture_logger("shape")[0])
        self.addCleanup(c.close)
        route = Route("/paced", [Limit("paced", per_route=True)], shape=Shape(max_wait=2.0, max_queue=4))
        mw = WSGIMiddleware(app, c, routes=[route])
        t0 = time.monotonic()
        codes = [wsgi_call(mw, "/paced")[0] for _ in range(12)]
        # 10 at once (the burst), then two more, each held for its turn (100 ms apart).
        self.assertEqual(codes, [200] * 12)
        self.assertGreaterEqual(time.monotonic() - t0, 0.15)
        self.assertEqual(route._held, 0)

    def test_wsgi_against_sluiced(self):
        c = sluice.Client.dial(socket_path=self.d.sock, timeout=5, logger=capture_logger("wsgi")[0])
        self.addCleanup(c.close)
        mw = WSGIMiddleware(app, c, identity=Identity(header="X-API-Key"), default=[Limit("api")])
        got = [wsgi_call(mw, headers={"X-API-Key": "w1"}) for _ in range(4)]
        self.assertEqual([g[0] for g in got], [200, 200, 200, 429])
        self.assertEqual([g[1]["X-Ratelimit-Remaining"] for g in got], ["2", "1", "0", "0"])
        self.assertEqual(got[0][1]["RateLimit-Policy"], '"api";q=3;w=3600')
        self.assertGreater(int(got[3][1]["Retry-After"]), 1000)
        self.assertEqual(got[3][1]["X-Ratelimit-Reset"], got[3][1]["Retry-After"])
        self.assertEqual(wsgi_call(mw, headers={"X-API-Key": "w2"})[0], 200, "another key has its own bucket")

    def test_asgi_against_sluiced(self):
        async def main():
            c = await AsyncClient.create(socket_path=self.d.sock, timeout=5, logger=capture_logger("asgi")[0])
            try:
                mw = ASGIMiddleware(asgi_app, c, identity=Identity(header="X-API-Key"), default=[Limit("api")])
                got = [await asgi_call(mw, headers=[("X-API-Key", "a1")]) for _ in range(4)]
                self.assertEqual([g[0] for g in got], [200, 200, 200, 429])
                self.assertEqual(got[0][1]["x-reached"], "yes")
                self.assertEqual(got[0][1]["x-ratelimit-limit"], "3")
                self.assertEqual(got[2][1]["ratelimit"].split(";")[1], "r=0")
                self.assertGreater(int(got[3][1]["retry-after"]), 1000)
                self.assertEqual(json.loads(got[3][2])["status"], 429)
            finally:
                await c.close()
            # A sync Client works in ASGI too (its calls are bounded by its deadline).
            sc = sluice.Client.dial(socket_path=self.d.sock, timeout=5, logger=capture_logger("asgi-sync")[0])
            try:
                mw = ASGIMiddleware(asgi_app, sc, identity=Identity(header="X-API-Key"), default=[Limit("api")])
                self.assertEqual((await asgi_call(mw, headers=[("X-API-Key", "a2")]))[0], 200)
            finally:
                sc.close()
        asyncio.run(main())


if __name__ == "__main__":
    unittest.main()
