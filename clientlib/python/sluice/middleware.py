"""WSGI and ASGI middleware that limit requests with a Sluice client and
write the same response headers as Go's clientlib/httplimit:

- admitted: ``X-Ratelimit-Limit``, ``X-Ratelimit-Remaining`` (capped at the
  limit), ``X-Ratelimit-Reset`` (seconds until the bucket is full; when
  refused, until the request could pass), ``X-Ratelimit-Retry-After``, and
  the draft IETF ``RateLimit-Policy: "rule";q=LIMIT;w=PERIOD_S`` and
  ``RateLimit: "rule";r=REMAINING;t=RESET_S``;
- throttled: the same, and 429 with ``Retry-After`` (at least 1) and an
  RFC 9457 problem-details JSON body;
- undecided: passed without limit headers (fail open), or 503 with a
  ``Retry-After`` of 1 to 5 s when the client fails closed;
- refused as invalid (a misconfigured route, or an unknown rule under
  ``unknown_rule: deny``): 500, "rate limit misconfigured", not served;
- an unknown rule the daemon admits: passed without limit headers.

Undecided, invalid and unknown-rule requests are counted and logged
rate-limited (``events``), as httplimit's Events does.
"""

import asyncio
import inspect
import ipaddress
import json
import math
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

from .decision import Check
from .errors import FailOpenLog, default_logger
from .protocol import STATUS_UNKNOWN_RULE, STATUS_UNKNOWN_RULE_ALLOWED

HEADERS_LEGACY = 1
HEADERS_DRAFT = 2
HEADERS_ALL = HEADERS_LEGACY | HEADERS_DRAFT
HEADERS_NONE = 0


@dataclass
class Limit:
    """One limit a request is checked against. ``per_route`` keys it by the
    route pattern, shared by all clients, instead of by the client."""
    rule: str
    cost: int = 1
    per_route: bool = False


@dataclass
class Shape:
    """Hold requests over the limit until their turn instead of refusing
    them (leaky-bucket behaviour): at most ``max_wait`` seconds, at most
    ``max_queue`` requests held at once on the route (past it, requests are
    decided without waiting)."""
    max_wait: float
    max_queue: int


@dataclass
class Route:
    """Limits for the requests a pattern matches: ``"/exact"``, ``"/prefix/"``
    (a trailing slash matches the subtree), optionally with a method:
    ``"POST /upload"``. The longest matching path wins; a pattern naming the
    request's method beats one without. ``shape``, if set, holds requests
    over the limit rather than refusing them."""
    pattern: str
    limits: List[Limit]
    shape: Optional[Shape] = None

    def __post_init__(self):
        if self.shape is not None and (self.shape.max_wait <= 0 or self.shape.max_queue <= 0):
            raise ValueError("sluice middleware: route %s: shaping needs a positive max wait and queue" % self.pattern)
        self._held = 0
        self._lock = threading.Lock()

    def hold(self):
        """Take a place in the shaping queue; False when it is full."""
        with self._lock:
            if self._held >= self.shape.max_queue:
                return False
            self._held += 1
            return True

    def release(self):
        with self._lock:
            self._held -= 1


