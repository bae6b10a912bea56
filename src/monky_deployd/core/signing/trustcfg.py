"""config.yaml's ``trust``: which release keys vouch for a bundle (contract v1.3).

    trust:
      keys: ["<base64 of a raw 32-byte Ed25519 public key>", ...]
      threshold: 1            # how many distinct trusted keys must have signed
      accept_unsigned: null   # null: true while keys is empty, false once a key is set

The default (no keys) accepts every bundle as before v1.3; an estate that starts signing sets
its keys with ``accept_unsigned: true`` first, then drops it (OPERATIONS.md, "Signed
bundles"). A model of ``config.Config`` kept here so that config.py only names it; pure.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

KEY_BYTES = 32


def keyid(public: bytes) -> str:
    """A key's id (contract v1.3): the lowercase hex SHA-256 of its raw 32 bytes."""
    return hashlib.sha256(public).hexdigest()


def public_key_bytes(text: str) -> bytes:
    """A configured public key's raw 32 bytes; ValueError naming what is wrong (never the
    key: it is public, but a pasted private key must not reach a log)."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("is not base64 (a raw 32-byte Ed25519 public key, base64)") from None
    if len(raw) != KEY_BYTES:
        raise ValueError(
            f"decodes to {len(raw)} bytes, not {KEY_BYTES} (a raw Ed25519 public key, base64; "
            "`monky-deployd bundle public-key` prints it)"
        )
    return raw


def _key(text: str) -> str:
    public_key_bytes(text)
    return text.strip()


class TrustCfg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: Annotated[list[Annotated[str, AfterValidator(_key)]], Field(max_length=64)] = []
    threshold: Annotated[int, Field(ge=1, le=64)] = 1
    accept_unsigned: bool | None = None

    @model_validator(mode="after")
    def _reachable(self) -> TrustCfg:
        distinct = len(self.trusted)
        if self.keys and self.threshold > distinct:
            raise ValueError(
                f"trust.threshold {self.threshold} is more than the {distinct} distinct "
                "key(s) in trust.keys: no bundle could ever be applied"
            )
        if not self.keys and self.accept_unsigned is False:
            raise ValueError(
                "trust.accept_unsigned: false needs at least one key in trust.keys: "
                "no bundle could ever be applied"
            )
        return self

    @property
    def trusted(self) -> dict[str, bytes]:
        """keyid -> raw public key, for every configured key."""
        return {keyid(raw): raw for raw in (public_key_bytes(k) for k in self.keys)}

    @property
    def unsigned_ok(self) -> bool:
        """Whether a bundle without signatures is applied: the setting, or (unset) only while
        no key is configured."""
        return not self.keys if self.accept_unsigned is None else self.accept_unsigned
