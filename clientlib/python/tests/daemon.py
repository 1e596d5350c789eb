"""Running a real sluiced for the tests: $SLUICE_TEST_SLUICED names the
binary (cmd/sluiced's TestPythonClient builds it and sets it)."""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.request

from .timing import PATIENT

BINARY_ENV = "SLUICE_TEST_SLUICED"
RULES = """\
unknown_rule: deny
rules:
  api:
    rate: 3/1h
  user:
    rate: 2/1h
  route:
    rate: 100/1h
  shared:
    rate: 100/1h
  many:
    rate: 20/1h
  paced:
    rate: 10/1s
"""


def binary():
    b = os.environ.get(BINARY_ENV, "")
    if not b:
        raise unittest.SkipTest("$%s is not set: no sluiced binary to test against "
                                "(go test ./cmd/sluiced -run TestPythonClient sets it)" % BINARY_ENV)
    return b


def poll(cond, what, timeout=PATIENT):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %gs waiting until %s" % (timeout, what))
        time.sleep(0.005)


class Daemon:
    """One sluiced on a socket of its own, with the rules above and an admin
    endpoint on a free loopback port."""

    def __init__(self, rules=RULES, args=()):
        self.bin = binary()
        self.dir = tempfile.mkdtemp(prefix="sluicepyd")
        self.sock = os.path.join(self.dir, "d.sock")
        self.rules = os.path.join(self.dir, "rules.yaml")
        with open(self.rules, "w") as f:
            f.write(rules)
        self.args = list(args)
        self.proc = None
        self.admin = None
        self.logs = []

    def start(self):
        log = os.path.join(self.dir, "stderr.%d" % len(self.logs))
        self.logs.append(log)
        env = dict(os.environ, SLUICE_ADMIN_ADDR="")
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(
                [self.bin, "--socket", self.sock, "--rules", self.rules, "--node-name", "py",
                 "--admin-addr", "127.0.0.1:0"] + self.args, stdout=subprocess.DEVNULL, stderr=f, env=env)
        m = poll(lambda: self._ready(r"admin endpoint serving: addr=(\S+)"),
                 "sluiced serves its admin endpoint (stderr: %s)" % log)
        self.admin = m.group(1)
        poll(lambda: os.path.exists(self.sock), "the socket appears")
        return self

    def _ready(self, pattern):
        """The match of pattern in stderr, or None; raises at once if sluiced
        has exited, instead of waiting out the deadline."""
        code = self.proc.poll()
        if code is not None:
            raise AssertionError("sluiced exited with %d before it was ready: %s" % (code, self.stderr()))
        return re.search(pattern, self.stderr())

    def stderr(self):
        with open(self.logs[-1], errors="replace") as f:
            return f.read()

    def metric(self, name):
        with urllib.request.urlopen("http://%s/metrics" % self.admin, timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " ") or line.startswith(name + "{"):
                    return float(line.rsplit(" ", 1)[1])
        return None

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(10)

    def state(self):
        with open("/proc/%d/stat" % self.proc.pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    def stop(self):
        """SIGSTOP, and wait until the kernel has stopped it: the signal is asynchronous."""
        self.proc.send_signal(signal.SIGSTOP)
        poll(lambda: self.state() == "T", "sluiced is stopped")

    def cont(self):
        self.proc.send_signal(signal.SIGCONT)

    def close(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