@dataclass
class Identity:
    """How a client's key is built; the first source that yields a value wins:
    ``header`` (an API key header), ``user`` (a callable on the WSGI environ
    or ASGI scope), the client's address (``client_ip``). A forwarding header
    (``X-Forwarded-For`` or ``Forwarded``, one of them) is believed only from
    peers in ``trusted_proxies``, read right to left."""
    header: str = ""
    user: Optional[Callable] = None
    client_ip: bool = False
    trusted_proxies: Sequence[str] = ()
    forwarded_header: str = "X-Forwarded-For"
    anonymous: str = "anonymous"

    def __post_init__(self):
        self._nets = [ipaddress.ip_network(p.strip(), strict=False) for p in self.trusted_proxies]
        fh = (self.forwarded_header or "X-Forwarded-For").lower()
        if fh not in ("x-forwarded-for", "forwarded"):
            raise ValueError("forwarded header %r: want X-Forwarded-For or Forwarded" % self.forwarded_header)
        self._forwarded = fh == "forwarded"

    def key(self, headers, remote, request):
        """The key for a request: ``headers`` maps lower-case names to lists
        of values, ``remote`` is the peer address, ``request`` the environ or scope."""
        if self.header:
            v = headers.get(self.header.lower())
            if v and v[0]:
                return "key:" + v[0]
        if self.user is not None:
            u = self.user(request)
            if u:
                return "user:" + u
        if self.client_ip:
            a = self.client_addr(headers, remote)
            if a is not None:
                return "ip:" + str(a)
        return self.anonymous or "anonymous"

    def _trusted(self, a):
        return any(a in n for n in self._nets)

    def client_addr(self, headers, remote):
        """The client's address: the peer, or behind trusted proxies the
        nearest untrusted address in the forwarding chain."""
        peer = _parse_host(remote)
        if peer is None:
            return None
        if not self._trusted(peer):
            return peer
        chain = []
        if self._forwarded:
            for line in headers.get("forwarded", []):
                for elem in line.split(","):
                    for pair in elem.split(";"):
                        k, _, v = pair.strip().partition("=")
                        if _ and k.lower() == "for":
                            chain.append(v.strip('"'))
        else:
            for line in headers.get("x-forwarded-for", []):
                chain.extend(a.strip() for a in line.split(","))
        for hop in reversed(chain):
            a = _parse_host(hop)
            if a is None:
                return peer  # garbage in the chain: stop believing it
            if not self._trusted(a):
                return a
            peer = a
        return peer


def _parse_host(s):
    s = (s or "").strip()
    for cand in (s.strip("[]"), s.rsplit(":", 1)[0].strip("[]") if ":" in s else None):
        if cand:
            try:
                a = ipaddress.ip_address(cand)
                return a.ipv4_mapped or a if a.version == 6 else a
            except ValueError:
                continue
    return None


class Events:
    """Counts and logs (rate-limited) the requests not limited in the
    ordinary way: undecided (``fail_open``/``fail_closed`` by cause), invalid
    (answered 500), unknown rules (passed unlimited)."""

    def __init__(self, logger=None, interval=10.0, now=time.monotonic):
        logger = logger or default_logger
        self.fail_open = FailOpenLog(logger, interval, False, now)
        self.fail_closed = FailOpenLog(logger, interval, True, now)
        self._logger, self._interval, self._now = logger, interval, now
        self._lock = threading.Lock()
        self.invalid = 0
        self.unknown_rule = 0
        self._last = {}
        self._unlogged = {}

    def _every(self, kind, msg, *args):
        with self._lock:
            self._unlogged[kind] = self._unlogged.get(kind, 0) + 1
            now, last = self._now(), self._last.get(kind)
            if last is not None and now - last < self._interval:
                return
            self._last[kind] = now
            n, self._unlogged[kind] = self._unlogged[kind], 0
        self._logger.warning(msg + " count=%d interval=%gs", *args, n, self._interval)

    def record_invalid(self, rules, err):
        with self._lock:
            self.invalid += 1
        self._every("invalid", "sluice: rate limit misconfigured; request refused with 500: rules=%s error=%s", rules, err)

    def record_unknown_rule(self, rule):
        with self._lock:
            self.unknown_rule += 1
        self._every("unknown", "sluice: rule unknown to the daemon; request passed unlimited: rule=%s", rule)


def _ceil_seconds(s):
    return 0 if s <= 0 else int(math.ceil(s - 1e-12))


def _sf_string(s):
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= ord(ch) < 0x7F:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _policy_name(d, checks):
    if 0 <= d.deciding < len(checks):
        return checks[d.deciding].rule
    return "sluice"


def rate_limit_headers(d, checks, families=HEADERS_ALL):
    """The rate-limit headers httplimit writes for a decision, as (name, value) pairs."""
    if d.limit <= 0:
        return []
    remaining = min(max(d.remaining, 0), d.limit)
    reset = d.reset_after if d.allowed else d.retry_after
    out = []
    if families & HEADERS_LEGACY:
        out += [("X-Ratelimit-Limit", str(d.limit)), ("X-Ratelimit-Remaining", str(remaining)),
                ("X-Ratelimit-Reset", str(_ceil_seconds(reset))),
                ("X-Ratelimit-Retry-After", str(_ceil_seconds(d.retry_after)))]
    if families & HEADERS_DRAFT and d.period > 0:
        name = _sf_string(_policy_name(d, checks))
        out += [("RateLimit-Policy", "%s;q=%d;w=%d" % (name, d.limit, _ceil_seconds(d.period))),
                ("RateLimit", "%s;r=%d;t=%d" % (name, remaining, _ceil_seconds(reset)))]
    return out


