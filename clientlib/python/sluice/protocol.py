"""The wire format of Sluice's socket protocol (docs/PROTOCOL.md).

Encoding is written by hand so that frames are exactly the canonical
encoding the spec describes (shortest forms, strings as ``str``, even for a
bounded key that is not valid UTF-8); decoding uses msgpack and then checks
every field's type as the spec requires.
"""

import base64
import hashlib
import struct

import msgpack

#: The highest protocol version this client speaks.
PROTOCOL_VERSION = 2

# Message types (§4).
MSG_HELLO = 1
MSG_WELCOME = 1
MSG_CHECK = 2
MSG_RESULT = 3
MSG_ERROR = 4
MSG_INSPECT = 5
MSG_BALANCE = 6
MSG_REPORT = 7

# Statuses (§7).
STATUS_OK = 0
STATUS_OVER_LIMIT = 1
STATUS_UNKNOWN_RULE = 2
STATUS_UNKNOWN_RULE_ALLOWED = 3
STATUS_DELAYED = 4
STATUS_SHADOW_DENIED = 5
STATUS_SOFT = 6

STATUS_NAMES = {
    0: "ok", 1: "over_limit", 2: "unknown_rule", 3: "unknown_rule_allowed",
    4: "delayed", 5: "shadow_denied", 6: "soft",
}

# ERROR codes (§10).
CODE_MALFORMED = 1
CODE_FRAME_TOO_LARGE = 2
CODE_BAD_VERSION = 3
CODE_UNEXPECTED = 4
CODE_TOO_MANY_CONNS = 5
CODE_SHUTTING_DOWN = 6
CODE_PEER_REFUSED = 7
CODE_BATCH_TOO_LARGE = 100
CODE_KEY_TOO_LONG = 101
CODE_BAD_COST = 102
CODE_BAD_REQUEST = 103
CODE_INTERNAL = 104

CODE_NAMES = {
    1: "malformed", 2: "frame_too_large", 3: "bad_version", 4: "unexpected",
    5: "too_many_conns", 6: "shutting_down", 7: "peer_refused",
    100: "batch_too_large", 101: "key_too_long", 102: "bad_cost",
    103: "bad_request", 104: "internal",
}

#: The largest server frame body this client accepts (the Go client's bound).
MAX_REPLY_FRAME = (64 << 10) - 4

_MAX_DELAY_CAP = 1 << 62
_U64 = (1 << 64) - 1
_I64 = (1 << 63) - 1


def status_admits(status):
    """Whether a check status admits (statuses 0, 3, 4, 5, 6)."""
    return status in (STATUS_OK, STATUS_UNKNOWN_RULE_ALLOWED, STATUS_DELAYED,
                      STATUS_SHADOW_DENIED, STATUS_SOFT)


class ProtocolError(Exception):
    """A frame that is not a valid message of the protocol."""


# ---------------------------------------------------------------- encoding

def _uint(n):
    if n < 0 or n > _U64:
        raise ValueError("encode: integer %d out of the uint64 range" % n)
    if n < 0x80:
        return bytes((n,))
    if n <= 0xFF:
        return b"\xcc" + bytes((n,))
    if n <= 0xFFFF:
        return b"\xcd" + struct.pack(">H", n)
    if n <= 0xFFFFFFFF:
        return b"\xce" + struct.pack(">I", n)
    return b"\xcf" + struct.pack(">Q", n)


def _str(b):
    n = len(b)
    if n < 32:
        return bytes((0xA0 | n,)) + b
    if n <= 0xFF:
        return b"\xd9" + bytes((n,)) + b
    if n <= 0xFFFF:
        return b"\xda" + struct.pack(">H", n) + b
    return b"\xdb" + struct.pack(">I", n) + b


def _array(n):
    if n < 16:
        return bytes((0x90 | n,))
    if n <= 0xFFFF:
        return b"\xdc" + struct.pack(">H", n)
    return b"\xdd" + struct.pack(">I", n)


def to_bytes(s):
    """Text as UTF-8; bytes unchanged."""
    if isinstance(s, str):
        return s.encode("utf-8")
    return bytes(s)


def frame(body):
    """Prefix a body with its 4-byte big-endian length."""
    return struct.pack(">I", len(body)) + body


def encode_hello(version, client_name):
    """HELLO ``[1, version, client_name]`` as a whole frame."""
    return frame(_array(3) + _uint(MSG_HELLO) + _uint(version) + _str(to_bytes(client_name)))


