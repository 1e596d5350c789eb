"""Loading ipc/testdata/vectors.json and turning its readable messages into frames."""

import json
import os

from sluice import protocol as P

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS_PATH = os.environ.get("SLUICE_VECTORS") or os.path.normpath(
    os.path.join(HERE, "..", "..", "..", "ipc", "testdata", "vectors.json"))


def load():
    with open(VECTORS_PATH) as f:
        return json.load(f)


def b(s):
    return s.encode("utf-8") if isinstance(s, str) else s


def encode(m, req_id=None):
    """The canonical frame of a readable message (id replaced by req_id if given)."""
    t = m["type"]
    rid = m.get("id") if req_id is None else req_id
    if t == "HELLO":
        return P.encode_hello(m["version"], b(m["client_name"]))
    if t == "WELCOME":
        return P.encode_welcome(m["version"], b(m["server_name"]), m["max_frame"], m["max_batch"], m["max_key_len"])
    if t == "CHECK":
        return P.encode_check(rid, [(b(c["rule"]), b(c["key"]), c["cost"], c.get("max_delay_ns", 0)) for c in m["checks"]])
    if t == "INSPECT":
        return P.encode_inspect(rid, b(m["rule"]), b(m["key"]))
    if t == "REPORT":
        return P.encode_report(m["failed_open"], m["failed_closed"])
    if t == "RESULT":
        return P.encode_result(rid, m["allowed"], [
            (r["status"], r["limit"], r["remaining"], r["retry_after_ns"], r["reset_after_ns"], r["period_ns"])
            for r in m["results"]])
    if t == "ERROR":
        return P.encode_error(rid, m["code"], b(m["message"]))
    if t == "BALANCE":
        return P.encode_balance(rid, m["known"], m["balance"], m["limit"], m["burst"])
    raise ValueError("unknown type %s" % t)


def readable(decoded):
    """A decoded message with its byte strings as text, to compare with a vector's message."""
    def conv(v):
        if isinstance(v, bytes):
            return v.decode("utf-8")
        if isinstance(v, list):
            return [conv(x) for x in v]
        if isinstance(v, dict):
            return {k: conv(x) for k, x in v.items()}
        return v
    return conv(decoded)


def exchanges(data):
    out = {}
    for v in data["vectors"]:
        out.setdefault(v["exchange"], []).append(v)
    for steps in out.values():
        steps.sort(key=lambda v: v["step"])
    return out