def _problem(status, title, detail, retry_after=0, rule=""):
    p = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if retry_after:
        p["retry_after"] = retry_after
    if rule:
        p["rule"] = rule
    return (json.dumps(p) + "\n").encode()


@dataclass
class Response:
    """What the limiter says about a request: ``status`` 0 means pass it to
    the application, adding ``headers``; otherwise answer with ``status``,
    ``headers`` and ``body``."""
    status: int
    headers: list = field(default_factory=list)
    body: bytes = b""


class Limiter:
    """What WSGI and ASGI middleware share: route matching, identity,
    deciding, and the answer. ``client`` is a sluice.Client (or AsyncClient
    for ASGI); ``routes`` are matched most specific first; ``default``
    applies to requests no route matches (empty: they pass unlimited)."""

    def __init__(self, client, identity=None, routes=(), default=(), headers=HEADERS_ALL, events=None):
        self.client = client
        self.identity = identity or Identity()
        self.routes = []
        for r in routes:
            method, _, path = r.pattern.partition(" ") if " " in r.pattern else ("", "", r.pattern)
            self.routes.append((method.upper(), path, r))
        self.routes.sort(key=lambda t: (len(t[1]), bool(t[0])), reverse=True)
        for where, limits in [("default", default)] + [("route " + r.pattern, r.limits) for r in routes]:
            for i, lim in enumerate(limits):
                if not lim.rule:
                    raise ValueError("sluice middleware: %s limit %d: rule is empty" % (where, i))
                if lim.cost < 0:
                    raise ValueError("sluice middleware: %s limit %d: cost %d is negative" % (where, i, lim.cost))
        self.default = list(default)
        self.headers = headers
        self.events = events or Events()

    def checks(self, method, path, headers, remote, request):
        """The checks a request must pass and the matched Route (None for the default)."""
        limits, route = self.default, None
        for m, p, r in self.routes:
            if m and m != method.upper():
                continue
            if path == p or (p.endswith("/") and path.startswith(p)):
                limits, route = r.limits, r
                break
        if not limits:
            return [], route
        who = self.identity.key(headers, remote, request)
        pattern = route.pattern if route else ""
        return [Check(lim.rule, "route:" + pattern if lim.per_route else who, max(lim.cost, 1))
                for lim in limits], route

    @staticmethod
    def shaped(route, checks):
        """Whether to ask for shaping: the route shapes and its queue has
        room (the caller must release() the route after holding)."""
        if route is None or route.shape is None or not route.hold():
            return False
        for c in checks:
            c.max_delay = route.shape.max_wait
        return True

    def answer(self, d, checks, fail_closed):
        """The Response for a decision on checks."""
        if d.invalid or (not d.failed_open and not d.allowed and d.status == STATUS_UNKNOWN_RULE):
            rules = ",".join(c.rule for c in checks)
            self.events.record_invalid(rules, d.error)
            return Response(500, [("Content-Type", "application/problem+json"), ("Cache-Control", "no-store")],
                            _problem(500, "Rate limit misconfigured",
                                     "the rate limit of this route (rule %s) is misconfigured; the request was not served"
                                     % json.dumps(rules), rule=rules))
        if d.failed_open and d.allowed:
            self.events.fail_open.record(d.error)
            return Response(0)
        if d.failed_open:
            self.events.fail_closed.record(d.error)
            ra = 1 + random.randrange(5)
            return Response(503, [("Retry-After", str(ra)), ("Content-Type", "application/problem+json"),
                                  ("Cache-Control", "no-store")],
                            _problem(503, "Service Unavailable",
                                     "the rate limiter is unavailable and this service fails closed; retry in %d s" % ra,
                                     retry_after=ra))
        if d.status == STATUS_UNKNOWN_RULE_ALLOWED:
            self.events.record_unknown_rule(_policy_name(d, checks))
            return Response(0)
        hs = rate_limit_headers(d, checks, self.headers)
        if d.allowed:
            return Response(0, hs)
        retry = max(_ceil_seconds(d.retry_after), 1)
        rule = checks[d.denied].rule if 0 <= d.denied < len(checks) else ""
        detail = ("rate limit %s exceeded; retry in %d s" % (json.dumps(rule), retry) if rule
                  else "rate limit exceeded; retry in %d s" % retry)
        return Response(429, hs + [("Retry-After", str(retry)), ("Content-Type", "application/problem+json")],
                        _problem(429, "Too Many Requests", detail, retry_after=retry, rule=rule))


