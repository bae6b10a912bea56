"""The fault catalogue and the agent's exception tree.

A fault has one identity: its ``Code``. The catalogue (``CATALOGUE``) gives every code its family
(where the fault comes from), its outcome (``refused``: stopped before touching containers;
``failed``: tried and failed) and so its exit status (``Code.exit_status``: 3 config, 4 lock,
6 held or backing off, 7 waiting for a window or the rollout, 5 refused, 1 failed).
OPERATIONS.md has a row per code (tests/repo/test_docs.py holds the two
together), and control flow compares codes by identity (``err.code is Code.TOKEN_INVALID``),
never by spelling. ``Code`` is a ``StrEnum``: on the wire and in the journal a code is its name.

Every fault the agent can name is a ``DeployError`` carrying:

- ``code``: a ``Code``;
- ``message``: one sentence naming the real fault (never a secret);
- ``hint``: what the operator should check;
- ``detail``: the other side's own words (registry, compose, a service's error body), secrets
  removed, possibly empty;
- ``outcome``: the code's, unless the raise site knows better (only DOCKER_UNAVAILABLE has two:
  failed when the engine vanishes mid-apply, refused when the pre-flight cannot ask it).

The code says what happened, so a raise site names one (``DeployError(msg, code=Code.X)``) and a
new fault is three lines: its ``Code`` member with its catalogue row, the raise site, its row in
OPERATIONS.md. Subclasses exist only where a caller catches a group by class; everything else is
a plain ``DeployError`` (a code's family, not a class, says where it comes from). Lower-level
exceptions are translated at the boundary with ``raise DeployError(...) from exc`` and never
reach the operator as a traceback.

    DeployError            any named fault; the tick catches it and reports its code
    ├── ConfigError        config.yaml missing, unreadable or invalid: caught by the CLI (exit 3)
    ├── TokenError         no usable token (grant, lease, token invalid): caught by the tick
    │                      (TOKEN_INVALID at check-in) and TokenKeeper (grant re-read, rotation)
    ├── BaoError           OpenBao answered something unusable: caught by the tick (SECRET_MISSING)
    │   └── RenewRefused   (adapters/net/bao.py) renew-self refused: caught by TokenKeeper
    ├── EnvError           the .env cannot be rendered: caught by prepare (ENV_INCOMPLETE)
    ├── CommandError       a subprocess (docker, docker compose) failed: caught by the pre-flight
    └── RateLimited        (adapters/net/tenancy.py) LEASE_RATE_LIMITED with tenancy's wait:
                           caught by TokenKeeper

    TickDeadline           (a BaseException, not a DeployError) the tick's overall deadline ran
                           out: no ``except DeployError`` or ``except Exception`` can swallow it
                           on its way to the frames that own the tick's end (the failure record,
                           the rollback on its own budget, a restore's backoff); its ``fault`` is
                           the TICK_DEADLINE DeployError the operator reads

Over ~400 lines on purpose: the catalogue is one table, so that a fault has one identity in one
place.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, TypeVar

Outcome = Literal["refused", "failed"]
Family = Literal[
    "config", "state", "agent", "transport", "ziti", "identity", "tenancy", "token", "openbao",
    "secrets", "bundle", "policy", "env", "registry", "disk", "docker", "verify", "hold", "wait",
]  # fmt: skip


# The CLI's exit statuses (documented in OPERATIONS.md and cli.py's docstring).
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CONFIG = 3
EXIT_LOCKED = 4
EXIT_REFUSED = 5
EXIT_HELD = 6  # the apply was skipped: the desired revision is held or waits for its backoff
EXIT_WAITING = 7  # a new revision waits: outside every update window, or its rollout place


class Code(StrEnum):
    # config
    CONFIG_INVALID = "CONFIG_INVALID"
    CONFIG_MISSING = "CONFIG_MISSING"
    CONFIG_UNREADABLE = "CONFIG_UNREADABLE"
    # state
    LOCK_BUSY = "LOCK_BUSY"
    STATE_LINK = "STATE_LINK"
    STATE_UNWRITABLE = "STATE_UNWRITABLE"
    STATE_DIR_UNSAFE = "STATE_DIR_UNSAFE"
    TOKEN_UNSTORABLE = "TOKEN_UNSTORABLE"
    # agent
    INTERNAL = "INTERNAL"
    TICK_DEADLINE = "TICK_DEADLINE"
    # transport
    TENANCY_TIMEOUT = "TENANCY_TIMEOUT"
    TENANCY_UNREACHABLE = "TENANCY_UNREACHABLE"
    # ziti
    ZITI_CONTROLLER_UNREACHABLE = "ZITI_CONTROLLER_UNREACHABLE"
    ZITI_DIAL_FAILED = "ZITI_DIAL_FAILED"
    ZITI_DIAL_TIMEOUT = "ZITI_DIAL_TIMEOUT"
    ZITI_LOAD_FAILED = "ZITI_LOAD_FAILED"
    ZITI_LOAD_TIMEOUT = "ZITI_LOAD_TIMEOUT"
    ZITI_NO_SERVICE = "ZITI_NO_SERVICE"
    ZITI_SDK_MISSING = "ZITI_SDK_MISSING"
    # identity
    IDENTITY_BAD_PEM = "IDENTITY_BAD_PEM"
    IDENTITY_CERT_EXPIRED = "IDENTITY_CERT_EXPIRED"
    IDENTITY_CERT_NOT_YET_VALID = "IDENTITY_CERT_NOT_YET_VALID"
    IDENTITY_INCOMPLETE = "IDENTITY_INCOMPLETE"
    IDENTITY_KEY_MISMATCH = "IDENTITY_KEY_MISMATCH"
    IDENTITY_MISSING = "IDENTITY_MISSING"
    IDENTITY_NOT_JSON = "IDENTITY_NOT_JSON"
    IDENTITY_UNREADABLE = "IDENTITY_UNREADABLE"
    # tenancy
    TENANCY_BAD_RESPONSE = "TENANCY_BAD_RESPONSE"
    TENANCY_REJECTED = "TENANCY_REJECTED"
    TENANCY_RESPONSE_TOO_LARGE = "TENANCY_RESPONSE_TOO_LARGE"
    TENANCY_UNAVAILABLE = "TENANCY_UNAVAILABLE"
    # token
    ENV_MISMATCH = "ENV_MISMATCH"
    GRANT_EXPIRED = "GRANT_EXPIRED"
    GRANT_MISSING = "GRANT_MISSING"
    GRANT_REJECTED = "GRANT_REJECTED"
    GRANT_SUPERSEDED = "GRANT_SUPERSEDED"
    GRANT_UNREADABLE = "GRANT_UNREADABLE"
    LEASE_RATE_LIMITED = "LEASE_RATE_LIMITED"
    OPENBAO_RENEW_REFUSED = "OPENBAO_RENEW_REFUSED"
    TOKEN_INVALID = "TOKEN_INVALID"
    TOKEN_UNAVAILABLE = "TOKEN_UNAVAILABLE"
    PLAN_NO_TOKEN = "PLAN_NO_TOKEN"
    # openbao
    OPENBAO_BAD_RESPONSE = "OPENBAO_BAD_RESPONSE"
    OPENBAO_JWT_MOUNT_MISSING = "OPENBAO_JWT_MOUNT_MISSING"
    OPENBAO_JWT_ROLE_MISSING = "OPENBAO_JWT_ROLE_MISSING"
    OPENBAO_KV_MOUNT_MISSING = "OPENBAO_KV_MOUNT_MISSING"
    OPENBAO_RESPONSE_TOO_LARGE = "OPENBAO_RESPONSE_TOO_LARGE"
    OPENBAO_SEALED = "OPENBAO_SEALED"
    OPENBAO_UNAVAILABLE = "OPENBAO_UNAVAILABLE"
    OPENBAO_UNREACHABLE = "OPENBAO_UNREACHABLE"
    # secrets
    SECRET_DELETED = "SECRET_DELETED"
    SECRET_DESTROYED = "SECRET_DESTROYED"
    SECRET_FORBIDDEN = "SECRET_FORBIDDEN"
    SECRET_MISSING = "SECRET_MISSING"
    SECRET_NOT_STRING = "SECRET_NOT_STRING"
    # bundle
    BUNDLE_COMPOSE_TOO_COMPLEX = "BUNDLE_COMPOSE_TOO_COMPLEX"
    BUNDLE_EXPIRED = "BUNDLE_EXPIRED"
    BUNDLE_INVALID = "BUNDLE_INVALID"
    BUNDLE_RELATIVE_BIND = "BUNDLE_RELATIVE_BIND"
    BUNDLE_BUILD_ONLY = "BUNDLE_BUILD_ONLY"
    BUNDLE_REPLAYED = "BUNDLE_REPLAYED"
    BUNDLE_UNTRUSTED = "BUNDLE_UNTRUSTED"
    # policy
    POLICY_REFUSED = "POLICY_REFUSED"
    POLICY_PROTECTED_PATH = "POLICY_PROTECTED_PATH"
    POLICY_SWAPPABLE_PATH = "POLICY_SWAPPABLE_PATH"
    POLICY_SOURCE = "POLICY_SOURCE"
    POLICY_UNJUDGED = "POLICY_UNJUDGED"
    POLICY_UNKNOWN_KEY = "POLICY_UNKNOWN_KEY"
    # env
    ENV_INCOMPLETE = "ENV_INCOMPLETE"
    ENV_NAME_RESERVED = "ENV_NAME_RESERVED"
    ENV_COMPOSE_SETTING = "ENV_COMPOSE_SETTING"
    ENV_TEMPLATE_INVALID = "ENV_TEMPLATE_INVALID"
    ENV_VALUE_UNCARRIABLE = "ENV_VALUE_UNCARRIABLE"
    ENV_TOO_LARGE = "ENV_TOO_LARGE"
    # registry
    IMAGE_NOT_FOUND = "IMAGE_NOT_FOUND"
    PINNED_IMAGE_GONE = "PINNED_IMAGE_GONE"
    REGISTRY_AUTH = "REGISTRY_AUTH"
    REGISTRY_AUTH_DUPLICATE = "REGISTRY_AUTH_DUPLICATE"
    REGISTRY_CREDENTIAL_EMPTY = "REGISTRY_CREDENTIAL_EMPTY"
    REGISTRY_CREDENTIAL_MALFORMED = "REGISTRY_CREDENTIAL_MALFORMED"
    REGISTRY_HOST_INVALID = "REGISTRY_HOST_INVALID"
    REGISTRY_HOST_MISSING = "REGISTRY_HOST_MISSING"
    REGISTRY_UNREACHABLE = "REGISTRY_UNREACHABLE"
    # disk
    CONTAINERD_CONFIG_UNREADABLE = "CONTAINERD_CONFIG_UNREADABLE"
    DISK_FULL = "DISK_FULL"
    DISK_INSUFFICIENT = "DISK_INSUFFICIENT"
    DISK_UNMEASURABLE = "DISK_UNMEASURABLE"
    DOCKER_UNAVAILABLE = "DOCKER_UNAVAILABLE"
    # docker
    COMMAND_FAILED = "COMMAND_FAILED"
    COMMAND_NOT_FOUND = "COMMAND_NOT_FOUND"
    COMMAND_TIMEOUT = "COMMAND_TIMEOUT"
    DOCKER_HOST_UNSUPPORTED = "DOCKER_HOST_UNSUPPORTED"
    DOCKER_RESPONSE_TOO_LARGE = "DOCKER_RESPONSE_TOO_LARGE"
    DOWN_FAILED = "DOWN_FAILED"
    PROJECT_NOT_OWNED = "PROJECT_NOT_OWNED"
    PULL_FAILED = "PULL_FAILED"
    UP_FAILED = "UP_FAILED"
    # verify
    BAKE_FAILED = "BAKE_FAILED"
    ROLLBACK_FAILED = "ROLLBACK_FAILED"
    VERIFY_EXITED = "VERIFY_EXITED"
    VERIFY_TIMEOUT = "VERIFY_TIMEOUT"
    VERIFY_UNHEALTHY = "VERIFY_UNHEALTHY"
    # hold
    APPLY_BACKOFF = "APPLY_BACKOFF"
    REVISION_HELD = "REVISION_HELD"
    SUSPENDED = "SUSPENDED"
    UPDATE_LOCKED = "UPDATE_LOCKED"
    # wait
    ROLLOUT_WAIT = "ROLLOUT_WAIT"
    WINDOW_CLOSED = "WINDOW_CLOSED"

    @property
    def family(self) -> Family:
        return CATALOGUE[self][0]

    @property
    def outcome(self) -> Outcome:
        return CATALOGUE[self][1]

    @property
    def exit_status(self) -> int:
        """The CLI's exit status for a tick that ends with this code."""
        if self.family == "config":
            return EXIT_CONFIG
        if self is Code.LOCK_BUSY:
            return EXIT_LOCKED
        if self.family == "hold":
            return EXIT_HELD
        if self.family == "wait":
            return EXIT_WAITING
        return EXIT_REFUSED if self.outcome == "refused" else EXIT_FAILED


