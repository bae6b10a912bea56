"""config.yaml: the pydantic model and its loader.

``load(path)`` returns a ``Config`` or raises ``ConfigError`` whose message names the file and
lists one line per problem: ``at 'tenancy.port': Input should be a valid integer``.
Unknown keys are refused (``extra="forbid"``) so a typo never silently falls back to a default.
A text or path holding a NUL or a lone surrogate (YAML's ``"\ud800"``) is refused here, not left
to fail in a system call; the file's YAML is budgeted like a bundle's compose file
(``core.admission.composefile.budget``: aliases expanded, depth) before it is loaded.
"""

from __future__ import annotations

from datetime import tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from monky_deployd.config_policy import PolicyCfg
from monky_deployd.core.admission import composefile
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import ConfigError
from monky_deployd.core.signing.trustcfg import TrustCfg

if TYPE_CHECKING:  # (read when a revision waits or windows are set: off the no-op's imports)
    from monky_deployd.core.lifecycle import schedule

DEFAULT_CONFIG_PATH = Path("/etc/monky-deployd/config.yaml")
TENANCY_INTERCEPT_PORT = 443  # the Ziti intercept; the pod's own listener port never goes here
OPENBAO_INTERCEPT_PORT = 8200
GIB = 1024**3

Port = Annotated[int, Field(ge=1, le=65535)]
PositiveSeconds = Annotated[float, Field(gt=0, le=3600)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="after")
    @classmethod
    def _clean_text(cls, value: object) -> object:
        if isinstance(value, str | Path):
            text = str(value)
            if "\0" in text:
                raise ValueError("must not contain a NUL character")
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("is not valid Unicode text (a lone surrogate)") from None
        return value


class TenancyCfg(_Strict):
    host: str = "tenancy.monky.ziti"
    port: Port = TENANCY_INTERCEPT_PORT
    timeout_s: PositiveSeconds = 15.0  # per connect / read / write
    deadline_s: PositiveSeconds = 60.0  # per request, overall (a peer that drips is cut off)


class OpenBaoCfg(_Strict):
    host: str = "openbao.monky.ziti"
    port: Port = OPENBAO_INTERCEPT_PORT
    jwt_mount: str = "jwt-tenancy"
    role: str = "see_env"
    kv_mount: str = "kv"
    timeout_s: PositiveSeconds = 15.0  # per connect / read / write
    deadline_s: PositiveSeconds = 60.0  # per request, overall
    # An OpenBao answer (login, token, one KV secret) larger than this is refused unread.
    max_body_bytes: Annotated[int, Field(ge=1024)] = 1024 * 1024


class TokenCfg(_Strict):
    # A stored lease token is reused while lookup-self reports at least this many seconds left.
    min_ttl_s: Annotated[int, Field(ge=0)] = 600
    # Below this many seconds left, a renewable lease token is renewed (renew-self).
    renew_below_s: Annotated[int, Field(ge=0)] = 6 * 3600


class DockerCfg(_Strict):
    binary: str = "docker"
    # DOCKER_HOST for the agent's docker CLI; unset means the CLI's default socket.
    host: str | None = None
    pull_timeout_s: PositiveSeconds = 900.0
    up_timeout_s: PositiveSeconds = 300.0
    command_timeout_s: PositiveSeconds = 60.0  # also the Engine API request's overall deadline
    # An Engine API answer (the project's container list) larger than this is refused unread.
    api_max_body_bytes: Annotated[int, Field(ge=1024)] = 16 * 1024 * 1024
    # containerd's config file, read for `root =` when the daemon uses the containerd image store.
    containerd_config: Path = Path("/etc/containerd/config.toml")
    containerd_root: Path | None = None  # overrides what containerd_config says


class DiskCfg(_Strict):
    # Free space every pull-target filesystem must keep beyond the bundle's disk_need_bytes
    # (OPERATIONS.md says why 4 GiB: env-dev-08 died mid-pull with 2.8 GiB free).
    headroom_bytes: Annotated[int, Field(ge=0)] = 4 * GIB


