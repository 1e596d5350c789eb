"""The thread-safe client: many threads share one Client, which multiplexes
them over a few persistent connections, pipelining requests and matching
replies by id."""

import errno
import itertools
import os
import random
import select
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass

from . import protocol as P
from .decision import Check, Decision, Result, decision_of
from .errors import (ClientClosed, DaemonDown, FailOpenLog, InvalidRequest, ProtocolViolation, ReachError,
                     ServerError, Timeout, cause_of, default_logger)
from .reach import connect_unix, default_daemon_uids, explain_connect, socket_path_choice, verify_daemon

#: A connection that dies sooner than this after its handshake counts as a failed dial.
YOUNG_DEATH = 1.0
#: Bytes callers may queue behind a write the daemon does not take; beyond it calls fail at once.
MAX_QUEUED = 1 << 20


@dataclass
class Stats:
    """A client's outcomes since it was made."""
    decisions: int = 0      # calls the daemon decided
    denied: int = 0         # of those, denied
    failed_open: int = 0    # calls not decided and allowed
    failed_closed: int = 0  # calls not decided and denied (fail_closed)
    timeouts: int = 0       # of the undecided, those that hit the deadline
    reconnects: int = 0     # connections made to replace ones that died
    invalid: int = 0        # calls refused as invalid requests
    untrusted: int = 0      # connections refused: the socket's server is not a trusted daemon


@dataclass
class Inspection:
    """A key's bucket as INSPECT reads it."""
    known: bool
    balance: float
    limit: int
    burst: int


@dataclass
class Options:
    """Configuration shared by Client and AsyncClient; the defaults are the Go client's.
    Durations are in seconds."""
    socket_path: str = ""
    timeout: float = 0.005
    fail_closed: bool = False
    conns: int = 2
    dial_timeout: float = 1.0
    reconnect_min: float = 0.010
    reconnect_max: float = 2.0
    name: str = ""
    jitter: object = None      # callable returning a float in [0, 1)
    logger: object = None      # logging.Logger; default logging.getLogger("sluice")
    log_interval: float = 10.0
    daemon_uids: object = None  # list of trusted uids; default $SLUICE_DAEMON_UIDS or root and self

    def fill(self):
        """Fill defaults; returns why the socket path is what it is."""
        why = "set by socket_path"
        if not self.socket_path:
            self.socket_path, why = socket_path_choice()
        if self.timeout <= 0:
            self.timeout = 0.005
        if self.conns <= 0:
            self.conns = 2
        if self.dial_timeout <= 0:
            self.dial_timeout = 1.0
        if self.reconnect_min <= 0:
            self.reconnect_min = 0.010
        if self.reconnect_max < self.reconnect_min:
            self.reconnect_max = max(2.0, self.reconnect_min)
        if not self.name:
            self.name = os.path.basename(sys.argv[0] or "") or "python"
        if self.jitter is None:
            self.jitter = random.random
        if self.logger is None:
            self.logger = default_logger
        if not self.daemon_uids:
            try:
                self.daemon_uids = default_daemon_uids()
            except ValueError as e:
                self.daemon_uids = [0]
                self.logger.warning("sluice: ignoring a malformed trusted-daemon list; trusting root only: %s", e)
        else:
            self.daemon_uids = list(self.daemon_uids)
        return why