CATALOGUE: dict[Code, tuple[Family, Outcome]] = {
    # config
    Code.CONFIG_INVALID: ("config", "refused"),
    Code.CONFIG_MISSING: ("config", "refused"),
    Code.CONFIG_UNREADABLE: ("config", "refused"),
    # state
    Code.LOCK_BUSY: ("state", "refused"),
    Code.STATE_LINK: ("state", "refused"),
    Code.STATE_UNWRITABLE: ("state", "failed"),
    Code.STATE_DIR_UNSAFE: ("state", "refused"),
    Code.TOKEN_UNSTORABLE: ("state", "refused"),
    # agent
    Code.INTERNAL: ("agent", "failed"),
    Code.TICK_DEADLINE: ("agent", "failed"),
    # transport
    Code.TENANCY_TIMEOUT: ("transport", "failed"),
    Code.TENANCY_UNREACHABLE: ("transport", "failed"),
    # ziti
    Code.ZITI_CONTROLLER_UNREACHABLE: ("ziti", "failed"),
    Code.ZITI_DIAL_FAILED: ("ziti", "failed"),
    Code.ZITI_DIAL_TIMEOUT: ("ziti", "failed"),
    Code.ZITI_LOAD_FAILED: ("ziti", "failed"),
    Code.ZITI_LOAD_TIMEOUT: ("ziti", "failed"),
    Code.ZITI_NO_SERVICE: ("ziti", "failed"),
    Code.ZITI_SDK_MISSING: ("ziti", "failed"),
    # identity
    Code.IDENTITY_BAD_PEM: ("identity", "refused"),
    Code.IDENTITY_CERT_EXPIRED: ("identity", "refused"),
    Code.IDENTITY_CERT_NOT_YET_VALID: ("identity", "refused"),
    Code.IDENTITY_INCOMPLETE: ("identity", "refused"),
    Code.IDENTITY_KEY_MISMATCH: ("identity", "refused"),
    Code.IDENTITY_MISSING: ("identity", "refused"),
    Code.IDENTITY_NOT_JSON: ("identity", "refused"),
    Code.IDENTITY_UNREADABLE: ("identity", "refused"),
    # tenancy
    Code.TENANCY_BAD_RESPONSE: ("tenancy", "failed"),
    Code.TENANCY_REJECTED: ("tenancy", "failed"),
    Code.TENANCY_RESPONSE_TOO_LARGE: ("tenancy", "refused"),
    Code.TENANCY_UNAVAILABLE: ("tenancy", "failed"),
    # token
    Code.ENV_MISMATCH: ("token", "refused"),
    Code.GRANT_EXPIRED: ("token", "refused"),
    Code.GRANT_MISSING: ("token", "refused"),
    Code.GRANT_REJECTED: ("token", "refused"),
    Code.GRANT_SUPERSEDED: ("token", "refused"),
    Code.GRANT_UNREADABLE: ("token", "refused"),
    Code.LEASE_RATE_LIMITED: ("token", "refused"),
    Code.OPENBAO_RENEW_REFUSED: ("token", "failed"),
    Code.TOKEN_INVALID: ("token", "refused"),
    Code.TOKEN_UNAVAILABLE: ("token", "refused"),
    Code.PLAN_NO_TOKEN: ("token", "refused"),
    # openbao
    Code.OPENBAO_BAD_RESPONSE: ("openbao", "failed"),
    Code.OPENBAO_JWT_MOUNT_MISSING: ("openbao", "refused"),
    Code.OPENBAO_JWT_ROLE_MISSING: ("openbao", "refused"),
    Code.OPENBAO_KV_MOUNT_MISSING: ("openbao", "refused"),
    Code.OPENBAO_RESPONSE_TOO_LARGE: ("openbao", "failed"),
    Code.OPENBAO_SEALED: ("openbao", "failed"),
    Code.OPENBAO_UNAVAILABLE: ("openbao", "failed"),
    Code.OPENBAO_UNREACHABLE: ("transport", "failed"),
    # secrets
    Code.SECRET_DELETED: ("secrets", "refused"),
    Code.SECRET_DESTROYED: ("secrets", "refused"),
    Code.SECRET_FORBIDDEN: ("secrets", "refused"),
    Code.SECRET_MISSING: ("secrets", "refused"),
    Code.SECRET_NOT_STRING: ("secrets", "refused"),
    # bundle
    Code.BUNDLE_COMPOSE_TOO_COMPLEX: ("bundle", "refused"),
    Code.BUNDLE_EXPIRED: ("bundle", "refused"),
    Code.BUNDLE_INVALID: ("bundle", "refused"),
    Code.BUNDLE_RELATIVE_BIND: ("bundle", "refused"),
    Code.BUNDLE_BUILD_ONLY: ("policy", "refused"),
    Code.BUNDLE_REPLAYED: ("bundle", "refused"),
    Code.BUNDLE_UNTRUSTED: ("bundle", "refused"),
    # policy
    Code.POLICY_REFUSED: ("policy", "refused"),
    Code.POLICY_PROTECTED_PATH: ("policy", "refused"),
    Code.POLICY_SWAPPABLE_PATH: ("policy", "refused"),
    Code.POLICY_SOURCE: ("policy", "refused"),
    Code.POLICY_UNJUDGED: ("policy", "refused"),
    Code.POLICY_UNKNOWN_KEY: ("policy", "refused"),
    # env
    Code.ENV_INCOMPLETE: ("env", "refused"),
    Code.ENV_NAME_RESERVED: ("env", "refused"),
    Code.ENV_COMPOSE_SETTING: ("env", "refused"),
    Code.ENV_TEMPLATE_INVALID: ("env", "refused"),
    Code.ENV_VALUE_UNCARRIABLE: ("env", "refused"),
    Code.ENV_TOO_LARGE: ("env", "refused"),
    # registry
    Code.IMAGE_NOT_FOUND: ("registry", "failed"),
    Code.PINNED_IMAGE_GONE: ("registry", "failed"),
    Code.REGISTRY_AUTH: ("registry", "failed"),
    Code.REGISTRY_AUTH_DUPLICATE: ("registry", "refused"),
    Code.REGISTRY_CREDENTIAL_EMPTY: ("registry", "refused"),
    Code.REGISTRY_CREDENTIAL_MALFORMED: ("registry", "refused"),
    Code.REGISTRY_HOST_INVALID: ("registry", "refused"),
    Code.REGISTRY_HOST_MISSING: ("registry", "refused"),
    Code.REGISTRY_UNREACHABLE: ("registry", "failed"),
    # disk
    Code.CONTAINERD_CONFIG_UNREADABLE: ("disk", "refused"),
    Code.DISK_FULL: ("disk", "failed"),
    Code.DISK_INSUFFICIENT: ("disk", "refused"),
    Code.DISK_UNMEASURABLE: ("disk", "refused"),
    Code.DOCKER_UNAVAILABLE: ("disk", "failed"),
    # docker
    Code.COMMAND_FAILED: ("docker", "failed"),
    Code.COMMAND_NOT_FOUND: ("docker", "failed"),
    Code.COMMAND_TIMEOUT: ("docker", "failed"),
    Code.DOCKER_HOST_UNSUPPORTED: ("docker", "refused"),
    Code.DOCKER_RESPONSE_TOO_LARGE: ("docker", "failed"),
    Code.DOWN_FAILED: ("docker", "failed"),
    Code.PROJECT_NOT_OWNED: ("docker", "refused"),
    Code.PULL_FAILED: ("docker", "failed"),
    Code.UP_FAILED: ("docker", "failed"),
    # verify
    Code.BAKE_FAILED: ("verify", "failed"),
    Code.ROLLBACK_FAILED: ("verify", "failed"),
    Code.VERIFY_EXITED: ("verify", "failed"),
    Code.VERIFY_TIMEOUT: ("verify", "failed"),
    Code.VERIFY_UNHEALTHY: ("verify", "failed"),
    # hold
    Code.APPLY_BACKOFF: ("hold", "refused"),
    Code.REVISION_HELD: ("hold", "refused"),
    Code.SUSPENDED: ("hold", "refused"),
    Code.UPDATE_LOCKED: ("hold", "refused"),
    # wait
    Code.ROLLOUT_WAIT: ("wait", "refused"),
    Code.WINDOW_CLOSED: ("wait", "refused"),
}