class VerifyCfg(_Strict):
    # A long-running service must run (and be healthy, with a healthcheck) this long without a
    # restart; 30 s outlasts docker's first restart back-offs and most crash-on-first-request
    # bugs while keeping an apply under a minute (OPERATIONS.md, "Verify, rollback, hold").
    stable_s: Annotated[float, Field(gt=0, le=3600)] = 30.0
    # Give up (and roll back) when the project has not settled this long after `up`: 180 s
    # covers slow healthchecks (start_period) and JVM starts; the timer's next start waits.
    deadline_s: Annotated[float, Field(gt=0, le=3600)] = 180.0
    poll_s: Annotated[float, Field(gt=0, le=60)] = 1.0
    # After the commit the revision bakes this long before it becomes the last-known-good: each
    # tick inspects its containers, and a crash, restart or unhealthy state inside it rolls back
    # to the previous LKG (kept until then). 300 s = five timer ticks: past most crash-on-load
    # and slow-leak faults, short enough that the old release is not kept for long. 0: none.
    bake_s: Annotated[float, Field(ge=0, le=86400)] = 300.0

    @model_validator(mode="after")
    def _window_fits(self) -> VerifyCfg:
        if self.stable_s > self.deadline_s:
            raise ValueError("verify.stable_s must not exceed verify.deadline_s")
        return self


class BackoffCfg(_Strict):
    # A failed or refused revision's next attempt: base_s (one timer interval), doubling per
    # attempt, capped at cap_s, shortened by up to `jitter` of itself so boxes spread out.
    base_s: Annotated[float, Field(gt=0, le=86400)] = 60.0
    cap_s: Annotated[float, Field(gt=0, le=86400)] = 3600.0
    jitter: Annotated[float, Field(ge=0, le=0.5)] = 0.2


class LocksCfg(_Strict):
    # The update-lock directory an app can bind-mount (a runtime dir: locks die with a reboot).
    dir: Path = Path("/run/monky-deployd/locks")
    # A lock without its own ttl_s is ignored (with a warning) this long after it was written.
    default_ttl_s: Annotated[float, Field(gt=0, le=7 * 86400)] = 3600.0
    # No lock counts for longer than this, whatever its own ttl_s says (nor, with a modification
    # time in the future, for more than twice this): `lock take --ttl` refuses more.
    max_ttl_s: Annotated[float, Field(gt=0, le=366 * 86400)] = 7 * 86400.0


class MetricsCfg(_Strict):
    # node-exporter's textfile-collector directory (Debian's prometheus-node-exporter reads
    # this one): each tick that changed something rewrites monky-deployd.prom there (a quiet
    # tick only touches it). A directory that does not exist means no metrics; null turns
    # them off.
    textfile_dir: Path | None = Path("/var/lib/prometheus/node-exporter")


def zone(name: str) -> tzinfo:
    """The IANA time zone ``name`` from the system's tz database (the tzdata package);
    ValueError naming what is wrong."""
    import zoneinfo  # only when update windows are set

    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{name!r} is not a time zone of the tz database (like Europe/Berlin or UTC; "
            "is the tzdata package installed?)"
        ) from None


def _window(text: str) -> str:
    from monky_deployd.core.lifecycle import schedule

    spec = schedule.parse_window(text)
    zone(spec.zone)
    return text