class _Core:
    """What Client and AsyncClient share: counting, deciding, reporting."""

    def _init_core(self, opts):
        self._stats_lock = threading.Lock()
        self._stats = Stats()
        self._reported_open = 0
        self._reported_closed = 0
        self._fail_log = FailOpenLog(opts.logger, opts.log_interval, opts.fail_closed)
        self._reach_logged = ""

    def stats(self):
        """A copy of the client's counters."""
        with self._stats_lock:
            return Stats(**self._stats.__dict__)

    def fail_opens(self):
        """Undecided calls per cause (the Go client's cause names)."""
        return self._fail_log.totals()

    def _count(self, field, n=1):
        with self._stats_lock:
            setattr(self._stats, field, getattr(self._stats, field) + n)

    def _undecided(self, err):
        cause = cause_of(err)
        with self._stats_lock:
            if isinstance(err, Timeout):
                self._stats.timeouts += 1
            if self.opts.fail_closed:
                self._stats.failed_closed += 1
            else:
                self._stats.failed_open += 1
        self._fail_log.record(err)
        return Decision(allowed=not self.opts.fail_closed, failed_open=True, error=err, cause=cause)

    def _refuse_invalid(self, err):
        self._count("invalid")
        return Decision(allowed=False, invalid=True, error=err)

    def _decided(self, rep):
        results = [Result(**{k: r[k] for k in ("status", "limit", "remaining", "retry_after_ns",
                                                  "reset_after_ns", "period_ns")}) for r in rep["results"]]
        with self._stats_lock:
            self._stats.decisions += 1
            if not rep["allowed"]:
                self._stats.denied += 1
        return decision_of(rep["allowed"], results)

    def _report_frame(self):
        """A REPORT of the calls decided without the daemon since the last one, or b""."""
        with self._stats_lock:
            fo, fc = self._stats.failed_open - self._reported_open, self._stats.failed_closed - self._reported_closed
            if fo == 0 and fc == 0:
                return b""
            self._reported_open, self._reported_closed = self._stats.failed_open, self._stats.failed_closed
        return P.encode_report(fo, fc)

    def _validate(self, checks):
        """The checks as wire tuples, or an InvalidRequest."""
        if not checks:
            return InvalidRequest("invalid rate-limit request: no checks")
        for i, c in enumerate(checks):
            if type(c.cost) is not int or c.cost < 1:
                return InvalidRequest("invalid rate-limit request: check %d: cost %r must be at least 1" % (i, c.cost))
            if not c.key:
                return InvalidRequest("invalid rate-limit request: check %d: empty key" % i)
        return None

    @staticmethod
    def _wire_checks(checks, welcome):
        if len(checks) > welcome["max_batch"]:
            raise InvalidRequest("invalid rate-limit request: %d checks, daemon accepts at most %d"
                                 % (len(checks), welcome["max_batch"]))
        mk = welcome["max_key_len"]
        return [(c.rule, P.bounded_key(c.key, mk), c.cost, int(c.max_delay * 1e9) if c.max_delay > 0 else 0)
                for c in checks]

    @staticmethod
    def _check_frame_size(frame, welcome):
        if welcome["max_frame"] and len(frame) - 4 > welcome["max_frame"]:
            raise InvalidRequest("invalid rate-limit request: request of %d bytes, daemon accepts frames of at most %d"
                                 % (len(frame) - 4, welcome["max_frame"]))

    @staticmethod
    def _is_invalid_reply(err):
        return isinstance(err, ServerError) and err.id != 0 and err.code >= P.CODE_BATCH_TOO_LARGE \
            and err.code != P.CODE_INTERNAL

    def _unreachable(self, err):
        """Remember why the daemon cannot be reached; log each distinct reason once."""
        if isinstance(err, ReachError) and err.untrusted:
            self._count("untrusted")
        msg = str(err)
        if msg != self._reach_logged:
            self._reach_logged = msg
            mode = "closed (denied)" if self.opts.fail_closed else "open (allowed)"
            self.opts.logger.warning("sluice: cannot reach sluiced; calls fail %s until it can be reached: path=%s error=%s",
                                     mode, self.opts.socket_path, msg)
        self._down_err = err

    def _reachable(self):
        if self._reach_logged:
            self._reach_logged = ""
            self.opts.logger.warning("sluice: reached sluiced again: path=%s", self.opts.socket_path)

    def _backoff_wait(self, backoff):
        """The jittered wait for a backoff b, uniform in [b/2, b), and the next b."""
        w = backoff / 2 + self.opts.jitter() * backoff / 2
        return w, min(2 * backoff, self.opts.reconnect_max)


def handshake_error(path, dial_timeout, err):
    if isinstance(err, ReachError):
        return err
    if isinstance(err, ServerError):
        return ReachError(path, "refused by the daemon", str(err),
                          "the daemon's allow-list (--allow-uid/--allow-gid) or connection cap refused this client"
                          if err.code in (P.CODE_PEER_REFUSED, P.CODE_TOO_MANY_CONNS) else "see sluiced's log")
    return ReachError(path, "handshake failed", str(err),
                      "the daemon did not complete the handshake within %gs; is it overloaded or stopped?" % dial_timeout)


class _Call:
    __slots__ = ("id", "lock", "reply", "err")

    def __init__(self):
        self.lock = threading.Lock()
        self.lock.acquire()
        self.reply = None
        self.err = None

    def done(self, reply=None, err=None):
        self.reply, self.err = reply, err
        self.lock.release()


