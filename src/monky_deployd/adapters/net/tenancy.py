"""The tenancy deploy API client (contract.md, "Tenancy deploy API").

Every answer is translated at this boundary into what the agent can act on:

- 401 ``GRANT_SUPERSEDED``   -> ``TokenError(code=Code.GRANT_SUPERSEDED)`` (a newer kit exists)
- 401 ``TOKEN_INVALID``      -> ``TokenError(code=Code.TOKEN_INVALID)``
- 403 ``ENV_MISMATCH``       -> ``TokenError(code=Code.ENV_MISMATCH)``
- 429 ``LEASE_RATE_LIMITED`` -> ``RateLimited`` (carries ``retry_after_s``)
- 5xx                        -> ``DeployError(code=Code.TENANCY_UNAVAILABLE)``
- unreachable / timeout / past ``tenancy.deadline_s`` -> ``DeployError(code=Code.TENANCY_UNREACHABLE
  / TENANCY_TIMEOUT)``; past the tick's deadline -> ``TICK_DEADLINE``
  (``httperrors``; a fault the Ziti dialer named is re-raised as is)
- not HTTP / not JSON / wrong shape -> ``DeployError(code=Code.TENANCY_BAD_RESPONSE)``
- larger than max_bundle_bytes -> ``DeployError(code=Code.TENANCY_RESPONSE_TOO_LARGE)``
  (``httpio.read_capped``: streamed, the connection closed unread)

Messages name tenancy and its address, never a token: an error body's words are masked
(``core.render.mask``) with the bearer token the request carried before they go anywhere.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from monky_deployd import USER_AGENT
from monky_deployd.adapters.httpio import read_capped
from monky_deployd.adapters.net import httperrors
from monky_deployd.config import TenancyCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError, TokenError
from monky_deployd.core.render.mask import Masker
from monky_deployd.core.wire.checkin import CheckinRequest

if TYPE_CHECKING:
    from monky_deployd.core.wire.answers import Lease as Lease

log = logging.getLogger(__name__)


class RateLimited(DeployError):
    """LEASE_RATE_LIMITED with tenancy's wait: TokenKeeper carries on with the token it holds."""

    def __init__(self, message: str, *, retry_after_s: int, hint: str = "") -> None:
        super().__init__(message, code=Code.LEASE_RATE_LIMITED, hint=hint)
        self.retry_after_s = retry_after_s


class ReportRefused(DeployError):
    """Tenancy refused a report for good (HTTP 4xx other than 401 and 429): sending the same
    body again cannot help, so the outbox drops it (``agent.recover.deliver_outbox``)."""


@dataclass(frozen=True)
class Checkin:
    status: int  # 200, 204 or 304
    revision: str | None = None
    bundle: dict[str, Any] | None = None


@dataclass(frozen=True)
class Probe:
    status: int
    date: str | None  # the answer's Date header, as sent


