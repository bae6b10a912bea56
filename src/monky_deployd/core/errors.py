"""The agent's exception tree.

Every fault the agent can name is a ``DeployError`` carrying:

- ``code``: a stable, documented identifier (``ENV_INCOMPLETE``, ``TENANCY_UNAVAILABLE`` ...);
  every code is listed in OPERATIONS.md and a test holds the two together;
- ``message``: one sentence naming the real fault (never a secret);
- ``hint``: what the operator should check;
- ``detail``: the other side's own words (registry, compose, a service's error body), secrets
  removed, possibly empty;
- ``outcome``: ``refused`` (stopped before touching containers) or ``failed`` (tried and failed).

Subclasses group faults by where they come from. Lower-level exceptions are translated at the
boundary with ``raise SomeError(...) from exc`` and never reach the operator as a traceback.

    DeployError
    ├── ConfigError        config.yaml missing, unreadable or invalid      (exit 3)
    ├── LockBusy           another tick holds the state-dir lock          (exit 4)
    ├── StateError         the state dir cannot be created/read/written
    ├── TransportError     the transport (plain or Ziti) cannot reach a service
    ├── IdentityError      the Ziti identity file is missing/unreadable/malformed
    ├── TenancyError       tenancy answered something the agent cannot use
    ├── BaoError           OpenBao answered something the agent cannot use
    ├── TokenError         no usable token (grant expired/superseded, lease rate limited)
    ├── BundleError        the desired bundle is malformed
    ├── EnvError           the .env cannot be rendered (missing variable, uncarriable value)
    ├── RegistryAuthError  the registry credential entry is unusable
    ├── PreflightError     the disk pre-flight refused, or docker info failed
    └── CommandError       a subprocess (docker, docker compose) failed
"""

from __future__ import annotations

from typing import Literal

Outcome = Literal["refused", "failed"]


class DeployError(Exception):
    """A fault the agent can name. ``str(err)`` is the operator-facing first line."""

    default_code = "INTERNAL"
    default_outcome: Outcome = "failed"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        hint: str = "",
        detail: str = "",
        outcome: Outcome | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code or self.default_code
        self.message = message
        self.hint = hint
        self.detail = detail
        self.outcome: Outcome = outcome or self.default_outcome

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}"
        if self.hint:
            text += ("" if text.rstrip().endswith((".", ":")) else ".") + f" Check: {self.hint}"
        return text


class ConfigError(DeployError):
    default_code = "CONFIG_INVALID"
    default_outcome: Outcome = "refused"


class LockBusy(DeployError):
    default_code = "LOCK_BUSY"
    default_outcome: Outcome = "refused"


class StateError(DeployError):
    default_code = "STATE_UNWRITABLE"


class TransportError(DeployError):
    default_code = "TRANSPORT_FAILED"


class IdentityError(DeployError):
    default_code = "IDENTITY_INVALID"
    default_outcome: Outcome = "refused"


class TenancyError(DeployError):
    default_code = "TENANCY_ERROR"


class BaoError(DeployError):
    default_code = "OPENBAO_ERROR"


class TokenError(DeployError):
    default_code = "TOKEN_UNAVAILABLE"
    default_outcome: Outcome = "refused"


class BundleError(DeployError):
    default_code = "BUNDLE_INVALID"
    default_outcome: Outcome = "refused"


class EnvError(DeployError):
    default_code = "ENV_INCOMPLETE"
    default_outcome: Outcome = "refused"


class RegistryAuthError(DeployError):
    default_code = "REGISTRY_AUTH_INVALID"
    default_outcome: Outcome = "refused"


class PreflightError(DeployError):
    default_code = "DISK_INSUFFICIENT"
    default_outcome: Outcome = "refused"


class CommandError(DeployError):
    default_code = "COMMAND_FAILED"


def named_cause(exc: BaseException) -> DeployError | None:
    """The first ``DeployError`` in ``exc``'s cause chain: a lower layer (the Ziti transport
    under httpx) that already named the fault; None when there is none."""
    seen: BaseException | None = exc
    for _ in range(20):
        if seen is None:
            return None
        if isinstance(seen, DeployError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def root_words(exc: BaseException) -> str:
    """The innermost exception's words (the OS's or the library's), for a sentence."""
    seen = exc
    for _ in range(20):
        nxt = seen.__cause__ or seen.__context__
        if nxt is None:
            break
        seen = nxt
    return str(seen) or type(seen).__name__
