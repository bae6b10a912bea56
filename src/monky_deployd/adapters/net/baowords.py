"""What the agent says about OpenBao's answers: one sentence naming the real fault, a hint, and
OpenBao's own words as detail (never a token or a secret value). ``bao.Bao`` decides which answer
it got; ``Words`` says it, with OpenBao's address and the mounts of config.yaml."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from monky_deployd.config import OpenBaoCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import BaoError, TokenError

if TYPE_CHECKING:  # hvac loads only when a call is made through it (a no-op tick makes none)
    from hvac.exceptions import VaultError


@dataclass(frozen=True)
class Words:
    address: str  # host:port
    cfg: OpenBaoCfg

    def grant_expired(self, words: str) -> TokenError:
        return TokenError(
            f"the grant has expired: OpenBao at {self.address} refused the login "
            "(token is expired); a new kit is needed for this environment",
            code=Code.GRANT_EXPIRED,
            hint="reveal a new kit for this environment and install its grant.jwt on this box",
            detail=words,
        )

    def status_error(self, what: str, exc: VaultError) -> BaoError:
        words = errors_text(exc)
        status = status_of(exc)
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

    def bad(self, what: str, shape: str) -> BaoError:
        return BaoError(
            f"OpenBao at {self.address} answered {what} with {shape}",
            code=Code.OPENBAO_BAD_RESPONSE,
            hint=f"that {self.address} is OpenBao (openbao.host/port in config.yaml) "
            "and not another service",
        )

    def too_large(self) -> BaoError:
        return BaoError(
            f"OpenBao at {self.address} answered with more than {self.cfg.max_body_bytes} "
            "bytes (openbao.max_body_bytes); refused unread",
            code=Code.OPENBAO_RESPONSE_TOO_LARGE,
            hint=f"that {self.address} is OpenBao and not another service; a secret of "
            "megabytes is a mistake (or raise openbao.max_body_bytes)",
        )

    def grant_rejected(self, words: str) -> TokenError:
        return TokenError(
            f"OpenBao at {self.address} rejected the grant at login "
            f"(auth/{self.cfg.jwt_mount}, role {self.cfg.role}): {words}",
            code=Code.GRANT_REJECTED,
            hint="that grant.jwt belongs to this environment's kit and that "
            "openbao.jwt_mount/role in config.yaml match the estate",
            detail=words,
        )

    def jwt_role_missing(self, what: str, words: str) -> BaoError:
        role, mount = self.cfg.role, self.cfg.jwt_mount
        default = OpenBaoCfg.model_fields["role"].default
        estate = f" (the estate's is {default})" if role != default else ""
        return BaoError(
            f"OpenBao at {self.address} has no role {role!r} on auth/{mount}: {what} answered "
            "400 (the grant was not checked)",
            code=Code.OPENBAO_JWT_ROLE_MISSING,
            hint=f"openbao.role in config.yaml{estate}",
            detail=words,
        )

    def jwt_mount_missing(self, what: str, words: str) -> BaoError:
        mount = self.cfg.jwt_mount
        default = OpenBaoCfg.model_fields["jwt_mount"].default
        estate = f" (the estate's is {default})" if mount != default else ""
        return BaoError(
            f"OpenBao at {self.address} has no auth mount {mount!r}: {what} answered 403, "
            "OpenBao's answer for a path it does not route (the grant was not checked)",
            code=Code.OPENBAO_JWT_MOUNT_MISSING,
            hint=f"openbao.jwt_mount in config.yaml{estate}, and that the JWT auth method is "
            f"enabled at auth/{mount} on OpenBao",
            detail=words,
        )

    def kv_forbidden(self, path: str, seen: list[str] | None) -> BaoError:
        """A KV 403: a mount this token cannot see (misnamed kv_mount), or the policy;
        ``seen``: the KV v2 mounts the token sees (None: OpenBao would not say)."""
        mount = self.cfg.kv_mount
        if seen and mount not in seen:
            names = ", ".join(seen)
            return BaoError(
                f"OpenBao at {self.address} has no KV mount {mount!r} that this token can "
                f"see: reading {mount}/{path} answered 403, and the KV v2 mounts the token "
                f"sees are: {names}",
                code=Code.OPENBAO_KV_MOUNT_MISSING,
                hint=f"openbao.kv_mount in config.yaml (the token reads secrets from "
                f"{' or '.join(seen)})",
            )
        why = (
            "the token's policy denies the path"
            if seen
            else "the token sees no KV mount at all"
            if seen is not None
            else "OpenBao would not say which mounts the token sees"
        )
        return BaoError(
            f"OpenBao at {self.address} denied reading secret path {mount}/{path} "
            f"(HTTP 403 permission denied: {why})",
            code=Code.SECRET_FORBIDDEN,
            hint=f"that this environment's token policy allows reading {mount}/data/{path} "
            "(the bundle's manifest may name another environment's path)",
        )

    def deleted(self, path: str, key: str, destroyed: bool, when: str, version: str) -> BaoError:
        mount = self.cfg.kv_mount
        if destroyed:
            return BaoError(
                f"secret {mount}/{path} (key {key!r}) has no current value on OpenBao at "
                f"{self.address}: its current version {version} was destroyed",
                code=Code.SECRET_DESTROYED,
                hint=f"write a new version of {mount}/{path} (a destroyed version cannot be "
                "brought back)",
            )
        return BaoError(
            f"secret {mount}/{path} (key {key!r}) has no current value on OpenBao at "
            f"{self.address}: its current version {version} was deleted at {when}",
            code=Code.SECRET_DELETED,
            hint=f"undelete version {version} of {mount}/{path} "
            f"(`bao kv undelete -versions={version} -mount={mount} {path}`) or write a new one",
        )

    def missing(self, path: str, key: str, why: str) -> BaoError:
        mount = self.cfg.kv_mount
        return BaoError(
            f"secret {mount}/{path} key {key!r} is missing on OpenBao at {self.address}: {why}",
            code=Code.SECRET_MISSING,
            outcome="refused",
            hint=f"that {mount}/{path} holds the key {key!r} for this environment "
            "(the bundle's manifest names it)",
        )


def deleted_version(body: object) -> tuple[bool, str, str] | None:
    """A KV v2 404 that carries a data envelope: the current version was soft-deleted or
    destroyed. (destroyed, deletion_time, version), or None for a plain 404."""
    try:
        meta = body["data"]["metadata"]  # type: ignore[index]
        destroyed = bool(meta.get("destroyed"))
        when = str(meta.get("deletion_time") or "")
        version = str(meta.get("version", "?"))
    except (KeyError, TypeError, AttributeError):
        return None
    if not destroyed and not when:
        return None
    return destroyed, when, version


def status_of(exc: VaultError) -> int | None:
    import hvac.exceptions

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


def errors_text(exc: VaultError) -> str:
    errors = getattr(exc, "errors", None)
    if errors:
        return "; ".join(str(e) for e in errors)[:500]
    return (str(exc.args[0]) if exc.args and exc.args[0] else "")[:500]
