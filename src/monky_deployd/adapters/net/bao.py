"""OpenBao through hvac, carried by the agent's own httpx client.

``hvac_httpx.HttpxAdapter`` carries hvac's requests over the ``httpx.Client`` the transport
opened (plain or Ziti), so tenancy and OpenBao share one transport.
Every ``hvac.Client`` here is built with an explicit URL and token: hvac never falls back to
``VAULT_ADDR``, ``VAULT_TOKEN`` or ``~/.vault-token``.

Answers are translated at this boundary (messages name OpenBao and its address, never a token):

- 503 with "sealed"              -> ``BaoError(OPENBAO_SEALED)``
- other 5xx                      -> ``BaoError(OPENBAO_UNAVAILABLE)``
- connect error / timeout        -> ``DeployError(OPENBAO_UNREACHABLE)`` (``httperrors``; a
  ``DeployError`` raised by the transport itself, e.g. the Ziti dialer naming the fault, is
  re-raised as is)
- not HTTP, or a 200 that is not the JSON shape -> ``BaoError(OPENBAO_BAD_RESPONSE)``
- a body over ``openbao.max_body_bytes`` -> ``BaoError(OPENBAO_RESPONSE_TOO_LARGE)`` (read no
  further: ``httpio.read_capped``); past ``openbao.deadline_s`` -> ``OPENBAO_UNREACHABLE``, past
  the tick's deadline -> ``TICK_DEADLINE``
- login 400 "token is expired"   -> ``TokenError(GRANT_EXPIRED)``; other login 400 ->
  ``TokenError(GRANT_REJECTED)``
- lookup-self 403                -> ``None`` (expired or revoked; the status decides, not the text)
- renew-self 400/403             -> ``RenewRefused`` (the keeper rotates or logs in)
- KV 404 / key absent            -> ``BaoError(SECRET_MISSING)``; KV 403 -> ``SECRET_FORBIDDEN``
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import httpx
import hvac
import hvac.adapters
import hvac.exceptions
import hvac.utils

from monky_deployd.adapters.net import httperrors
from monky_deployd.adapters.net.hvac_httpx import HttpxAdapter
from monky_deployd.config import OpenBaoCfg
from monky_deployd.core.errors import (
    BaoError,
    Code,
    DeployError,
    TokenError,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Login:
    token: str
    ttl_s: int
    renewable: bool

    def __repr__(self) -> str:  # never print the token
        return f"Login(ttl_s={self.ttl_s}, renewable={self.renewable})"


@dataclass(frozen=True)
class TokenInfo:
    ttl_s: int
    expire_time: str | None
    renewable: bool


class RenewRefused(BaoError):
    """renew-self was refused: 400 (not renewable) or 403 (the token died meanwhile)."""

    def __init__(self, message: str, *, status: int, hint: str = "") -> None:
        super().__init__(message, code=Code.OPENBAO_RENEW_REFUSED, hint=hint)
        self.status = status


# -- the grant file --------------------------------------------------------------------------


def read_grant(path: Path) -> str:
    """The grant JWT from ``path``, trailing newline/spaces stripped (GRANT_MISSING/UNREADABLE)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise TokenError(
            f"the grant file {path} does not exist, so the agent cannot log in to OpenBao",
            code=Code.GRANT_MISSING,
            hint=f"that the kit installed {path} (owner monky-deployd, mode 0600), "
            "or `grant_file` in config.yaml",
        ) from exc
    except OSError as exc:
        raise TokenError(
            f"cannot read the grant file {path}: {exc.strerror or exc}",
            code=Code.GRANT_UNREADABLE,
            hint=f"owner and mode of {path}: owner monky-deployd, mode 0600",
        ) from exc
    try:
        text = raw.decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise TokenError(
            f"the grant file {path} is not a JWT (it holds non-ASCII bytes)",
            code=Code.GRANT_UNREADABLE,
            hint=f"that {path} is the grant.jwt of this environment's kit",
        ) from exc
    if not text or text.count(".") != 2 or any(c.isspace() for c in text):
        raise TokenError(
            f"the grant file {path} does not hold a JWT"
            + (" (it is empty)" if not text else " (expected three dot-separated parts)"),
            code=Code.GRANT_UNREADABLE,
            hint=f"that {path} is the grant.jwt of this environment's kit",
        )
    return text


# -- the client ------------------------------------------------------------------------------


