"""Errors, causes of undecided calls, and the rate-limited fail-open log."""

import logging
import threading
import time


class SluiceError(Exception):
    """Base of the errors this package raises or carries in a Decision."""


class DaemonDown(SluiceError):
    """No connection to sluiced, or the connection failed."""


class Timeout(SluiceError):
    """sluiced did not answer within the call's deadline."""


class ClientClosed(SluiceError):
    """The client was closed."""


class ProtocolViolation(SluiceError):
    """sluiced said something this client cannot read."""


class UntrustedDaemon(DaemonDown):
    """The socket is served by a process whose uid is not trusted."""


class InvalidRequest(SluiceError):
    """The request itself is invalid (no checks, cost below 1, empty key,
    more checks than the daemon takes, a frame too large, or a request-level
    ERROR 100-103). Denied, never failed open."""


class ServerError(SluiceError):
    """An ERROR from sluiced: ``id``, ``code`` and ``message``."""

    def __init__(self, req_id, code, message):
        from .protocol import CODE_NAMES
        self.id, self.code, self.message = req_id, code, message
        super().__init__("sluiced error %d (%s) on request %d: %s" % (
            code, CODE_NAMES.get(code, "unknown"), req_id, message))


class ReachError(DaemonDown):
    """Why the socket could not be reached or trusted: the path, the cause,
    and how to fix it."""

    def __init__(self, path, cause, detail="", fix="", untrusted=False):
        self.path, self.cause, self.detail, self.fix, self.untrusted = path, cause, detail, fix, untrusted
        msg = "sluiced at %s: %s" % (path, cause)
        if detail:
            msg += ": " + detail
        if fix:
            msg += " (" + fix + ")"
        super().__init__(msg)


# Causes of undecided calls, named as the Go client names them.
CAUSE_DAEMON_DOWN = "daemon_down"
CAUSE_TIMEOUT = "timeout"
CAUSE_PROTOCOL = "protocol"
CAUSE_CLOSED = "closed"
CAUSE_CANCELED = "canceled"
CAUSE_INTERNAL = "internal"
CAUSE_UNTRUSTED = "untrusted_daemon"
CAUSES = (CAUSE_DAEMON_DOWN, CAUSE_TIMEOUT, CAUSE_PROTOCOL, CAUSE_CLOSED,
          CAUSE_CANCELED, CAUSE_INTERNAL, CAUSE_UNTRUSTED)


def cause_of(err):
    """Classify the error of an undecided call."""
    import asyncio
    if isinstance(err, UntrustedDaemon) or (isinstance(err, ReachError) and err.untrusted):
        return CAUSE_UNTRUSTED
    if isinstance(err, Timeout):
        return CAUSE_TIMEOUT
    if isinstance(err, ClientClosed):
        return CAUSE_CLOSED
    if isinstance(err, asyncio.CancelledError):
        return CAUSE_CANCELED
    if isinstance(err, ProtocolViolation):
        return CAUSE_PROTOCOL
    if isinstance(err, DaemonDown):
        return CAUSE_DAEMON_DOWN
    return CAUSE_INTERNAL


class FailOpenLog:
    """Counts undecided calls by cause and logs them rate-limited: at most one
    line per cause per ``interval`` seconds, each with the count since the
    cause's previous line. An outage under load is one line per cause per
    interval, never silent and never one line per request.

    ``logger`` is a ``logging.Logger`` (None: count only); ``now`` is the
    clock, in seconds (tests inject their own)."""

    def __init__(self, logger, interval=10.0, fail_closed=False, now=time.monotonic):
        self.logger, self.interval, self.now = logger, interval if interval > 0 else 10.0, now
        self.what = ("sluice: daemon did not decide; failing closed (request denied)" if fail_closed
                     else "sluice: daemon did not decide; failing open (request allowed)")
        self._lock = threading.Lock()
        self._total = dict.fromkeys(CAUSES, 0)
        self._unlogged = dict.fromkeys(CAUSES, 0)
        self._last = {}

    def record(self, err):
        """Count one undecided call; log if its cause has no line this interval."""
        cause = cause_of(err)
        with self._lock:
            self._total[cause] += 1
            self._unlogged[cause] += 1
            if self.logger is None:
                return
            now = self.now()
            last = self._last.get(cause)
            if last is not None and now - last < self.interval:
                return
            self._last[cause] = now
            n, self._unlogged[cause] = self._unlogged[cause], 0
        self.logger.warning("%s cause=%s count=%d interval=%gs error=%s", self.what, cause, n, self.interval, err)

    def total(self, cause):
        """Undecided calls recorded for one cause."""
        with self._lock:
            return self._total.get(cause, 0)

    def totals(self):
        """Undecided calls recorded per cause, by cause name."""
        with self._lock:
            return dict(self._total)


default_logger = logging.getLogger("sluice")
