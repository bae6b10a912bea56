"""The kit's grant: an RS256 JWT signed by tenancy, verified by the fake OpenBao's JWT mount."""

from __future__ import annotations

import uuid
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from monky_deployd_testkit.fakes.clock import Clock


class GrantIssuer:
    """Holds an RSA key pair and mints grants with the claims of contract.md."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock
        self._private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.public_key = self._private_key.public_key()
        self.public_key_pem: str = self.public_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode()
        self.minted_jtis: list[str] = []

    def mint(
        self,
        env: str,
        *,
        jti: str | None = None,
        exp_in_s: float = 3 * 86400,
        aud: str | list[str] = "openbao",
        iss: str = "monky-tenancy",
        now: float | None = None,
        sub: str | None = None,
        extra_claims: dict[str, Any] | None = None,
    ) -> str:
        """A signed grant for `env`: iss, aud, sub (= env unless given), env, jti, iat, exp."""
        if now is None:
            now = self.clock.now() if self.clock is not None else _real_now()
        jti = jti or f"kit-{uuid.uuid4().hex[:16]}"
        claims: dict[str, Any] = {
            "iss": iss,
            "aud": aud,
            "sub": env if sub is None else sub,
            "env": env,
            "jti": jti,
            "iat": int(now),
            "exp": int(now + exp_in_s),
        }
        claims.update(extra_claims or {})
        self.minted_jtis.append(jti)
        return jwt.encode(claims, self._private_key, algorithm="RS256")


def _real_now() -> float:
    import time

    return time.time()