class Bao:
    """The OpenBao calls the agent makes; one short-lived ``hvac.Client`` per token."""

    def __init__(self, client: httpx.Client, cfg: OpenBaoCfg) -> None:
        self._http = client
        self._cfg = cfg
        self.address = f"{cfg.host}:{cfg.port}"
        self.url = f"http://{self.address}"
        self._service = httperrors.Service(
            name="OpenBao",
            address=self.address,
            timeout_s=cfg.timeout_s,
            deadline_s=cfg.deadline_s,
            timeout_code=Code.OPENBAO_UNREACHABLE,
            timeout_hint=f"OpenBao's health and the transport to {self.address} "
            "(openbao.timeout_s per read, openbao.deadline_s per request)",
            unreachable_code=Code.OPENBAO_UNREACHABLE,
            unreachable_hint=f"that the OpenBao intercept {self.address} is reachable from this "
            "box (openbao.host/port in config.yaml, the #openbao-client role attribute)",
            bad=self._bad,
        )

    def _hvac(self, token: str) -> hvac.Client:
        # url, token and verify are always explicit: hvac must not consult VAULT_ADDR,
        # VAULT_TOKEN, ~/.vault-token or VAULT_CACERT.
        return hvac.Client(
            url=self.url,
            token=token,
            verify=True,
            cert=(None, None),
            adapter=HttpxAdapter,
            httpx_client=self._http,
            timeout_s=self._cfg.timeout_s,
            deadline_s=self._cfg.deadline_s,
            max_body_bytes=self._cfg.max_body_bytes,
            too_large=self._too_large,
        )

    # -- endpoints -----------------------------------------------------------------------

    def login_jwt(self, jwt: str) -> Login:
        what = f"POST /v1/auth/{self._cfg.jwt_mount}/login"
        try:
            answer = self._call(
                what,
                lambda: self._hvac("").auth.jwt.jwt_login(
                    role=self._cfg.role, jwt=jwt, use_token=False, path=self._cfg.jwt_mount
                ),
            )
        except hvac.exceptions.InvalidRequest as exc:
            words = _errors_text(exc)
            if "token is expired" in words.lower():
                raise TokenError(
                    f"the grant has expired: OpenBao at {self.address} refused the login "
                    "(token is expired); a new kit is needed for this environment",
                    code=Code.GRANT_EXPIRED,
                    hint="reveal a new kit for this environment and install its grant.jwt "
                    "on this box",
                    detail=words,
                ) from None
            raise self._grant_rejected(words) from None
        except (hvac.exceptions.Forbidden, hvac.exceptions.Unauthorized) as exc:
            raise self._grant_rejected(_errors_text(exc)) from None
        except hvac.exceptions.VaultError as exc:
            raise self._status_error(what, exc) from None
        try:
            auth = answer["auth"]
            return Login(
                token=_nonempty(auth["client_token"]),
                ttl_s=int(auth["lease_duration"]),
                renewable=bool(auth.get("renewable", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise self._bad(what, "a login answer without auth.client_token") from exc

    def lookup_self(self, token: str) -> TokenInfo | None:
        what = "GET /v1/auth/token/lookup-self"
        try:
            answer = self._call(what, lambda: self._hvac(token).auth.token.lookup_self())
        except hvac.exceptions.Forbidden:
            return None  # expired or revoked (OpenBao answers 403 "permission denied")
        except hvac.exceptions.VaultError as exc:
            raise self._status_error(what, exc) from None
        try:
            data = answer["data"]
            expire = data.get("expire_time")
            return TokenInfo(
                ttl_s=int(data["ttl"]),
                expire_time=str(expire) if expire else None,
                renewable=bool(data.get("renewable", False)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._bad(what, "a lookup-self answer without data.ttl") from exc

    def renew_self(self, token: str) -> TokenInfo:
        what = "POST /v1/auth/token/renew-self"
        try:
            answer = self._call(what, lambda: self._hvac(token).auth.token.renew_self())
        except (hvac.exceptions.InvalidRequest, hvac.exceptions.Forbidden) as exc:
            status = 403 if isinstance(exc, hvac.exceptions.Forbidden) else 400
            raise RenewRefused(
                f"OpenBao at {self.address} refused to renew the token "
                f"(HTTP {status}: {_errors_text(exc)})",
                status=status,
                hint="the lease token's renewable flag and max TTL",
            ) from None
        except hvac.exceptions.VaultError as exc:
            raise self._status_error(what, exc) from None
        try:
            auth = answer["auth"]
            warnings = answer.get("warnings") or []
            if warnings:
                log.info(
                    "OpenBao capped the renewal",
                    extra={"event": "token.renew_capped", "warnings": [str(w) for w in warnings]},
                )
            return TokenInfo(
                ttl_s=int(auth["lease_duration"]),
                expire_time=None,
                renewable=bool(auth.get("renewable", False)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._bad(what, "a renew-self answer without auth.lease_duration") from exc

    def read_secret(self, token: str, path: str, key: str) -> object:
        mount = self._cfg.kv_mount
        what = f"GET /v1/{mount}/data/{path}"
        try:
            answer = self._call(
                what,
                lambda: self._hvac(token).secrets.kv.v2.read_secret_version(
                    path=path, mount_point=mount, raise_on_deleted_version=True
                ),
            )
        except hvac.exceptions.InvalidPath:
            raise self._missing(path, key, "the path does not exist (HTTP 404)") from None
        except hvac.exceptions.Forbidden:
            raise BaoError(
                f"OpenBao at {self.address} denied reading secret path {mount}/{path} "
                "(HTTP 403 permission denied)",
                code=Code.SECRET_FORBIDDEN,
                outcome="refused",
                hint=f"that this environment's token policy allows reading {mount}/data/{path} "
                "(the bundle's manifest may name another environment's path)",
            ) from None
        except hvac.exceptions.VaultError as exc:
            raise self._status_error(what, exc) from None
        try:
            data = answer["data"]["data"]
        except (KeyError, TypeError) as exc:
            raise self._bad(what, "a KV v2 answer without data.data") from exc
        if data is None:
            raise self._missing(path, key, "its current version is deleted")
        if not isinstance(data, dict):
            raise self._bad(what, "a KV v2 answer whose data.data is not an object")
        if key not in data:
            raise self._missing(path, key, f"the path has no key {key!r}")
        return data[key]

    # -- plumbing ------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            answer = fn()
        except hvac.exceptions.VaultError:
            raise
        except DeployError:
            raise
        except httpx.TransportError as exc:
            raise httperrors.translate(exc, self._service, what) from exc
        if not isinstance(answer, dict):
            status = getattr(answer, "status_code", "?")
            raise self._bad(what, f"HTTP {status} with a body that is not a JSON object")
        return answer

    def _status_error(self, what: str, exc: hvac.exceptions.VaultError) -> BaoError:
        words = _errors_text(exc)
        status = _status_of(exc)
        if status == 503 and "sealed" in words.lower():
            return BaoError(
                f"OpenBao at {self.address} is sealed ({what} answered 503)",
                code=Code.OPENBAO_SEALED,
                hint=f"that OpenBao at {self.address} is unsealed (operator action)",
                detail=words,
            )
        if status is not None and status >= 500:
            return BaoError(
                f"OpenBao at {self.address} failed {what} with HTTP {status}",
                code=Code.OPENBAO_UNAVAILABLE,
                hint=f"OpenBao's health and logs at {self.address}",
                detail=words,
            )
        return BaoError(
            f"OpenBao at {self.address} answered {what} with HTTP {status or '?'}",
            code=Code.OPENBAO_BAD_RESPONSE,
            hint=f"OpenBao's logs at {self.address}; the agent speaks the OpenBao v1 API",
            detail=words,
        )

    def _bad(self, what: str, shape: str) -> BaoError:
        return BaoError(
            f"OpenBao at {self.address} answered {what} with {shape}",
            code=Code.OPENBAO_BAD_RESPONSE,
            hint=f"that {self.address} is OpenBao (openbao.host/port in config.yaml) "
            "and not another service",
        )

    def _too_large(self) -> BaoError:
        return BaoError(
            f"OpenBao at {self.address} answered with more than {self._cfg.max_body_bytes} "
            "bytes (openbao.max_body_bytes); refused unread",
            code=Code.OPENBAO_RESPONSE_TOO_LARGE,
            hint=f"that {self.address} is OpenBao and not another service; a secret of "
            "megabytes is a mistake (or raise openbao.max_body_bytes)",
        )

    def _grant_rejected(self, words: str) -> TokenError:
        return TokenError(
            f"OpenBao at {self.address} rejected the grant at login "
            f"(auth/{self._cfg.jwt_mount}, role {self._cfg.role}): {words}",
            code=Code.GRANT_REJECTED,
            hint="that grant.jwt belongs to this environment's kit and that "
            "openbao.jwt_mount/role in config.yaml match the estate",
            detail=words,
        )

    def _missing(self, path: str, key: str, why: str) -> BaoError:
        mount = self._cfg.kv_mount
        return BaoError(
            f"secret {mount}/{path} key {key!r} is missing on OpenBao at {self.address}: {why}",
            code=Code.SECRET_MISSING,
            outcome="refused",
            hint=f"that {mount}/{path} holds the key {key!r} for this environment "
            "(the bundle's manifest names it)",
        )


def _status_of(exc: hvac.exceptions.VaultError) -> int | None:
    for cls, status in (
        (hvac.exceptions.InvalidRequest, 400),
        (hvac.exceptions.Unauthorized, 401),
        (hvac.exceptions.Forbidden, 403),
        (hvac.exceptions.InvalidPath, 404),
        (hvac.exceptions.RateLimitExceeded, 429),
        (hvac.exceptions.InternalServerError, 500),
        (hvac.exceptions.VaultNotInitialized, 501),
        (hvac.exceptions.BadGateway, 502),
        (hvac.exceptions.VaultDown, 503),
    ):
        if isinstance(exc, cls):
            return status
    return None


def _errors_text(exc: hvac.exceptions.VaultError) -> str:
    errors = getattr(exc, "errors", None)
    if errors:
        return "; ".join(str(e) for e in errors)[:500]
    return (str(exc.args[0]) if exc.args and exc.args[0] else "")[:500]


def _nonempty(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("empty")
    return value
