"""Python client for Sluice's rate-limit daemon, sluiced.

A service asks its local sluiced over a Unix socket whether a request may
proceed (docs/PROTOCOL.md). Like the Go client (clientlib), this one is built
to never be the outage: every call returns within a short deadline, fails
open (or closed) when the daemon does not decide, counts and logs that
rate-limited, reconnects in the background with jittered backoff, checks the
daemon's credentials, and reports undecided calls once the daemon is back.

    import sluice
    client = sluice.Client()            # share it between threads
    d = client.allow("api", "user:42")
    if not d.allowed:
        ...  # 429, retry in d.retry_after seconds

``sluice.aio.AsyncClient`` is the asyncio variant; ``sluice.middleware``
holds WSGI and ASGI middleware that set the same headers as Go's httplimit.
"""

from .client import Client, Inspection, Options, Stats
from .decision import Check, Decision, Result, decision_of
from .errors import (CAUSES, ClientClosed, DaemonDown, FailOpenLog, InvalidRequest, ProtocolViolation, ReachError,
                     ServerError, SluiceError, Timeout, UntrustedDaemon, cause_of)
from .protocol import PROTOCOL_VERSION, bounded_key

__all__ = [
    "Client", "Options", "Stats", "Inspection", "Check", "Decision", "Result", "decision_of",
    "SluiceError", "DaemonDown", "Timeout", "ClientClosed", "ProtocolViolation", "UntrustedDaemon",
    "InvalidRequest", "ServerError", "ReachError", "FailOpenLog", "CAUSES", "cause_of",
    "PROTOCOL_VERSION", "bounded_key",
]
__version__ = "0.1.0"