class _Conn:
    """One connection: a reader thread dispatches replies by id; callers write
    directly when nothing is queued, else a writer thread finishes the queue."""

    def __init__(self, client, sock, welcome):
        self.client, self.sock, self.welcome = client, sock, welcome
        self.born = time.monotonic()
        self.life = None
        self.dead = False
        self.ids = itertools.count(1)
        self.lock = threading.Lock()        # pending, dead
        self.pending = {}
        self.wcond = threading.Condition()  # wbuf, writing
        self.wbuf = bytearray()
        self.writing = False
        sock.setblocking(False)
        self._rpoll, self._wpoll = select.poll(), select.poll()
        self._rpoll.register(sock.fileno(), select.POLLIN)
        self._wpoll.register(sock.fileno(), select.POLLOUT)
        self.reader = threading.Thread(target=self._read_loop, name="sluice-reader", daemon=True)
        self.writer = threading.Thread(target=self._write_loop, name="sluice-writer", daemon=True)
        self.writer.start()
        self.reader.start()

    # -- requests

    def request(self, make_frame, deadline):
        """Register a call under a fresh id and send make_frame(id) (raising
        InvalidRequest for a frame above max_frame); returns the call."""
        cl = _Call()
        cl.id = next(self.ids)
        data = make_frame(cl.id)
        self.client._check_frame_size(data, self.welcome)
        with self.lock:
            if self.dead:
                raise DaemonDown("connection lost")
            self.pending[cl.id] = cl
        if self.welcome["version"] >= 2:
            data = self.client._report_frame() + data
        with self.wcond:
            if self.writing or self.wbuf:
                if len(self.wbuf) >= MAX_QUEUED:
                    self.withdraw(cl)
                    raise DaemonDown("the daemon is not reading its socket (%d bytes queued)" % MAX_QUEUED)
                self.wbuf += data
                self.wcond.notify()
                return cl
            try:
                n = self.sock.send(data)
            except BlockingIOError:
                n = 0
            except OSError as e:
                err = DaemonDown("write: %s" % e)
                self.fail(err)
                self.withdraw(cl)
                raise err from None
            if n < len(data):  # the rest goes out from the writer thread, whatever this caller does
                self.wbuf += data[n:]
                self.writing = True
                self.wcond.notify()
        return cl

    def await_reply(self, cl, deadline):
        """Wait for cl's reply until deadline; returns the reply or raises."""
        if not cl.lock.acquire(timeout=max(deadline - time.monotonic(), 0)):
            if self.abandon(cl):
                raise Timeout("sluiced did not answer in time")
            cl.lock.acquire()  # claimed meanwhile: its answer is being delivered
        if cl.err is not None:
            raise cl.err
        return cl.reply

    def abandon(self, cl):
        with self.lock:
            if self.pending.get(cl.id) is cl:
                del self.pending[cl.id]
                return True
            return False

    def withdraw(self, cl):
        if not self.abandon(cl):
            cl.lock.acquire()

    def _claim(self, req_id):
        with self.lock:
            return self.pending.pop(req_id, None)

    # -- threads

    def _write_stall(self):
        o = self.client.opts
        return max(o.timeout, o.dial_timeout, 1.0)

    def _write_loop(self):
        poller = self._wpoll
        while True:
            with self.wcond:
                while not self.wbuf and not self.dead:
                    self.writing = False
                    self.wcond.wait()
                if self.dead:
                    return
                self.writing = True
                out = bytes(self.wbuf)
                self.wbuf.clear()
            stall_until = time.monotonic() + self._write_stall()
            while out:
                try:
                    n = self.sock.send(out)
                    out = out[n:]
                    continue
                except BlockingIOError:
                    pass
                except OSError as e:
                    self.fail(DaemonDown("write: %s" % e))
                    return
                left = stall_until - time.monotonic()
                if left <= 0:
                    self.fail(DaemonDown("write: the daemon did not read its socket within %gs" % self._write_stall()))
                    return
                poller.poll(min(left, 0.25) * 1000)
                if self.dead:
                    return

    def _read_loop(self):
        buf = bytearray()
        sock = self.sock
        poller = self._rpoll
        try:
            while not self.dead:
                try:
                    chunk = sock.recv(65536)
                except BlockingIOError:
                    poller.poll(250)
                    continue
                except OSError as e:
                    self.fail(DaemonDown("read: %s" % e))
                    return
                if not chunk:
                    self.fail(DaemonDown("read: the daemon closed the connection"))
                    return
                buf += chunk
                while len(buf) >= 4:
                    (n,) = struct.unpack_from(">I", buf)
                    if n == 0 or n > P.MAX_REPLY_FRAME:
                        self.fail(ProtocolViolation("sluiced protocol error: reply frame of %d bytes" % n))
                        return
                    if len(buf) < 4 + n:
                        break
                    body = bytes(buf[4:4 + n])
                    del buf[:4 + n]
                    err = self._dispatch(body)
                    if err is not None:
                        self.fail(err)
                        return
        finally:
            if threading.current_thread() is not self.writer:
                self.writer.join(2)  # it leaves at once now that the connection is dead
            try:
                sock.close()
            except OSError:
                pass

    def _dispatch(self, body):
        try:
            m = P.decode(body, from_server=True)
        except P.ProtocolError as e:
            return ProtocolViolation("sluiced protocol error: %s" % e)
        t = m["type"]
        if t in ("RESULT", "BALANCE"):
            cl = self._claim(m["id"])
            if cl is not None:  # None: its caller gave up
                cl.done(reply=m)
            return None
        if t == "ERROR":
            e = ServerError(m["id"], m["code"], m["message"].decode("utf-8", "replace"))
            if m["id"] == 0:  # the daemon is closing this connection
                return DaemonDown("sluiced closed the connection: %s" % e)
            cl = self._claim(m["id"])
            if cl is not None:
                cl.done(err=e)
            return None
        return ProtocolViolation("sluiced protocol error: unexpected message %s" % t)

    def fail(self, err):
        """Mark the connection dead and fail every pending call with err."""
        with self.lock:
            if self.dead:
                return
            self.dead = True
            self.life = time.monotonic() - self.born
            pending, self.pending = self.pending, {}
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        with self.wcond:
            self.wcond.notify_all()
        for cl in pending.values():
            cl.done(err=err)
        if not isinstance(err, ClientClosed):
            self.client._conn_lost(err)


