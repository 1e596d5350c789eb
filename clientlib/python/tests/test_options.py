"""Defaults are the Go client's, and the socket path is found as the spec says."""

import os
import tempfile
import unittest
from unittest import mock

from sluice.client import Options
from sluice.reach import parse_uids, socket_path_choice


class OptionsTest(unittest.TestCase):
    def test_defaults_match_the_go_client(self):
        o = Options(socket_path="/x")
        o.fill()
        self.assertEqual((o.timeout, o.conns, o.dial_timeout, o.reconnect_min, o.reconnect_max, o.log_interval),
                         (0.005, 2, 1.0, 0.010, 2.0, 10.0))
        self.assertFalse(o.fail_closed)
        me = os.geteuid()
        self.assertEqual(o.daemon_uids, [0] if me == 0 else [0, me])

    def test_socket_path_order(self):
        with tempfile.TemporaryDirectory() as xdg:
            with mock.patch.dict(os.environ, {"SLUICE_SOCKET": "/s/d.sock", "XDG_RUNTIME_DIR": xdg}):
                self.assertEqual(socket_path_choice()[0], "/s/d.sock")
            with mock.patch.dict(os.environ, {"SLUICE_SOCKET": "", "XDG_RUNTIME_DIR": xdg}):
                self.assertEqual(socket_path_choice()[0], os.path.join(xdg, "sluice", "sluiced.sock"))
            with mock.patch.dict(os.environ, {"SLUICE_SOCKET": "", "XDG_RUNTIME_DIR": xdg + "/missing",
                                              "TMPDIR": "/tmpx"}):
                want = "/run/sluice/sluiced.sock" if os.getuid() == 0 else "/tmpx/sluice-%d/sluiced.sock" % os.getuid()
                self.assertEqual(socket_path_choice()[0], want)

    def test_uid_lists(self):
        self.assertEqual(parse_uids("0, 1000,"), [0, 1000])
        for bad in ("", "x", "4294967295", "-1"):
            with self.subTest(bad=bad):
                with self.assertRaises(ValueError):
                    parse_uids(bad)


if __name__ == "__main__":
    unittest.main()
