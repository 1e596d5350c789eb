"""Decisions: what a call answers, summarised from the daemon's results."""

from dataclasses import dataclass, field
from typing import List, Optional

from .protocol import STATUS_DELAYED, status_admits

NS = 1e-9


@dataclass
class Check:
    """One limit to check: ``rule`` applied to ``key`` at ``cost`` tokens.
    ``max_delay`` (seconds), when positive, asks for shaping."""
    rule: str
    key: object  # str or bytes
    cost: int = 1
    max_delay: float = 0.0


@dataclass
class Result:
    """One check's result, as the daemon sent it (durations in nanoseconds)."""
    status: int
    limit: int
    remaining: int
    retry_after_ns: int
    reset_after_ns: int
    period_ns: int


@dataclass
class Decision:
    """The answer to a call. ``allowed`` is always meaningful: when the daemon
    did not decide it is True (fail open) or False (fail closed), and
    ``failed_open`` is True with ``error`` and ``cause`` saying why.

    ``limit``, ``remaining``, ``retry_after``, ``reset_after`` and ``period``
    (seconds) describe the deciding check: the denying check with the longest
    wait, or when all admit the one with the fewest tokens left. ``delay`` is
    how long to wait before going ahead when a shaped check reserved a later
    turn. ``denied`` is the deciding check's index when denied, else -1;
    ``deciding`` is the index described (-1 when the daemon did not decide)."""
    allowed: bool
    limit: int = 0
    remaining: int = 0
    retry_after: float = 0.0
    reset_after: float = 0.0
    period: float = 0.0
    delay: float = 0.0
    status: int = 0
    denied: int = -1
    deciding: int = -1
    failed_open: bool = False
    invalid: bool = False
    error: Optional[BaseException] = None
    cause: str = ""
    results: List[Result] = field(default_factory=list)

    def __bool__(self):
        return self.allowed


def _more_restrictive(a, b):
    if status_admits(a.status) != status_admits(b.status):
        return not status_admits(a.status)
    if not status_admits(a.status):
        return a.retry_after_ns > b.retry_after_ns
    return a.remaining < b.remaining


def decision_of(allowed, results):
    """Summarise a RESULT as one Decision, exactly as the Go client does."""
    d = Decision(allowed=allowed, results=results)
    best = -1
    for i, r in enumerate(results):
        if best < 0 or _more_restrictive(r, results[best]):
            best = i
        if allowed and r.status == STATUS_DELAYED:
            d.delay = max(d.delay, r.retry_after_ns * NS)
    if best < 0:
        return d
    r = results[best]
    d.limit, d.remaining, d.status = r.limit, r.remaining, r.status
    d.reset_after, d.period = r.reset_after_ns * NS, r.period_ns * NS
    d.deciding = best
    if not allowed:
        d.retry_after, d.denied = r.retry_after_ns * NS, best
    return d