class Tenancy:
    def __init__(
        self, client: httpx.Client, cfg: TenancyCfg, env: str, *, max_body_bytes: int
    ) -> None:
        self._client = client
        self._cfg = cfg
        self.env = env
        self.address = f"{cfg.host}:{cfg.port}"
        self.url = f"http://{self.address}"
        self._max_body = max_body_bytes
        self._service = httperrors.HttpService(
            name="tenancy",
            address=self.address,
            timeout_s=cfg.timeout_s,
            deadline_s=cfg.deadline_s,
            timeout_code=Code.TENANCY_TIMEOUT,
            timeout_hint="the tenancy service's health and the transport to "
            f"{self.address} (tenancy.timeout_s per read, tenancy.deadline_s per request)",
            unreachable_code=Code.TENANCY_UNREACHABLE,
            unreachable_hint=f"that the tenancy intercept {self.address} is reachable from this "
            "box (the intercept port is 443)",
            bad=lambda what, shape: self._bad(what.removeprefix("POST /"), shape),
        )

    # -- endpoints ---------------------------------------------------------------------------

    def lease(self, token: str) -> Lease:
        resp = self._post("lease", token, {})
        if resp.status_code != 201:
            self._raise_unexpected("lease", resp, token)
        body = self._json("lease", resp)
        try:
            from monky_deployd.core.wire import answers  # (a 304 reads none)

            return answers.LeaseAnswer.model_validate(body).lease
        except ValueError:  # a ValidationError: it holds the token, so it goes no further
            pass
        raise self._bad("lease", "the lease answer lacks lease.id/token/ttl_s")

    def checkin(
        self, token: str, body: CheckinRequest | dict[str, Any], revision: str | None
    ) -> Checkin:
        headers = {"If-None-Match": f'"{revision}"'} if revision else {}
        payload = body.body() if isinstance(body, CheckinRequest) else body
        resp = self._post("checkin", token, payload, headers)
        if resp.status_code == 304:
            return Checkin(304, revision=revision)
        if resp.status_code == 204:
            return Checkin(204)
        if resp.status_code != 200:
            self._raise_unexpected("checkin", resp, token)
        data = self._json("checkin", resp)
        try:
            from monky_deployd.core.wire import answers  # (a 304 reads none)

            answer = answers.CheckinAnswer.model_validate(data)
        except ValueError:  # a ValidationError: it holds the answer's values, kept out of ours
            answer = None
        if answer is None:
            raise self._bad("checkin", "the check-in answer lacks a revision string and bundle")
        return Checkin(200, revision=answer.revision, bundle=answer.bundle)

    def report(self, token: str, body: dict[str, Any]) -> None:
        resp = self._post("reports", token, body)
        if resp.status_code not in (200, 201, 202, 204):
            try:
                self._raise_unexpected("reports", resp, token)
            except TokenError:  # the token's fault, not the report's: it is kept
                raise
            except DeployError as err:
                if 400 <= resp.status_code < 500 and resp.status_code != 429:
                    raise ReportRefused(
                        err.message, code=err.code, hint=err.hint, detail=err.detail
                    ) from None
                raise

    def probe(self) -> Probe:
        """``GET /`` without a token (doctor): tenancy answers at all, and its ``Date``. Any
        answer below 500 proves the intercept reaches tenancy; nothing is recorded there."""
        try:
            resp = read_capped(
                self._client,
                "GET",
                f"{self.url}/",
                max_bytes=64 * 1024,
                deadline_s=self._cfg.deadline_s,
                too_large=lambda: self._bad("", "more than 64 KiB to GET /"),
                headers={"User-Agent": USER_AGENT},
                timeout=self._cfg.timeout_s,
            )
        except DeployError:
            raise
        except httpx.TransportError as exc:
            raise httperrors.translate(exc, self._service, "GET /") from exc
        if resp.status_code >= 500:
            raise DeployError(
                f"tenancy at {self.address} (GET /) failed with HTTP {resp.status_code}",
                code=Code.TENANCY_UNAVAILABLE,
                hint="the tenancy service's health and logs",
            )
        return Probe(resp.status_code, resp.headers.get("Date"))

    # -- plumbing ----------------------------------------------------------------------------

    def _post(
        self,
        endpoint: str,
        token: str,
        body: dict[str, Any],
        extra_headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        url = f"{self.url}/v1/envs/{self.env}/{endpoint}"
        headers = {
            "Authorization": f"Bearer {token}",
            "User-Agent": USER_AGENT,
            "Content-Type": "application/json",
            **(extra_headers or {}),
        }
        try:
            return read_capped(
                self._client,
                "POST",
                url,
                max_bytes=self._max_body,
                deadline_s=self._cfg.deadline_s,
                too_large=lambda: DeployError(
                    f"tenancy at {self.address} answered POST /{endpoint} with more than "
                    f"{self._max_body} bytes (max_bundle_bytes); refused unread",
                    code=Code.TENANCY_RESPONSE_TOO_LARGE,
                    outcome="refused",
                    hint="the bundle published for this environment (a compose file and "
                    "template of megabytes is a mistake), or raise max_bundle_bytes",
                ),
                content=json.dumps(body).encode(),
                headers=headers,
                timeout=self._cfg.timeout_s,
            )
        except DeployError:
            raise
        except httpx.TransportError as exc:
            raise httperrors.translate(exc, self._service, f"POST /{endpoint}") from exc

    def _json(self, endpoint: str, resp: httpx.Response) -> dict[str, Any]:
        try:
            data = resp.json()
        except (ValueError, RecursionError) as exc:  # RecursionError: nested beyond the parser
            raise self._bad(
                endpoint,
                f"HTTP {resp.status_code} with a body that is not JSON (or nests too deep)",
            ) from exc
        if not isinstance(data, dict):
            raise self._bad(endpoint, f"HTTP {resp.status_code} with JSON that is not an object")
        return data

    def _bad(self, endpoint: str, what: str) -> DeployError:
        return DeployError(
            f"tenancy at {self.address} answered POST /{endpoint} with {what}",
            code=Code.TENANCY_BAD_RESPONSE,
            hint="the tenancy service's version and logs; the agent speaks contract v1",
        )

    def _raise_unexpected(self, endpoint: str, resp: httpx.Response, token: str) -> None:
        code, message, retry_after = _error_body(resp)
        masked = Masker((token,))  # tenancy may echo the bearer in its words
        shown, message = masked(code), masked(message)[:500]  # masked whole, then cut
        status = resp.status_code
        where = f"tenancy at {self.address} (POST /{endpoint})"
        # ``code`` is tenancy's word (contract.md: any string, maybe one the agent does not
        # know), so it is compared by value; the three tenancy names are spelled as ours.
        if status == 401 and code == Code.GRANT_SUPERSEDED:
            raise TokenError(
                "grant superseded: a newer kit was revealed for this environment "
                f"({self.env}), so this box's grant and every token from it are dead",
                code=Code.GRANT_SUPERSEDED,
                hint="install the newest kit for this environment on this box "
                "(its grant.jwt); this is not a network or policy fault",
            )
        if status == 401:
            raise TokenError(
                f"{where} rejected the token as unknown, expired or revoked "
                f"({shown or 'HTTP 401'})",
                code=Code.TOKEN_INVALID,
                hint="the token bookkeeping in the state dir; the agent logs in again",
            )
        if status == 403 and code == Code.ENV_MISMATCH:
            raise TokenError(
                f"{where} says the token belongs to another environment than {self.env}",
                code=Code.ENV_MISMATCH,
                hint="`env` in config.yaml and the environment of grant.jwt agree",
            )
        if status == 429 and code == Code.LEASE_RATE_LIMITED:
            wait = retry_after if retry_after is not None else _retry_header(resp)
            raise RateLimited(
                f"tenancy refused a new lease for {self.env}: the budget of leases per hour "
                f"is spent; it frees up in {wait} s",
                retry_after_s=wait,
                hint="why this environment spent its lease budget (other boxes or kits "
                "sharing the environment)",
            )
        if status >= 500:
            raise DeployError(
                f"{where} failed with HTTP {status}" + (f" {shown}" if code else ""),
                code=Code.TENANCY_UNAVAILABLE,
                hint="the tenancy service's health and logs",
                detail=message,
            )
        raise DeployError(
            f"{where} answered HTTP {status}" + (f" {shown}: {message}" if code else ""),
            code=Code.TENANCY_REJECTED,
            hint="the tenancy service's logs for this request",
            detail=message,
        )


def _error_body(resp: httpx.Response) -> tuple[str, str, int | None]:
    """(code, message, retry_after_s) of an error body; ("", "", None)
    when the body is not one (not JSON, no ``error`` object, a field of the wrong type)."""
    try:
        from monky_deployd.core.wire import answers  # (a 304 reads none)

        err = answers.ErrorBody.model_validate(resp.json()).error
    except (ValueError, RecursionError):  # not JSON (or nested too deep), or a ValidationError
        return "", "", None
    retry = int(err.retry_after_s) if err.retry_after_s is not None else None
    return err.code, err.message, retry


def _retry_header(resp: httpx.Response) -> int:
    try:
        return max(1, int(resp.headers.get("Retry-After", "60")))
    except ValueError:
        return 60
