"""The spec's test vectors (ipc/testdata/vectors.json): every frame decodes to
its readable message; every canonical frame is exactly what this package
encodes for that message; bounded keys derive as listed."""

import unittest

from sluice import protocol as P

from . import vectors as V


class VectorsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.data = V.load()

    def test_format(self):
        self.assertEqual(self.data["format"], "sluice-ipc-vectors/1")
        self.assertGreater(len(self.data["vectors"]), 100)

    def test_bounded_keys(self):
        for bk in self.data["bounded_keys"]:
            with self.subTest(key=bk.get("key", bk["key_hex"])):
                got = P.bounded_key(bytes.fromhex(bk["key_hex"]), bk["max_key_len"])
                self.assertEqual(got.hex(), bk["bounded_hex"])
                if bk["max_key_len"] > 0:
                    self.assertLessEqual(len(got), bk["max_key_len"])

    def test_bounded_key_short_limits(self):
        k = "user:0123456789abcdefghijklmnopqrstuvwxyz"
        self.assertEqual(P.bounded_key(k, 23), b"#EWMARNiCtoD9S8T0_D38uA")
        self.assertEqual(P.bounded_key(k, 16), b"EWMARNiCtoD9S8T0")
        self.assertEqual(P.bounded_key(k, 0), k.encode())

    def test_every_frame_decodes_to_its_message(self):
        n = 0
        for v in self.data["vectors"]:
            if v["message"] is None:
                continue
            with self.subTest(exchange=v["exchange"], step=v["step"]):
                raw = bytes.fromhex(v["hex"])
                body = raw[4:]
                self.assertEqual(int.from_bytes(raw[:4], "big"), len(body))
                got = V.readable(P.decode(body, from_server=v["from"] == "server"))
                want = dict(v["message"])
                self.assertEqual(got, want)
                n += 1
        self.assertGreater(n, 100)

    def test_canonical_frames_encode_exactly(self):
        n = 0
        for v in self.data["vectors"]:
            if not v["canonical"] or v["message"] is None:
                continue
            with self.subTest(exchange=v["exchange"], step=v["step"], name=v["name"]):
                self.assertEqual(V.encode(v["message"]).hex(), v["hex"])
                n += 1
        self.assertGreater(n, 100)

    def test_invalid_frames_do_not_decode(self):
        # A server that answers with such frames is a protocol error for the client.
        for body in (b"", b"\x93\x03\xff\xc3",  # negative id
                     b"\x94\x03\x01\xc3\x90\x00",  # trailing byte
                     b"\x94\x03\x01\x01\x90",  # allowed not a bool
                     b"\x92\x09\x01"):  # unknown type
            with self.subTest(body=body.hex()):
                with self.assertRaises(P.ProtocolError):
                    P.decode(body)


if __name__ == "__main__":
    unittest.main()