def check_body(rule, key, cost, max_delay_ns=0):
    """One check's encoding: ``[rule, key, cost]`` or with ``max_delay_ns``."""
    rule, key = to_bytes(rule), to_bytes(key)
    if max_delay_ns and max_delay_ns > 0:
        return (_array(4) + _str(rule) + _str(key) + _uint(cost)
                + _uint(min(int(max_delay_ns), _MAX_DELAY_CAP)))
    return _array(3) + _str(rule) + _str(key) + _uint(cost)


def encode_check(req_id, checks):
    """CHECK ``[2, id, [check...]]`` as a whole frame; checks are
    ``(rule, key, cost[, max_delay_ns])`` tuples (keys already bounded)."""
    parts = [_array(3), _uint(MSG_CHECK), _uint(req_id), _array(len(checks))]
    for c in checks:
        parts.append(check_body(*c))
    return frame(b"".join(parts))


def encode_inspect(req_id, rule, key):
    """INSPECT ``[5, id, rule, key]`` as a whole frame."""
    return frame(_array(4) + _uint(MSG_INSPECT) + _uint(req_id) + _str(to_bytes(rule)) + _str(to_bytes(key)))


def encode_report(failed_open, failed_closed):
    """REPORT ``[7, failed_open, failed_closed]`` as a whole frame."""
    return frame(_array(3) + _uint(MSG_REPORT) + _uint(failed_open) + _uint(failed_closed))


def encode_welcome(version, server_name, max_frame, max_batch, max_key_len):
    """WELCOME as a whole frame (for fake servers in tests)."""
    return frame(_array(6) + _uint(MSG_WELCOME) + _uint(version) + _str(to_bytes(server_name))
                 + _uint(max_frame) + _uint(max_batch) + _uint(max_key_len))


def encode_result(req_id, allowed, results):
    """RESULT as a whole frame; results are 6-tuples (for fake servers)."""
    parts = [_array(4), _uint(MSG_RESULT), _uint(req_id), b"\xc3" if allowed else b"\xc2", _array(len(results))]
    for r in results:
        parts.append(_array(6) + b"".join(_uint(x) for x in r))
    return frame(b"".join(parts))


def encode_error(req_id, code, message):
    """ERROR as a whole frame (for fake servers)."""
    return frame(_array(4) + _uint(MSG_ERROR) + _uint(req_id) + _uint(code) + _str(to_bytes(message)))


def encode_balance(req_id, known, balance, limit, burst):
    """BALANCE as a whole frame (for fake servers)."""
    return frame(_array(6) + _uint(MSG_BALANCE) + _uint(req_id) + (b"\xc3" if known else b"\xc2")
                 + b"\xcb" + struct.pack(">d", float(balance)) + _uint(limit) + _uint(burst))


def check_size(rule, key, cost, max_delay_ns=0):
    """Bytes one check takes in a CHECK body."""
    return len(check_body(rule, key, cost, max_delay_ns))


# ---------------------------------------------------------------- decoding

def _need_uint(v, what):
    if type(v) is not int or v < 0:
        raise ProtocolError("%s: want an unsigned integer, got %r" % (what, v))
    return v


def _need_dur(v, what):
    _need_uint(v, what)
    if v > _I64:
        raise ProtocolError("%s: duration %d above 2^63-1" % (what, v))
    return v


def _need_bytes(v, what):
    if not isinstance(v, bytes):
        raise ProtocolError("%s: want a string, got %r" % (what, v))
    return v


def _need_bool(v, what):
    if type(v) is not bool:
        raise ProtocolError("%s: want a boolean, got %r" % (what, v))
    return v


def _need_array(v, n, what):
    if not isinstance(v, list) or (n is not None and len(v) not in (n if isinstance(n, tuple) else (n,))):
        raise ProtocolError("%s: want an array of %s, got %r" % (what, n, v))
    return v


def unpack_body(body):
    """Decode one msgpack value, which must fill the body exactly."""
    try:
        return msgpack.unpackb(body, raw=True, use_list=True, strict_map_key=False)
    except Exception as e:  # msgpack raises several types: ExtraData, ValueError, ...
        raise ProtocolError("bad msgpack: %s" % e) from None


