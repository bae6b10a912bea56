"""The fault catalogue: every fault's identity, its ``Code``, with its family and outcome.

A fault has one identity: its ``Code``. The catalogue (``CATALOGUE``) gives every code its family
(where the fault comes from), its outcome (``refused``: stopped before touching containers;
``failed``: tried and failed) and so its exit status (``Code.exit_status``: 3 config, 4 lock,
6 held or backing off, 7 waiting for a window or the rollout, 5 refused, 1 failed).
OPERATIONS.md has a row per code (tests/repo/test_docs.py holds the two
together), and control flow compares codes by identity (``err.code is Code.TOKEN_INVALID``),
never by spelling. ``Code`` is a ``StrEnum``: on the wire and in the journal a code is its name.

The exceptions that carry a code (``DeployError`` and its tree) are ``core.faults``'.

One table, so that a fault has one identity in one place.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

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
    # ziti, as the controller sees the identity (issue 46)
    ZITI_CONTROLLER_CERT = "ZITI_CONTROLLER_CERT"
    ZITI_IDENTITY_UNKNOWN = "ZITI_IDENTITY_UNKNOWN"
    ZITI_ROLE_MISSING = "ZITI_ROLE_MISSING"
    ZITI_ROUTER_OFFLINE = "ZITI_ROUTER_OFFLINE"
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
    POLICY_FOREIGN_RESOURCE = "POLICY_FOREIGN_RESOURCE"
    # policy: one reading (issue 45)
    POLICY_HOST_STRING = "POLICY_HOST_STRING"
    POLICY_TWO_READINGS = "POLICY_TWO_READINGS"
    POLICY_RESOURCE_DRIFT = "POLICY_RESOURCE_DRIFT"
    # issue 45: builds off by default, box-wide names
    POLICY_BUILD = "POLICY_BUILD"
    POLICY_BUILD_CONTEXT = "POLICY_BUILD_CONTEXT"
    POLICY_FOREIGN_TAG = "POLICY_FOREIGN_TAG"
    # policy: host paths by identity, held (issue 45)
    POLICY_DANGLING_LINK = "POLICY_DANGLING_LINK"
    POLICY_HIDDEN_PATH = "POLICY_HIDDEN_PATH"
    POLICY_PATH_MOVED = "POLICY_PATH_MOVED"
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
    # ziti, as the controller sees the identity (issue 46)
    Code.ZITI_CONTROLLER_CERT: ("ziti", "failed"),
    Code.ZITI_IDENTITY_UNKNOWN: ("ziti", "failed"),
    Code.ZITI_ROLE_MISSING: ("ziti", "failed"),
    Code.ZITI_ROUTER_OFFLINE: ("ziti", "failed"),
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
    Code.POLICY_FOREIGN_RESOURCE: ("policy", "refused"),
    # policy: one reading (issue 45)
    Code.POLICY_HOST_STRING: ("policy", "refused"),
    Code.POLICY_TWO_READINGS: ("policy", "refused"),
    Code.POLICY_RESOURCE_DRIFT: ("policy", "refused"),
    # issue 45: builds off by default, box-wide names
    Code.POLICY_BUILD: ("policy", "refused"),
    Code.POLICY_BUILD_CONTEXT: ("policy", "refused"),
    Code.POLICY_FOREIGN_TAG: ("policy", "refused"),
    # policy: host paths by identity, held (issue 45)
    Code.POLICY_DANGLING_LINK: ("policy", "refused"),
    Code.POLICY_HIDDEN_PATH: ("policy", "refused"),
    Code.POLICY_PATH_MOVED: ("policy", "failed"),
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


def code_named(name: str) -> Code | None:
    """The ``Code`` a file (the tick ledger) keeps by name; None for ``OK`` or an unknown name.
    Read once at the boundary, so control flow compares identities, never spellings."""
    try:
        return Code(name)
    except ValueError:
        return None
