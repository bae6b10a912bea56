"""Ed25519 and RFC 8785 for signed bundles (contract v1.3): thin calls into ``cryptography``
and ``rfc8785``, imported only where a bundle is checked or signed (never on a no-op tick).

What the signatures prove is ``core.signing.trust``'s; this module only canonicalizes, verifies,
signs and reads a private key (PEM PKCS#8 as ``openssl genpkey -algorithm ed25519`` writes it, or
the raw 32-byte seed in base64). A private key's bytes never reach an exception's text.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from monky_deployd.core.signing.trustcfg import KEY_BYTES


class KeyUnreadable(ValueError):
    """A private key that is neither PEM Ed25519 nor a base64 32-byte seed (the reason only)."""


def canonical(obj: Any) -> bytes:
    """The RFC 8785 (JCS) UTF-8 bytes of ``obj``; ValueError when JCS cannot represent it (an
    integer beyond 2**53, a lone surrogate)."""
    return rfc8785.dumps(obj)


def verify(public: bytes, sig: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(sig, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def sign(key: Ed25519PrivateKey, message: bytes) -> bytes:
    return key.sign(message)


def public_raw(key: Ed25519PrivateKey) -> bytes:
    return key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def private_key(data: bytes) -> Ed25519PrivateKey:
    """A private key from its file's bytes; ``KeyUnreadable`` naming the expected forms."""
    text = data.strip()
    if text.startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(text, password=None)
        except (ValueError, TypeError):
            key = None
        if isinstance(key, Ed25519PrivateKey):
            return key
        raise KeyUnreadable("the PEM is not an unencrypted Ed25519 private key (PKCS#8)")
    try:
        seed = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        seed = b""
    if len(seed) != KEY_BYTES:
        raise KeyUnreadable("not a PEM Ed25519 private key nor a base64 32-byte Ed25519 seed")
    return Ed25519PrivateKey.from_private_bytes(seed)