def decode(body, from_server=True):
    """Decode one frame body into a dict in the readable form of the test
    vectors (``type`` plus the fields named in PROTOCOL.md §4; strings as
    bytes). ``from_server`` picks between WELCOME and HELLO for type 1."""
    v = unpack_body(body)
    if not isinstance(v, list) or not v:
        raise ProtocolError("a message is a non-empty array, got %r" % (v,))
    t = _need_uint(v[0], "type")
    if t == 1 and from_server:
        _need_array(v, 6, "WELCOME")
        return {"type": "WELCOME", "version": _need_uint(v[1], "version"),
                "server_name": _need_bytes(v[2], "server_name"),
                "max_frame": _need_uint(v[3], "max_frame"), "max_batch": _need_uint(v[4], "max_batch"),
                "max_key_len": _need_uint(v[5], "max_key_len")}
    if t == 1:
        _need_array(v, 3, "HELLO")
        return {"type": "HELLO", "version": _need_uint(v[1], "version"),
                "client_name": _need_bytes(v[2], "client_name")}
    if t == MSG_CHECK:
        _need_array(v, 3, "CHECK")
        checks = []
        for i, c in enumerate(_need_array(v[2], None, "checks")):
            _need_array(c, (3, 4), "check %d" % i)
            d = {"rule": _need_bytes(c[0], "rule"), "key": _need_bytes(c[1], "key"), "cost": _need_uint(c[2], "cost")}
            if len(c) == 4 and _need_uint(c[3], "max_delay_ns") > 0:  # 0 is the same as absent
                d["max_delay_ns"] = c[3]
            checks.append(d)
        return {"type": "CHECK", "id": _need_uint(v[1], "id"), "checks": checks}
    if t == MSG_RESULT:
        _need_array(v, 4, "RESULT")
        results = []
        for i, r in enumerate(_need_array(v[3], None, "results")):
            _need_array(r, 6, "result %d" % i)
            st = _need_uint(r[0], "status")
            results.append({"status": st, "status_name": STATUS_NAMES.get(st, "unknown"),
                            "limit": _need_uint(r[1], "limit"), "remaining": _need_uint(r[2], "remaining"),
                            "retry_after_ns": _need_dur(r[3], "retry_after_ns"),
                            "reset_after_ns": _need_dur(r[4], "reset_after_ns"),
                            "period_ns": _need_dur(r[5], "period_ns")})
        return {"type": "RESULT", "id": _need_uint(v[1], "id"), "allowed": _need_bool(v[2], "allowed"),
                "results": results}
    if t == MSG_ERROR:
        _need_array(v, 4, "ERROR")
        code = _need_uint(v[2], "code")
        return {"type": "ERROR", "id": _need_uint(v[1], "id"), "code": code,
                "code_name": CODE_NAMES.get(code, "unknown"), "message": _need_bytes(v[3], "message")}
    if t == MSG_INSPECT:
        _need_array(v, 4, "INSPECT")
        return {"type": "INSPECT", "id": _need_uint(v[1], "id"), "rule": _need_bytes(v[2], "rule"),
                "key": _need_bytes(v[3], "key")}
    if t == MSG_BALANCE:
        _need_array(v, 6, "BALANCE")
        bal = v[3]
        if type(bal) is int:
            bal = float(bal)
        if type(bal) is not float:
            raise ProtocolError("balance: want a float, got %r" % (bal,))
        return {"type": "BALANCE", "id": _need_uint(v[1], "id"), "known": _need_bool(v[2], "known"),
                "balance": bal, "limit": _need_uint(v[4], "limit"), "burst": _need_uint(v[5], "burst")}
    if t == MSG_REPORT:
        _need_array(v, 3, "REPORT")
        return {"type": "REPORT", "failed_open": _need_uint(v[1], "failed_open"),
                "failed_closed": _need_uint(v[2], "failed_closed")}
    raise ProtocolError("unknown message type %d" % t)


# ---------------------------------------------------------------- bounded keys

BOUNDED_KEY_HASH_LEN = 22


def bounded_key(key, max_len):
    """The key sent for ``key`` under a daemon's ``max_key_len`` (§11): the
    key itself if it fits, else exactly ``max_len`` bytes standing for it (its
    start, ``#``, 22 base64url characters of its SHA-256). Returns bytes."""
    key = to_bytes(key)
    if max_len <= 0 or len(key) <= max_len:
        return key
    h = base64.urlsafe_b64encode(hashlib.sha256(key).digest()).rstrip(b"=")[:BOUNDED_KEY_HASH_LEN]
    if max_len <= BOUNDED_KEY_HASH_LEN:
        return h[:max_len]
    return key[:max_len - BOUNDED_KEY_HASH_LEN - 1] + b"#" + h
