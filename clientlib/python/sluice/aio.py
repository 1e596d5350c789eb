"""The asyncio variant: an AsyncClient shares its connections among the
tasks of one event loop, with the same promises as Client (deadline per
call, fail open or closed and counted, background reconnect with jittered
backoff, peer-credential check, REPORT, bounded keys, multi-checks)."""

import asyncio
import itertools
import struct
import time

from . import protocol as P
from .client import Inspection, Options, YOUNG_DEATH, MAX_QUEUED, _Core, handshake_error
from .decision import Check
from .errors import (ClientClosed, DaemonDown, InvalidRequest, ProtocolViolation, ReachError, ServerError,
                     SluiceError, Timeout)
from .reach import explain_connect, verify_daemon


class _AConn:
    def __init__(self, client, reader, writer, welcome):
        self.client, self.reader, self.writer, self.welcome = client, reader, writer, welcome
        self.born = time.monotonic()
        self.life = None
        self.dead = False
        self.ids = itertools.count(1)
        self.pending = {}
        self.stall_since, self.stall_size = None, 0  # when the write buffer last stopped draining
        self.task = asyncio.get_running_loop().create_task(self._read_loop())

    def _check_stall(self):
        """Fail the connection when its write buffer has not drained for
        max(timeout, dial_timeout, 1 s): the daemon no longer reads."""
        size = self.writer.transport.get_write_buffer_size()
        now = time.monotonic()
        if size == 0 or self.stall_since is None or size < self.stall_size:
            self.stall_since, self.stall_size = (None, 0) if size == 0 else (now, size)
            return
        self.stall_size = size
        o = self.client.opts
        stall = max(o.timeout, o.dial_timeout, 1.0)
        if now - self.stall_since > stall:
            err = DaemonDown("write: the daemon did not read its socket within %gs" % stall)
            self.fail(err)
            raise err

    def request(self, make_frame):
        req_id = next(self.ids)
        data = make_frame(req_id)
        self.client._check_frame_size(data, self.welcome)
        if self.dead:
            raise DaemonDown("connection lost")
        self._check_stall()
        if self.writer.transport.get_write_buffer_size() >= MAX_QUEUED:
            raise DaemonDown("the daemon is not reading its socket (%d bytes queued)" % MAX_QUEUED)
        fut = asyncio.get_running_loop().create_future()
        self.pending[req_id] = fut
        if self.welcome["version"] >= 2:
            data = self.client._report_frame() + data
        self.writer.write(data)  # never blocks: the transport buffers it
        return req_id, fut

    async def _read_loop(self):
        try:
            while True:
                hdr = await self.reader.readexactly(4)
                (n,) = struct.unpack(">I", hdr)
                if n == 0 or n > P.MAX_REPLY_FRAME:
                    raise ProtocolViolation("sluiced protocol error: reply frame of %d bytes" % n)
                body = await self.reader.readexactly(n)
                try:
                    m = P.decode(body)
                except P.ProtocolError as e:
                    raise ProtocolViolation("sluiced protocol error: %s" % e) from None
                if m["type"] in ("RESULT", "BALANCE"):
                    fut = self.pending.pop(m["id"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(m)
                elif m["type"] == "ERROR":
                    e = ServerError(m["id"], m["code"], m["message"].decode("utf-8", "replace"))
                    if m["id"] == 0:
                        raise DaemonDown("sluiced closed the connection: %s" % e)
                    fut = self.pending.pop(m["id"], None)
                    if fut is not None and not fut.done():
                        fut.set_exception(e)
                else:
                    raise ProtocolViolation("sluiced protocol error: unexpected message %s" % m["type"])
        except asyncio.CancelledError:
            self.fail(ClientClosed("client closed"))
        except (asyncio.IncompleteReadError, OSError) as e:
            self.fail(DaemonDown("read: %s" % (e or "the daemon closed the connection")))
        except SluiceError as e:
            self.fail(e)

    def fail(self, err):
        if self.dead:
            return
        self.dead = True
        self.life = time.monotonic() - self.born
        self.writer.transport.abort()  # not close(): that would wait to flush what a dead daemon will never read
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(err)
        if not isinstance(err, ClientClosed):
            self.client._conn_lost(err)


class AsyncClient(_Core):
    """asyncio client; make it inside the running loop (``await
    AsyncClient.create(...)`` or ``AsyncClient(...)`` then ``await
    client.start()``) and share it among that loop's tasks. Keyword
    arguments are the fields of :class:`sluice.Options`."""

    def __init__(self, options=None, **kw):
        opts = options or Options(**kw)
        self.path_why = opts.fill()
        self.opts = opts
        self._init_core(opts)
        self._slots = [None] * opts.conns
        self._rr = itertools.count()
        self._up = False
        self._closed = False
        self._kick = None
        self._task = None
        self._attempts = 0
        self._down_err = ReachError(opts.socket_path, "not connected yet",
                                    fix="the client is still making its first connection")

    @classmethod
    async def create(cls, wait=True, **kw):
        """Make and start a client; with wait, wait up to dial_timeout for
        its first connection attempt."""
        c = cls(**kw)
        await c.start()
        if wait:
            deadline = time.monotonic() + c.opts.dial_timeout + 1.0
            while not c._up and c._attempts == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.002)
        return c

    async def start(self):
        """Start the background reconnect task."""
        if self._task is None:
            self._kick = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._reconnect_loop())
            self._kick.set()

    @property
    def up(self):
        return self._up

    async def allow(self, rule, key, cost=1, timeout=None):
        """Whether key may make a request costing cost tokens under rule."""
        return await self.allow_all([Check(rule, key, cost)], timeout=timeout)

    async def allow_all(self, checks, timeout=None):
        """Several limits at once, all or nothing (see Client.allow_all)."""
        bad = self._validate(checks)
        if bad is not None:
            return self._refuse_invalid(bad)
        if self._closed:
            return self._undecided(ClientClosed("client closed"))
        cn = self._pick() if self._up else None
        if cn is None:
            return self._undecided(self._down_err)
        t = min(self.opts.timeout, timeout if timeout is not None else self.opts.timeout)
        req_id = None
        try:
            wire = self._wire_checks(checks, cn.welcome)
            req_id, fut = cn.request(lambda i: P.encode_check(i, wire))
            rep = await asyncio.wait_for(fut, t)
        except asyncio.TimeoutError:
            cn.pending.pop(req_id, None)
            return self._undecided(Timeout("sluiced did not answer in time"))
        except asyncio.CancelledError:
            if req_id is not None:
                cn.pending.pop(req_id, None)
            self._fail_log.record(asyncio.CancelledError())
            raise
        except InvalidRequest as e:
            return self._refuse_invalid(e)
        except ServerError as e:
            if self._is_invalid_reply(e):
                return self._refuse_invalid(InvalidRequest("invalid rate-limit request: %s" % e))
            return self._undecided(e)
        except (DaemonDown, Timeout, ProtocolViolation, ClientClosed) as e:
            return self._undecided(e)
        return self._decided(rep)

    async def inspect(self, rule, key, timeout=None):
        """Read a key's bucket without charging it; raises on failure."""
        if self._closed:
            raise ClientClosed("client closed")
        cn = self._pick()
        if cn is None:
            raise self._down_err
        t = min(self.opts.timeout, timeout if timeout is not None else self.opts.timeout)
        k = P.bounded_key(key, cn.welcome["max_key_len"])
        req_id, fut = cn.request(lambda i: P.encode_inspect(i, rule, k))
        try:
            m = await asyncio.wait_for(fut, t)
        except asyncio.TimeoutError:
            cn.pending.pop(req_id, None)
            raise Timeout("sluiced did not answer in time") from None
        return Inspection(m["known"], m["balance"], m["limit"], m["burst"])

    async def close(self):
        """Close the connections and stop reconnecting; returns within
        max(dial_timeout, 1 s) + 1 s. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await self._stop_reconnecting()
        finally:
            for i, cn in enumerate(self._slots):
                self._slots[i] = None
                if cn is not None:
                    cn.fail(ClientClosed("client closed"))
                    cn.task.cancel()
            self._up = False

    async def _stop_reconnecting(self):
        """Cancel the reconnect task and wait, bounded, until it has left.
        Python < 3.12's asyncio.wait_for returns its inner result when a
        cancel lands in the step that result arrives (CPython gh-86296), so
        one cancel may be swallowed: the task also leaves at its next step
        once it sees _closed, the kick makes sure that step comes, and the
        cancel is repeated until the task is done."""
        task = self._task
        if task is None:
            return
        deadline = time.monotonic() + max(self.opts.dial_timeout, 1.0) + 1.0
        while not task.done():
            left = deadline - time.monotonic()
            if left <= 0:
                return  # cancelled and closed: it leaves at its next step
            task.cancel()
            self._kick.set()
            await asyncio.wait({task}, timeout=min(left, 0.05))
        if not task.cancelled() and task.exception() is not None:
            self.opts.logger.error("sluice: the reconnect task failed: %r", task.exception())

    async def __aenter__(self):
        await self.start()
        return self

    async def __aexit__(self, *exc):
        await self.close()

    def _pick(self):
        n = len(self._slots)
        start = next(self._rr)
        for i in range(n):
            cn = self._slots[(start + i) % n]
            if cn is not None and not cn.dead:
                return cn
        return None

    def _conn_lost(self, err):
        self._down_err = ReachError(self.opts.socket_path, "connection lost", str(err),
                                    "reconnecting with backoff; if this repeats, see sluiced's log")
        if self._pick() is None:
            self._up = False
        if self._kick is not None:
            self._kick.set()

    async def _dial(self):
        o = self.opts
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(o.socket_path, limit=P.MAX_REPLY_FRAME + 4), o.dial_timeout)
        except asyncio.TimeoutError:
            raise ReachError(o.socket_path, "connect timed out", fix="the daemon is not accepting") from None
        except OSError as e:
            raise explain_connect(o.socket_path, self.path_why, e) from None
        try:
            # Nothing, not even HELLO, goes to a process that is not the daemon.
            verify_daemon(writer.get_extra_info("socket"), o.socket_path, o.daemon_uids)
            writer.write(P.encode_hello(P.PROTOCOL_VERSION, o.name))

            async def welcome():
                (n,) = struct.unpack(">I", await reader.readexactly(4))
                if n == 0 or n > P.MAX_REPLY_FRAME:
                    raise ProtocolViolation("handshake: reply frame of %d bytes" % n)
                return P.decode(await reader.readexactly(n))
            m = await asyncio.wait_for(welcome(), o.dial_timeout)
            if m["type"] == "ERROR":
                raise ServerError(m["id"], m["code"], m["message"].decode("utf-8", "replace"))
            if m["type"] != "WELCOME":
                raise ProtocolViolation("handshake: got %s, want WELCOME" % m["type"])
        except asyncio.CancelledError:
            writer.close()
            raise
        except (OSError, SluiceError, P.ProtocolError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            writer.close()
            if isinstance(e, asyncio.TimeoutError):
                e = Timeout("handshake timed out")
            raise handshake_error(o.socket_path, o.dial_timeout, e) from None
        return _AConn(self, reader, writer, m)

    async def _reconnect_loop(self):
        o = self.opts
        backoff, not_before, wait = o.reconnect_min, 0.0, None
        replacing = [False] * len(self._slots)
        while not self._closed:  # close() cancels too, but a cancel may be swallowed (see _stop_reconnecting)
            try:
                await asyncio.wait_for(self._kick.wait(), wait)
            except asyncio.TimeoutError:
                pass
            self._kick.clear()
            if self._closed:
                return
            wait = None
            now = time.monotonic()
            young = old = False
            for i, cn in enumerate(self._slots):
                if cn is None or not cn.dead:
                    continue
                self._slots[i] = None
                replacing[i] = True
                if cn.life is not None and cn.life < YOUNG_DEATH:
                    young = True
                else:
                    old = True
            if young:
                w, backoff = self._backoff_wait(backoff)
                not_before, wait = now + w, w
                continue
            if old:
                backoff, not_before = o.reconnect_min, 0.0
            if now < not_before:
                wait = not_before - now
                continue
            failed = False
            for i in range(len(self._slots)):
                if self._slots[i] is not None:
                    continue
                try:
                    cn = await self._dial()
                except ReachError as e:
                    self._unreachable(e)
                    self._attempts += 1
                    failed = True
                    break
                if self._closed:
                    cn.fail(ClientClosed("client closed"))
                    cn.task.cancel()
                    return
                self._slots[i] = cn
                if replacing[i]:
                    self._count("reconnects")
                    replacing[i] = False
                self._up = True
                self._attempts += 1
                self._reachable()
            if failed:
                w, backoff = self._backoff_wait(backoff)
                not_before, wait = time.monotonic() + w, w
