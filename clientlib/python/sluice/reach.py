"""Finding the daemon's socket, connecting to it, and checking who serves it."""

import errno
import os
import socket
import struct
import time

from .errors import ReachError

DAEMON_UIDS_ENV = "SLUICE_DAEMON_UIDS"
_NO_UID = 4294967295


def socket_path_choice():
    """The socket path clients and daemon agree on (PROTOCOL.md §1), and why."""
    p = os.environ.get("SLUICE_SOCKET", "")
    if p:
        return p, "set by $SLUICE_SOCKET"
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if xdg and os.path.isdir(xdg):
        return os.path.join(xdg, "sluice", "sluiced.sock"), "under $XDG_RUNTIME_DIR"
    uid = os.getuid()
    if uid == 0:
        return "/run/sluice/sluiced.sock", "the default for root"
    tmp = os.environ.get("TMPDIR", "") or "/tmp"
    return os.path.join(tmp, "sluice-%d" % uid, "sluiced.sock"), "the default for uid %d" % uid


def parse_uids(s):
    """Parse a comma-separated list of numeric uids (4294967295 refused)."""
    out = []
    for f in s.split(","):
        f = f.strip()
        if not f:
            continue
        if not f.isdigit() or int(f) >= _NO_UID:
            raise ValueError("parse uid %r: want a number below 4294967295" % f)
        out.append(int(f))
    if not out:
        raise ValueError("parse uids %r: none listed" % s)
    return out


def default_daemon_uids():
    """Root and this process's effective uid, unless $SLUICE_DAEMON_UIDS says otherwise."""
    env = os.environ.get(DAEMON_UIDS_ENV, "")
    if env:
        return parse_uids(env)
    me = os.geteuid()
    return [0] if me == 0 else [0, me]


PEER_CRED_CHECKED = hasattr(socket, "SO_PEERCRED")


def peer_cred(sock):
    """(pid, uid, gid) of the process serving a connected Unix socket (Linux)."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("iII"))
    return struct.unpack("iII", raw)


def verify_daemon(sock, path, trusted):
    """Raise ReachError (untrusted) unless the socket's server runs as a trusted uid."""
    if not PEER_CRED_CHECKED:
        return
    try:
        pid, uid, gid = peer_cred(sock)
    except OSError as e:
        raise ReachError(path, "daemon credentials unreadable", str(e),
                         "a Unix socket server's credentials should always be readable; is the path a socket?",
                         untrusted=True) from None
    if uid == _NO_UID or uid not in trusted:
        raise ReachError(
            path, "served by an untrusted process",
            "the socket is served by pid %d running as uid %d gid %d; trusted daemon uids are %s"
            % (pid, uid, gid, ",".join(str(u) for u in trusted)),
            "another local user may be impersonating sluiced; if uid %d really is your daemon's, trust it "
            "with daemon_uids= or $%s=%d" % (uid, DAEMON_UIDS_ENV, uid),
            untrusted=True)


def explain_connect(path, why, err):
    """A ReachError for a failed connect, naming the path and the fix."""
    if isinstance(err, FileNotFoundError):
        return ReachError(path, "socket missing", "nothing at the path (%s)" % why,
                          "is sluiced running? start it, or point $SLUICE_SOCKET at its --socket")
    if isinstance(err, ConnectionRefusedError):
        return ReachError(path, "nothing listening", "the socket exists but no daemon accepts on it",
                          "sluiced may have died; restart it")
    if isinstance(err, PermissionError):
        return ReachError(path, "permission denied", str(err),
                          "run as a user the socket's mode admits (sluiced --socket-mode), or set $SLUICE_SOCKET")
    if isinstance(err, (socket.timeout, TimeoutError)):
        return ReachError(path, "connect timed out", str(err), "the daemon is not accepting; is it stopped or overloaded?")
    return ReachError(path, "cannot connect", str(err), "see sluiced's log")


def connect_unix(path, timeout):
    """Connect within timeout, retrying a full listen backlog (EAGAIN)."""
    deadline = time.monotonic() + timeout
    pause = 0.0001
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            s.connect(path)
            return s
        except BlockingIOError as e:
            s.close()
            if e.errno != errno.EAGAIN or deadline - time.monotonic() < pause:
                raise
        except BaseException:
            s.close()
            raise
        time.sleep(pause)
        pause = min(2 * pause, 0.01)
