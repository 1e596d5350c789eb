"""A scripted fake sluiced on a Unix socket, for driving the client."""

import os
import shutil
import socket
import struct
import tempfile
import threading
import time

from sluice import protocol as P


def read_frame(conn, deadline):
    def exact(n):
        out = b""
        while len(out) < n:
            conn.settimeout(max(deadline - time.monotonic(), 0.001))
            chunk = conn.recv(n - len(out))
            if not chunk:
                raise EOFError("client closed")
            out += chunk
        return out
    (n,) = struct.unpack(">I", exact(4))
    return struct.pack(">I", n) + exact(n)


class FakeServer:
    """Listens on a fresh socket; ``handler(conn)`` runs for each accepted
    connection on its own thread; failures are collected in ``errors``."""

    def __init__(self, handler, path=None, listen=True):
        self.dir = tempfile.mkdtemp(prefix="sluicepy")
        self.path = path or os.path.join(self.dir, "fake.sock")
        self.handler = handler
        self.errors = []
        self.conns = []
        self.accepted = 0
        self._stop = False
        self.sock = None
        self._thread = None
        if listen:
            self.listen()

    def listen(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self):
        while not self._stop:
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.accepted += 1
            self.conns.append(c)
            threading.Thread(target=self._run, args=(c,), daemon=True).start()

    def _run(self, c):
        try:
            self.handler(c)
        except Exception as e:  # recorded for the test to assert on
            if not self._stop:
                self.errors.append(e)

    def close(self):
        self._stop = True
        if self._thread:
            self._thread.join(2)
        if self.sock:
            self.sock.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def welcome_frame(max_frame=1024, max_batch=4, max_key_len=32, version=2):
    return P.encode_welcome(version, b"fake", max_frame, max_batch, max_key_len)


def handshake(c, welcome=None, deadline_s=5):
    hello = read_frame(c, time.monotonic() + deadline_s)
    c.sendall(welcome or welcome_frame())
    return hello