class Client(_Core):
    """Asks the local sluiced for rate-limit decisions. Make one per process
    and share it among threads.

    Every call returns within ``timeout`` (default 5 ms). When the daemon
    does not decide (absent, dead, slow, refusing, untrusted, unreadable) the
    call returns a Decision with ``failed_open=True`` that is allowed, or
    denied if ``fail_closed``; it is counted by cause (``fail_opens()``) and
    logged at most once per cause per ``log_interval``. While no connection
    is up calls fail at once; a background thread reconnects with capped,
    jittered exponential backoff. Undecided calls are reported to the daemon
    (REPORT) once it is back.

    Keyword arguments are the fields of :class:`Options`."""

    def __init__(self, options=None, **kw):
        opts = options or Options(**kw)
        self.path_why = opts.fill()
        self.opts = opts
        self._init_core(opts)
        self._slots = [None] * opts.conns
        self._rr = itertools.count()
        self._up = False
        self._closed = threading.Event()
        self._kick = threading.Event()
        self._attempts = 0
        self._down_err = ReachError(opts.socket_path, "not connected yet",
                                    fix="the client is still making its first connection")
        if not os.path.exists(opts.socket_path):
            self._unreachable(explain_connect(opts.socket_path, self.path_why,
                                              FileNotFoundError(errno.ENOENT, "no such file")))
        self._loop = threading.Thread(target=self._reconnect_loop, name="sluice-reconnect", daemon=True)
        self._loop.start()
        self._kick.set()

    @classmethod
    def dial(cls, **kw):
        """Make a client and wait (up to dial_timeout) for its first
        connection; raise the ReachError if it cannot be made."""
        c = cls(**kw)
        deadline = time.monotonic() + c.opts.dial_timeout + 1.0
        while not c._up and c._attempts == 0 and time.monotonic() < deadline:
            time.sleep(0.002)
        if not c._up:
            err = c._down_err
            c.close()
            raise err
        return c

    # -- public API

    @property
    def up(self):
        """Whether a connection to the daemon is live."""
        return self._up

    @property
    def socket_path(self):
        return self.opts.socket_path

    def allow(self, rule, key, cost=1, timeout=None):
        """Whether key may make a request costing cost tokens under rule."""
        return self.allow_all([Check(rule, key, cost)], timeout=timeout)

    def allow_all(self, checks, timeout=None):
        """Check several limits at once: admitted only if every check admits,
        and only then is every check charged. ``timeout`` (seconds) may
        shorten the client's deadline for this call."""
        bad = self._validate(checks)
        if bad is not None:
            return self._refuse_invalid(bad)
        if self._closed.is_set():
            return self._undecided(ClientClosed("client closed"))
        cn = self._pick() if self._up else None
        if cn is None:
            return self._undecided(self._down_err)
        deadline = time.monotonic() + min(self.opts.timeout, timeout if timeout is not None else self.opts.timeout)
        try:
            wire = self._wire_checks(checks, cn.welcome)
            cl = cn.request(lambda i: P.encode_check(i, wire), deadline)
            rep = cn.await_reply(cl, deadline)
        except InvalidRequest as e:
            return self._refuse_invalid(e)
        except ServerError as e:
            if self._is_invalid_reply(e):
                return self._refuse_invalid(InvalidRequest("invalid rate-limit request: %s" % e))
            return self._undecided(e)
        except (DaemonDown, Timeout, ProtocolViolation, ClientClosed) as e:
            return self._undecided(e)
        return self._decided(rep)

    def inspect(self, rule, key, timeout=None):
        """Read a key's bucket without charging it. Raises on failure: there
        is nothing to fail open to."""
        if self._closed.is_set():
            raise ClientClosed("client closed")
        cn = self._pick()
        if cn is None:
            raise self._down_err
        deadline = time.monotonic() + min(self.opts.timeout, timeout if timeout is not None else self.opts.timeout)
        k = P.bounded_key(key, cn.welcome["max_key_len"])
        cl = cn.request(lambda i: P.encode_inspect(i, rule, k), deadline)
        m = cn.await_reply(cl, deadline)
        return Inspection(m["known"], m["balance"], m["limit"], m["burst"])

    def close(self):
        """Close the connections and stop reconnecting; later calls fail
        open (or closed) with ClientClosed. Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._kick.set()
        for i, cn in enumerate(self._slots):
            self._slots[i] = None
            if cn is not None:
                cn.fail(ClientClosed("client closed"))
        self._loop.join(timeout=5)
        self._up = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- internals

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
        self._kick.set()

    def _dial(self):
        o = self.opts
        try:
            sock = connect_unix(o.socket_path, o.dial_timeout)
        except OSError as e:
            raise explain_connect(o.socket_path, self.path_why, e) from None
        try:
            # Nothing, not even HELLO, goes to a process that is not the daemon.
            verify_daemon(sock, o.socket_path, o.daemon_uids)
            deadline = time.monotonic() + o.dial_timeout
            sock.settimeout(o.dial_timeout)
            sock.sendall(P.encode_hello(P.PROTOCOL_VERSION, o.name))
            hdr = _recv_exact(sock, 4, deadline)
            (n,) = struct.unpack(">I", hdr)
            if n == 0 or n > P.MAX_REPLY_FRAME:
                raise ProtocolViolation("handshake: reply frame of %d bytes" % n)
            m = P.decode(_recv_exact(sock, n, deadline))
            if m["type"] == "ERROR":
                raise ServerError(m["id"], m["code"], m["message"].decode("utf-8", "replace"))
            if m["type"] != "WELCOME":
                raise ProtocolViolation("handshake: got %s, want WELCOME" % m["type"])
        except BaseException as e:
            sock.close()
            if isinstance(e, (OSError, SluiceErrorTypes, P.ProtocolError)):
                raise handshake_error(o.socket_path, o.dial_timeout, e) from None
            raise
        return _Conn(self, sock, m)

    def _reconnect_loop(self):
        o = self.opts
        backoff = o.reconnect_min
        not_before = 0.0
        replacing = [False] * len(self._slots)
        wait = None
        while True:
            self._kick.wait(wait)
            self._kick.clear()
            if self._closed.is_set():
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
            if young:  # as good as a failed dial
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
                    cn = self._dial()
                except ReachError as e:
                    self._unreachable(e)
                    self._attempts += 1
                    failed = True
                    break
                # Store, then look: a close() that swept the slots before
                # the store had set _closed before it, so one of the two
                # sees the connection and fails it (fail is idempotent).
                self._slots[i] = cn
                if self._closed.is_set():
                    self._slots[i] = None
                    cn.fail(ClientClosed("client closed"))
                    return
                if replacing[i]:
                    self._count("reconnects")
                    replacing[i] = False
                self._up = True
                self._attempts += 1
                self._reachable()
            if failed:
                w, backoff = self._backoff_wait(backoff)
                not_before, wait = time.monotonic() + w, w


SluiceErrorTypes = (ReachError, ServerError, ProtocolViolation, DaemonDown, Timeout)


def _recv_exact(sock, n, deadline):
    out = bytearray()
    while len(out) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Timeout("handshake timed out")
        sock.settimeout(left)
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise DaemonDown("the daemon closed the connection during the handshake")
        out += chunk
    return bytes(out)