class Config(_Strict):
    env: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]
    transport: Literal["ziti", "plain"] = "ziti"
    identity: Path | None = None
    tenancy: TenancyCfg = TenancyCfg()
    openbao: OpenBaoCfg = OpenBaoCfg()
    grant_file: Path = Path("/etc/monky-deployd/grant.jwt")
    state_dir: Path = Path("/var/lib/monky-deployd")
    # the unit's account: the only one a root `apply`/`suspend`/`resume` switches to
    service_user: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")] = "monky-deployd"
    token: TokenCfg = TokenCfg()
    docker: DockerCfg = DockerCfg()
    disk: DiskCfg = DiskCfg()
    verify: VerifyCfg = VerifyCfg()
    backoff: BackoffCfg = BackoffCfg()
    locks: LocksCfg = LocksCfg()
    metrics: MetricsCfg = MetricsCfg()
    policy: PolicyCfg = PolicyCfg()  # what a bundle may ask of the box (config_policy.py)
    trust: TrustCfg = TrustCfg()  # signed bundles (contract v1.3): core/signing/trustcfg.py
    lock_wait_s: Annotated[float, Field(ge=0, le=600)] = 10.0
    # The whole tick, overall: past it the tick ends with TICK_DEADLINE where it is, and
    # every request and child gets at most the time left. 25 min covers a full pull (900 s),
    # up (300 s) and verify (180 s) with the requests around them. What may run after it (a
    # rollback within rollback_budget_s, the report within tenancy.deadline_s) still ends well
    # inside the unit's TimeoutStartSec=45min, so the agent, not systemd's SIGKILL, ends a stuck
    # tick and names the fault (tests/repo/test_deadlines.py holds the sum to the unit file).
    tick_deadline_s: Annotated[float, Field(gt=0, le=24 * 3600)] = 1500.0
    max_bundle_bytes: Annotated[int, Field(ge=1024)] = 4 * 1024 * 1024
    # Update windows: a new revision is applied only inside one of these (empty: at any time);
    # each is `DAYS HH:MM for DURATION ZONE` (core/lifecycle/schedule.py; OPERATIONS.md, "Update
    # windows").
    update_windows: Annotated[
        list[Annotated[str, AfterValidator(_window)]], Field(max_length=64)
    ] = []

    @model_validator(mode="after")
    def _default_identity(self) -> Config:
        if self.identity is None:
            object.__setattr__(
                self, "identity", Path(f"/opt/openziti/etc/identities/{self.env}.json")
            )
        return self

    @property
    def rollback_budget_s(self) -> float:
        """The rollback's own deadline (it runs even when the tick's has run out, so a slow
        apply is rolled back, not stalled): the failed project's ``down`` and the LKG's ``up``
        (``docker.up_timeout_s`` each), its verify (``verify.deadline_s``, one more poll and
        one Engine API request)."""
        docker, verify = self.docker, self.verify
        return (
            2 * docker.up_timeout_s + verify.deadline_s + verify.poll_s + docker.command_timeout_s
        )

    @property
    def windows(self) -> tuple[schedule.Window, ...]:
        """``update_windows`` read, each with its zone (validated at load)."""
        if not self.update_windows:
            return ()
        from monky_deployd.core.lifecycle import schedule

        found = []
        for text in self.update_windows:
            spec = schedule.parse_window(text)
            found.append(schedule.Window(spec, zone(spec.zone)))
        return tuple(found)

    @property
    def identity_path(self) -> Path:
        assert self.identity is not None
        return self.identity


def _loc(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def parse(data: object, source: str) -> Config:
    """Validate already-parsed YAML ``data``; ``source`` names where it came from."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: the file must hold a YAML mapping, found {type(data).__name__}",
            code=Code.CONFIG_INVALID,
            hint=f"the top level of {source} is `key: value` lines (see config.example.yaml)",
        )
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        lines = []
        for problem in exc.errors():
            msg = problem["msg"]
            if problem["type"] == "extra_forbidden":
                msg = "unknown key"
            lines.append(f"at '{_loc(problem['loc'])}': {msg}")
        raise ConfigError(
            f"{source} is invalid:\n" + "\n".join(lines),
            code=Code.CONFIG_INVALID,
            hint=f"the keys named above in {source}",
        ) from exc


def load(path: Path = DEFAULT_CONFIG_PATH) -> Config:
    """Read and validate ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ConfigError(
            f"{path} does not exist",
            code=Code.CONFIG_MISSING,
            hint="that the kit or the Ansible role installed it, or pass -c/--config PATH "
            "(or set MONKY_DEPLOYD_CONFIG)",
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError(
            f"cannot read {path}: {reason}",
            code=Code.CONFIG_UNREADABLE,
            hint=f"{path} is owner root, group monky-deployd, mode 0640",
        ) from exc
    try:
        why = composefile.budget(text)
        data = composefile.load(text) if why is None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ConfigError(
            f"{path} is not valid YAML{where}: {problem}",
            code=Code.CONFIG_INVALID,
            hint=f"the YAML syntax of {path}",
        ) from exc
    except composefile.CONSTRUCTOR_ERRORS:  # a constructor's refusal: no input rides along
        why = "holds a value YAML cannot read (such as an impossible date)"
    if why is not None:
        raise ConfigError(f"{path} {why}", code=Code.CONFIG_INVALID, hint=f"the YAML of {path}")
    return parse(data, str(path))