class DeployError(Exception):
    """A fault the agent can name. ``str(err)`` is the operator-facing first line."""

    def __init__(
        self,
        message: str,
        *,
        code: Code,
        hint: str = "",
        detail: str = "",
        outcome: Outcome | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.detail = detail
        self.outcome: Outcome = outcome or code.outcome

    def restated(self, message: str, hint: str | None = None) -> DeployError:
        """The same fault (code, detail, outcome) said with more: ``message``, and ``hint``
        when given."""
        return DeployError(
            message,
            code=self.code,
            hint=self.hint if hint is None else hint,
            detail=self.detail,
            outcome=self.outcome,
        )

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}"
        if self.hint:
            text += ("" if text.rstrip().endswith((".", ":")) else ".") + f" Check: {self.hint}"
        return text


class TickDeadline(BaseException):
    """The tick's overall deadline ran out (``adapters.deadline``); ``fault`` is the named
    TICK_DEADLINE error. A ``BaseException`` so that only the frames that end a tick catch it
    (``except (DeployError, TickDeadline)`` there; ``fault_of`` gives the DeployError)."""

    def __init__(self, fault: DeployError) -> None:
        super().__init__(str(fault))
        self.fault = fault


def code_named(name: str) -> Code | None:
    """The ``Code`` a file (the tick ledger) keeps by name; None for ``OK`` or an unknown name.
    Read once at the boundary, so control flow compares identities, never spellings."""
    try:
        return Code(name)
    except ValueError:
        return None


