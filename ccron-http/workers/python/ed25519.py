"""Ed25519 signatures (RFC 8032), pure Python, standard library only.

A reference-style implementation for a ccron worker's answer signatures: deterministic
signing and strict verification in extended twisted Edwards coordinates. It is not
constant-time (Python integers are not): keep the worker's key on a machine you trust, or
use a vetted library (e.g. PyNaCl) where one is available. `python3 ed25519.py` runs the
RFC 8032 test vectors.
"""

import hashlib

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def _add(a, b):
    # Extended coordinates (X, Y, Z, T) with x = X/Z, y = Y/Z, x*y = T/Z (RFC 8032, 5.1.4).
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    aa = (y1 - x1) * (y2 - x2) % P
    bb = (y1 + x1) * (y2 + x2) % P
    cc = 2 * t1 * t2 * D % P
    dd = 2 * z1 * z2 % P
    e, f, g, h = bb - aa, dd - cc, dd + cc, bb + aa
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _mul(s, point):
    q = (0, 1, 1, 0)
    while s > 0:
        if s & 1:
            q = _add(q, point)
        point = _add(point, point)
        s >>= 1
    return q


def _equal(a, b):
    return (a[0] * b[2] - b[0] * a[2]) % P == 0 and (a[1] * b[2] - b[1] * a[2]) % P == 0


def _recover_x(y, sign):
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P != 0:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P != 0:
        return None
    if (x & 1) != sign:
        x = P - x
    return x


_GY = 4 * pow(5, P - 2, P) % P
_GX = _recover_x(_GY, 0)
G = (_GX, _GY, 1, _GX * _GY % P)


def _compress(point):
    zinv = pow(point[2], P - 2, P)
    x = point[0] * zinv % P
    y = point[1] * zinv % P
    return int.to_bytes(y | ((x & 1) << 255), 32, "little")


def _decompress(data):
    if len(data) != 32:
        return None
    y = int.from_bytes(data, "little")
    sign = y >> 255
    y &= (1 << 255) - 1
    x = _recover_x(y, sign)
    if x is None:
        return None
    return (x, y, 1, x * y % P)


def _expand(secret):
    if len(secret) != 32:
        raise ValueError("an ed25519 secret is 32 bytes")
    h = hashlib.sha512(secret).digest()
    a = int.from_bytes(h[:32], "little")
    a &= (1 << 254) - 8
    a |= 1 << 254
    return a, h[32:]


def public_key(secret):
    """The 32-byte public key of a 32-byte secret."""
    a, _ = _expand(secret)
    return _compress(_mul(a, G))


class Signer:
    """A signing key: the public key is computed once."""

    def __init__(self, secret):
        self._a, self._prefix = _expand(secret)
        self.public = _compress(_mul(self._a, G))

    def sign(self, msg):
        r = int.from_bytes(hashlib.sha512(self._prefix + msg).digest(), "little") % L
        big_r = _compress(_mul(r, G))
        h = int.from_bytes(hashlib.sha512(big_r + self.public + msg).digest(), "little") % L
        s = (r + h * self._a) % L
        return big_r + int.to_bytes(s, 32, "little")


def verify(public, msg, signature):
    """Whether `signature` is valid for `msg` under `public` (cofactorless, as RFC 8032)."""
    if len(public) != 32 or len(signature) != 64:
        return False
    a = _decompress(public)
    r = _decompress(signature[:32])
    if a is None or r is None:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= L:
        return False
    h = int.from_bytes(hashlib.sha512(signature[:32] + public + msg).digest(), "little") % L
    return _equal(_mul(s, G), _add(r, _mul(h, a)))


# RFC 8032, section 7.1, tests 1 to 3: (secret, public, message, signature).
VECTORS = [
    (
        "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
    (
        "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    ),
]


def self_test():
    """Checks the RFC 8032 vectors; raises AssertionError on a mismatch."""
    for secret, public, msg, sig in VECTORS:
        signer = Signer(bytes.fromhex(secret))
        assert signer.public.hex() == public, "public key"
        got = signer.sign(bytes.fromhex(msg))
        assert got.hex() == sig, "signature"
        assert verify(signer.public, bytes.fromhex(msg), got)
        bad = bytearray(got)
        bad[0] ^= 1
        assert not verify(signer.public, bytes.fromhex(msg), bytes(bad))


if __name__ == "__main__":
    self_test()
    print("ed25519: RFC 8032 vectors ok")