_REASONS = {429: "Too Many Requests", 500: "Internal Server Error", 503: "Service Unavailable"}


class WSGIMiddleware:
    """Limits the requests of a WSGI application with a sluice.Client.
    Keyword arguments are those of :class:`Limiter`."""

    def __init__(self, app, client, **kw):
        self.app = app
        self.limiter = Limiter(client, **kw)

    def __call__(self, environ, start_response):
        headers = {}
        for k, v in environ.items():
            if k.startswith("HTTP_"):
                headers.setdefault(k[5:].replace("_", "-").lower(), []).append(v)
        checks, route = self.limiter.checks(environ.get("REQUEST_METHOD", "GET"),
                                             environ.get("PATH_INFO", "/") or "/",
                                             headers, environ.get("REMOTE_ADDR", ""), environ)
        if not checks:
            return self.app(environ, start_response)
        held = self.limiter.shaped(route, checks)
        try:
            d = self.limiter.client.allow_all(checks)
            resp = self.limiter.answer(d, checks, self.limiter.client.opts.fail_closed)
            if not resp.status and d.delay > 0:
                time.sleep(d.delay)  # a shaped check reserved a later turn: wait it out
        finally:
            if held:
                route.release()
        if resp.status:
            start_response("%d %s" % (resp.status, _REASONS[resp.status]),
                           resp.headers + [("Content-Length", str(len(resp.body)))])
            return [resp.body]
        if not resp.headers:
            return self.app(environ, start_response)

        def start(status, app_headers, exc_info=None):
            names = {n.lower() for n, _ in resp.headers}
            return start_response(status, [h for h in app_headers if h[0].lower() not in names] + resp.headers,
                                  exc_info)
        return self.app(environ, start)


class ASGIMiddleware:
    """Limits the HTTP requests of an ASGI application with a
    sluice.aio.AsyncClient (or a sluice.Client, whose calls are bounded by
    its deadline). An AsyncClient not yet started is started by the first
    request (which fails open while it connects, like any call made before
    the first connection). Other scopes (lifespan, websocket) pass through."""

    def __init__(self, app, client, **kw):
        self.app = app
        self.limiter = Limiter(client, **kw)
        self._async = inspect.iscoroutinefunction(client.allow_all)

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        headers = {}
        for k, v in scope.get("headers", []):
            headers.setdefault(k.decode("latin-1").lower(), []).append(v.decode("latin-1"))
        client = scope.get("client") or ("", 0)
        checks, route = self.limiter.checks(scope.get("method", "GET"), scope.get("path", "/"), headers,
                                            client[0] or "", scope)
        if not checks:
            return await self.app(scope, receive, send)
        if self._async and getattr(self.limiter.client, "_task", True) is None:
            await self.limiter.client.start()  # an AsyncClient made outside the loop starts with the first request
        held = self.limiter.shaped(route, checks)
        try:
            if self._async:
                d = await self.limiter.client.allow_all(checks)
            else:
                d = self.limiter.client.allow_all(checks)
            resp = self.limiter.answer(d, checks, self.limiter.client.opts.fail_closed)
            if not resp.status and d.delay > 0:
                await asyncio.sleep(d.delay)  # a shaped check reserved a later turn: wait it out
        finally:
            if held:
                route.release()
        if resp.status:
            hs = resp.headers + [("Content-Length", str(len(resp.body)))]
            await send({"type": "http.response.start", "status": resp.status,
                        "headers": [(n.lower().encode(), v.encode()) for n, v in hs]})
            await send({"type": "http.response.body", "body": resp.body})
            return
        if not resp.headers:
            return await self.app(scope, receive, send)
        extra = [(n.lower().encode(), v.encode()) for n, v in resp.headers]
        names = {n for n, _ in extra}

        async def send_with_headers(msg):
            if msg["type"] == "http.response.start":
                msg = dict(msg)
                msg["headers"] = [h for h in msg.get("headers", []) if h[0].lower() not in names] + extra
            await send(msg)
        await self.app(scope, receive, send_with_headers)