def fault_of(exc: DeployError | TickDeadline) -> DeployError:
    """The named fault of a caught ``DeployError`` or ``TickDeadline``."""
    return exc.fault if isinstance(exc, TickDeadline) else exc


class ConfigError(DeployError):
    """config.yaml is missing, unreadable or invalid: the CLI catches it (exit 3, no tick)."""


class BaoError(DeployError):
    """OpenBao answered something the agent cannot use: the tick catches SECRET_MISSING."""


class TokenError(DeployError):
    """No usable token: the tick (TOKEN_INVALID: one re-acquire) and TokenKeeper catch it."""


class EnvError(DeployError):
    """The .env cannot be rendered: prepare catches it to add the bundle's context."""


class CommandError(DeployError):
    """A subprocess (docker, docker compose) failed: the pre-flight catches it."""


_E = TypeVar("_E", bound=BaseException)


def in_chain(exc: BaseException, kind: type[_E]) -> _E | None:
    """The first ``kind`` in ``exc``'s cause chain (``exc`` itself, then its ``__cause__`` or
    ``__context__``, at most 20 deep); None when there is none."""
    seen: BaseException | None = exc
    for _ in range(20):
        if seen is None:
            return None
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def named_cause(exc: BaseException) -> DeployError | None:
    """The first ``DeployError`` in ``exc``'s cause chain: a lower layer (the Ziti transport
    under httpx) that already named the fault; None when there is none."""
    return in_chain(exc, DeployError)


def root_words(exc: BaseException) -> str:
    """The innermost exception's words (the OS's or the library's), for a sentence."""
    seen = exc
    for _ in range(20):
        nxt = seen.__cause__ or seen.__context__
        if nxt is None:
            break
        seen = nxt
    return str(seen) or type(seen).__name__
