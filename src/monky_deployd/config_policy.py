"""config.yaml's ``policy:``: what a bundle's services may ask of this box beyond Pod Security
"baseline" (``core.admission.policy`` judges; OPERATIONS.md, "Local policy", has the table).

Every allowance is opt-in and narrow: one capability, one device, one path root, under
``allow`` (every service) or ``services.<name>`` (that compose service only). Nothing here
loosens the paths no bind mount may reach (the engine's sockets, ``/``, ``/etc``, the agent's
own directories).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

Namespace = Literal["pid", "ipc", "uts", "userns", "network", "cgroup"]


def _capability(name: str) -> str:
    upper = name.strip().upper()
    upper = upper[4:] if upper.startswith("CAP_") else upper
    if not upper.replace("_", "").isalnum():
        raise ValueError(f"{name!r} is not a capability name (like NET_ADMIN)")
    return upper


def _absolute(path: Path) -> Path:
    if not path.is_absolute():
        raise ValueError(f"{str(path)!r} is not an absolute path")
    if str(path) == "/" or "\0" in str(path):
        raise ValueError("must name a directory below /, not / itself")
    return path


# What the systemd unit (packaging/systemd/monky-deployd.service) hides from the agent, by the
# directive that hides it: the agent sees another directory there than the engine does, so it
# cannot judge what the engine would mount from it (tests/repo/test_unit_hidden.py derives this
# list from the unit's directives).
HIDDEN_BY_UNIT: dict[str, str] = {
    "/tmp": "PrivateTmp=yes",
    "/var/tmp": "PrivateTmp=yes",
    "/home": "ProtectHome=yes",
    "/root": "ProtectHome=yes",
    "/run/user": "ProtectHome=yes",
}


def hidden_by_unit(path: str) -> str | None:
    """The directory of ``HIDDEN_BY_UNIT`` that ``path`` (absolute) is at or under, if any."""
    import posixpath

    norm = posixpath.normpath(path)
    norm = "/" if norm == "//" else norm
    for hidden in HIDDEN_BY_UNIT:
        if norm == hidden or norm.startswith(hidden + "/"):
            return hidden
    return None


def _file(path: Path) -> Path:
    """A ``read_only_files`` entry: one file by its absolute path, written normalized (the
    judge compares it exactly)."""
    import posixpath

    text = str(path)
    if not path.is_absolute() or "\0" in text:
        raise ValueError(f"{text!r} is not an absolute path")
    if posixpath.normpath(text) != text or text == "/":
        raise ValueError(f"{text!r} must name one file exactly (normalized, no trailing /)")
    return path


def _root(path: Path) -> Path:
    hidden = hidden_by_unit(str(path))
    if hidden is not None:
        raise ValueError(
            f"{str(path)!r} is at or under {hidden}, which the agent's systemd unit hides from "
            f"it ({HIDDEN_BY_UNIT[hidden]}: what the agent sees there is not what the engine "
            "mounts), so the agent cannot judge what the engine would mount from it; choose a "
            "root outside " + ", ".join(HIDDEN_BY_UNIT)
        )
    return path


def _text(text: str) -> str:
    if not text.strip() or "\0" in text:
        raise ValueError("must be a non-empty text")
    return text.strip()


def _key_path(text: str) -> str:
    parts = text.strip().split(".")
    if not text.strip() or any(not p or "\0" in p for p in parts):
        raise ValueError(f"{text!r} is not a key path (like services.web.provider)")
    return text.strip()


Items = Annotated[list[Annotated[str, AfterValidator(_text)]], Field(max_length=256)]


class AllowCfg(BaseModel):
    """The allowances of one scope; every list empty and every flag false by default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    privileged: bool = False
    host_namespaces: Annotated[list[Namespace], Field(max_length=6)] = []
    cap_add: Annotated[list[Annotated[str, AfterValidator(_capability)]], Field(max_length=64)] = []
    devices: Items = []  # host device paths (/dev/net/tun), device_cgroup_rules, or gpu
    security_opt: Items = []  # as written, ':' read as '=' (apparmor=unconfined)
    sysctls: Items = []  # names beyond baseline's safe set
    cgroup_parent: Items = []
    bind_roots: Annotated[
        list[Annotated[Path, AfterValidator(_absolute), AfterValidator(_root)]],
        Field(max_length=256),
    ] = []
    providers: Items = []  # programs a `provider:` service may have compose run on the host
    # engine names of volumes / networks that are not the release's own (another project's,
    # made by hand, the engine's bridge) a release may use; networks: also network_mode and
    # build.network naming them (core.admission.names)
    volumes: Items = []
    networks: Items = []
    log_drivers: Items = []  # log drivers beyond json-file, local, journald, none (syslog)
    # the lowest oom_score_adj a service may ask (below 0: the host's OOM killer spares it)
    oom_score_adj: Annotated[int, Field(ge=-1000, le=0)] = 0
    # protected files a read-only bind may name exactly (/etc/localtime): regular files under
    # /etc only, never a directory, never read-write, never the agent's or the engine's own
    read_only_files: Annotated[
        list[Annotated[Path, AfterValidator(_file)]], Field(max_length=64)
    ] = []
    # `build:` (a deploy agent pulls): the agent copies each build context into the revision
    # (no link followed) and compose builds the copy
    build: bool = False
    # the highest weights a service may ask; 0: the engine's default (cpu_shares 1024; blkio
    # weight 500 on cgroup v1, 19 on v2): above it, it takes CPU or disk time from the others
    cpu_shares: Annotated[int, Field(ge=0, le=262144)] = 0
    blkio_weight: Annotated[int, Field(ge=0, le=1000)] = 0


class PolicyCfg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    allow: AllowCfg = AllowCfg()  # every service of every bundle
    services: Annotated[dict[str, AllowCfg], Field(max_length=256)] = {}  # by compose name
    # key paths of compose's model allowed beyond the key table's defaults (core.admission.keys):
    # `services.web.provider`, `volumes.*.driver_opts` (`*`: any one name)
    keys: Annotated[list[Annotated[str, AfterValidator(_key_path)]], Field(max_length=256)] = []

    def digest(self) -> str:
        """The policy's identity (held.json's ``policy`` of a refusal: judged again once it
        differs): SHA-256 of its canonical JSON, 16 hex digits."""
        import hashlib

        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]
