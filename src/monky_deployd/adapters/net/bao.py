"""OpenBao through hvac, carried by the agent's own httpx client.

``hvac_httpx.HttpxAdapter`` carries hvac's requests over the ``httpx.Client`` the transport
opened (plain or Ziti), so tenancy and OpenBao share one transport.
Every ``hvac.Client`` here is built with an explicit URL and token: hvac never falls back to
``VAULT_ADDR``, ``VAULT_TOKEN`` or ``~/.vault-token``.
``lookup-self``, the one OpenBao call of a steady tick, is sent straight over the same client
with the same headers and cap (``Bao._get_json``): hvac, and ``requests`` under it, is imported
only by a tick that logs in, renews, rotates, revokes or reads secrets (issue 15).

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
- login 400 'role "<role>" could not be found' -> ``BaoError(OPENBAO_JWT_ROLE_MISSING)``
- login 403                      -> ``BaoError(OPENBAO_JWT_MOUNT_MISSING)``: the login path is
  unauthenticated, so a 403 there is OpenBao's answer for a path it does not route (no auth
  mount ``openbao.jwt_mount``); the grant was never looked at
- lookup-self 403                -> ``None`` (expired or revoked; the status decides, not the text)
- renew-self 400/403             -> ``RenewRefused`` (the keeper rotates or logs in)
- revoke-self 204                -> done; 403 (already dead) -> done as well
- KV 404 ``{"errors":[]}`` / key absent -> ``BaoError(SECRET_MISSING)``
- KV 404 with a data envelope    -> ``SECRET_DESTROYED`` (``metadata.destroyed``) or
  ``SECRET_DELETED`` (``metadata.deletion_time``, named in the sentence)
- KV 403                         -> the agent asks ``GET /v1/sys/internal/ui/mounts`` (the
  default policy allows it) which mounts the token sees: ``kv_mount`` not among them while
  another KV mount is -> ``OPENBAO_KV_MOUNT_MISSING`` naming the ones it sees; otherwise
  ``SECRET_FORBIDDEN`` (the policy denies the path)

Over ~400 lines on purpose: every OpenBao call the agent makes and what each answer means, at
one boundary (the words are ``baowords``').
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from monky_deployd import USER_AGENT
from monky_deployd.adapters.httpio import read_capped
from monky_deployd.adapters.net import baowords, httperrors
from monky_deployd.config import OpenBaoCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import BaoError, DeployError

if TYPE_CHECKING:  # hvac (and requests under it) loads at the first call made through it:
    # lookup-self, a steady tick's only OpenBao call, goes straight over httpx. A method that
    # names hvac imports it itself (mypy finds a method that forgets: no module-level `hvac`).
    from hvac import Client as HvacClient

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


# (token, path) -> the KV page read, or the refusal for a key (``Bao.read_secret``)
KvPages = dict[tuple[str, str], "dict[str, object] | Callable[[str], BaoError]"]


# -- the client ------------------------------------------------------------------------------


class Bao:
    """The OpenBao calls the agent makes; one short-lived ``hvac.Client`` per token."""

    def __init__(self, client: httpx.Client, cfg: OpenBaoCfg) -> None:
        self._http = client
        self._cfg = cfg
        self.address = f"{cfg.host}:{cfg.port}"
        self.url = f"http://{self.address}"
        self._words = baowords.Words(self.address, cfg)
        self._service = httperrors.HttpService(
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
            bad=self._words.bad,
        )

    def _hvac(self, token: str) -> HvacClient:
        import hvac

        from monky_deployd.adapters.net.hvac_httpx import HttpxAdapter

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
            too_large=self._words.too_large,
        )

    # -- endpoints -----------------------------------------------------------------------

    def login_jwt(self, jwt: str) -> Login:
        import hvac.exceptions

        what = f"POST /v1/auth/{self._cfg.jwt_mount}/login"
        try:
            answer = self._call(
                what,
                lambda: self._hvac("").auth.jwt.jwt_login(
                    role=self._cfg.role, jwt=jwt, use_token=False, path=self._cfg.jwt_mount
                ),
            )
        except hvac.exceptions.InvalidRequest as exc:
            words = baowords.errors_text(exc)
            if "token is expired" in words.lower():
                raise self._words.grant_expired(words) from None
            if words == f'role "{self._cfg.role}" could not be found':
                raise self._words.jwt_role_missing(what, words) from None
            raise self._words.grant_rejected(words) from None
        except hvac.exceptions.Forbidden as exc:
            raise self._words.jwt_mount_missing(what, baowords.errors_text(exc)) from None
        except hvac.exceptions.Unauthorized as exc:
            raise self._words.grant_rejected(baowords.errors_text(exc)) from None
        except hvac.exceptions.VaultError as exc:
            raise self._words.status_error(what, exc) from None
        try:
            auth = answer["auth"]
            return Login(
                token=_nonempty(auth["client_token"]),
                ttl_s=int(auth["lease_duration"]),
                renewable=bool(auth.get("renewable", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise self._words.bad(what, "a login answer without auth.client_token") from exc

    def lookup_self(self, token: str) -> TokenInfo | None:
        """The stored token's TTL; None when OpenBao says 403 (expired or revoked). Straight over
        httpx: a steady tick's only OpenBao call imports no hvac; an error status is still
        turned into hvac's exception and worded like every other call's."""
        what = "GET /v1/auth/token/lookup-self"
        answer = self._get_json(what, "/v1/auth/token/lookup-self", token)
        if answer is None:
            return None  # expired or revoked (OpenBao answers 403 "permission denied")
        try:
            data = answer["data"]
            expire = data.get("expire_time")
            return TokenInfo(
                ttl_s=int(data["ttl"]),
                expire_time=str(expire) if expire else None,
                renewable=bool(data.get("renewable", False)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise self._words.bad(what, "a lookup-self answer without data.ttl") from exc

    def renew_self(self, token: str) -> TokenInfo:
        import hvac.exceptions

        what = "POST /v1/auth/token/renew-self"
        try:
            answer = self._call(what, lambda: self._hvac(token).auth.token.renew_self())
        except (hvac.exceptions.InvalidRequest, hvac.exceptions.Forbidden) as exc:
            status = 403 if isinstance(exc, hvac.exceptions.Forbidden) else 400
            raise RenewRefused(
                f"OpenBao at {self.address} refused to renew the token "
                f"(HTTP {status}: {baowords.errors_text(exc)})",
                status=status,
                hint="the lease token's renewable flag and max TTL",
            ) from None
        except hvac.exceptions.VaultError as exc:
            raise self._words.status_error(what, exc) from None
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
            raise self._words.bad(what, "a renew-self answer without auth.lease_duration") from exc

    def read_secret(self, token: str, path: str, key: str, pages: KvPages | None = None) -> object:
        """``data.data[key]`` of the KV v2 ``path``. With ``pages`` (one apply's: the tick's
        secrets phase), one read per distinct path and token however many keys a manifest takes
        from it: the answer, or a path that is missing or deleted, is kept there and worded for
        each key. Without, every call reads."""
        pages = {} if pages is None else pages
        page = pages.get((token, path))
        if page is None:
            page = pages[(token, path)] = self._read_kv(token, path)
        if callable(page):
            raise page(key)
        if key not in page:
            raise self._words.missing(path, key, f"the path has no key {key!r}")
        return page[key]

    def _read_kv(self, token: str, path: str) -> dict[str, object] | Callable[[str], BaoError]:
        """The path's ``data.data``; for a path that does not exist or whose version is deleted
        or destroyed, the refusal for a given key. Every other fault raises."""
        import hvac.exceptions

        mount = self._cfg.kv_mount
        what = f"GET /v1/{mount}/data/{path}"
        try:
            answer = self._call(
                what,
                lambda: self._hvac(token).secrets.kv.v2.read_secret_version(
                    path=path, mount_point=mount, raise_on_deleted_version=True
                ),
            )
        except hvac.exceptions.InvalidPath as exc:
            gone = baowords.deleted_version(exc.json)
            if gone is not None:
                return lambda key: self._words.deleted(path, key, *gone)
            return lambda key: self._words.missing(path, key, "the path does not exist (HTTP 404)")
        except hvac.exceptions.Forbidden:
            raise self._words.kv_forbidden(path, self.visible_kv_mounts(token)) from None
        except hvac.exceptions.VaultError as exc:
            raise self._words.status_error(what, exc) from None
        try:
            data = answer["data"]["data"]
        except (KeyError, TypeError) as exc:
            raise self._words.bad(what, "a KV v2 answer without data.data") from exc
        if not isinstance(data, dict):
            raise self._words.bad(what, "a KV v2 answer whose data.data is not an object")
        return data

    def revoke_self(self, token: str) -> None:
        """Revoke ``token`` (after a rotation: the old lease). A 403 means it is already dead,
        which is what was wanted; any other failure raises (the caller only warns)."""
        import hvac.exceptions

        what = "POST /v1/auth/token/revoke-self"
        try:
            self._call_empty(what, lambda: self._hvac(token).auth.token.revoke_self())
        except hvac.exceptions.Forbidden:
            return
        except hvac.exceptions.VaultError as exc:
            raise self._words.status_error(what, exc) from None

    def health(self) -> None:
        """``GET /v1/sys/health`` (unauthenticated; doctor): returns when OpenBao answers and is
        unsealed (a standby counts); OPENBAO_SEALED, OPENBAO_UNAVAILABLE, OPENBAO_UNREACHABLE
        otherwise, as for every other call."""
        import hvac.exceptions

        what = "GET /v1/sys/health"
        try:
            self._call(
                what,
                lambda: self._hvac("").adapter.get("/v1/sys/health", params={"standbyok": "true"}),
            )
        except hvac.exceptions.VaultError as exc:
            raise self._words.status_error(what, exc) from None

    def visible_kv_mounts(self, token: str) -> list[str] | None:
        """The KV v2 mounts ``token`` can see (``GET /v1/sys/internal/ui/mounts``, allowed by
        OpenBao's default policy), without the trailing slash; None when OpenBao will not say."""
        import hvac.exceptions

        try:
            answer = self._call(
                "GET /v1/sys/internal/ui/mounts",
                lambda: self._hvac(token).adapter.get("/v1/sys/internal/ui/mounts"),
            )
            mounts = answer["data"]["secret"]
            return sorted(
                name.rstrip("/")
                for name, info in mounts.items()
                if isinstance(info, dict)
                and info.get("type") == "kv"
                and str((info.get("options") or {}).get("version")) == "2"
            )
        except (DeployError, hvac.exceptions.VaultError, KeyError, TypeError, AttributeError):
            return None

    # -- plumbing ------------------------------------------------------------------------

    def _get_json(self, what: str, path: str, token: str) -> dict[str, Any] | None:
        """GET ``path`` with ``token`` as the hvac adapter would send it (same headers, same
        ``read_capped``): the JSON object on 200, None on 403; any other error status raises the
        same ``BaoError`` an hvac call would (hvac is imported only then)."""
        url = f"{self.url}{path}"
        headers = {"User-Agent": USER_AGENT, "X-Vault-Request": "true", "X-Vault-Token": token}
        try:
            response = read_capped(
                self._http,
                "GET",
                url,
                max_bytes=self._cfg.max_body_bytes,
                deadline_s=self._cfg.deadline_s,
                too_large=self._words.too_large,
                headers=headers,
                timeout=self._cfg.timeout_s,
                follow_redirects=False,
            )
        except DeployError:
            raise
        except httpx.TransportError as exc:
            raise httperrors.translate(exc, self._service, what) from exc
        if response.status_code == 403:
            return None
        if response.status_code >= 400:
            import hvac.exceptions

            from monky_deployd.adapters.net.hvac_httpx import HttpxAdapter
            from monky_deployd.core.render.mask import Masker

            try:
                HttpxAdapter._raise_for_error("GET", url, response, Masker((token,)))
            except hvac.exceptions.VaultError as exc:
                raise self._words.status_error(what, exc) from None
        try:
            answer = response.json() if response.status_code == 200 else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise self._words.bad(
                what, f"HTTP {response.status_code} with a body that is not a JSON object"
            )
        return answer

    def _call_empty(self, what: str, fn: Callable[[], object]) -> None:
        """A call whose success is 204 (no body)."""
        import hvac.exceptions

        try:
            answer = fn()
        except (hvac.exceptions.VaultError, DeployError):
            raise
        except httpx.TransportError as exc:
            raise httperrors.translate(exc, self._service, what) from exc
        status = getattr(answer, "status_code", 200)
        if not 200 <= status < 300:
            raise self._words.bad(what, f"HTTP {status}")

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        import hvac.exceptions

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
            raise self._words.bad(what, f"HTTP {status} with a body that is not a JSON object")
        return answer


def _nonempty(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("empty")
    return value
