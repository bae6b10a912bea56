"""Disk pre-flight: every filesystem a pull writes to must hold the bundle's need plus headroom.

It always runs. A pull writes to Docker's data-root (``DockerRootDir`` in ``docker info``) and,
when the daemon uses the containerd image store (Docker 29's default), to containerd's root, which
``data-root`` does not move and ``docker info`` does not show: it comes from
``docker.containerd_root`` in config.yaml, else the ``root =`` of containerd's config.toml, else
``/var/lib/containerd``. On env-dev-08 those were different filesystems: 93 GiB free where the
agent looked, 2.8 GiB where the pull wrote.

Each filesystem is measured once (grouped by ``st_dev``); free space is ``f_bavail`` (what an
unprivileged writer gets, the conservative reading). A path that does not exist yet is measured at
its nearest existing parent. What ``docker info`` says of the daemon comes from the Engine API
(``GET /info``: a few milliseconds where the CLI costs a Go process); the engine not answering
is reported as Docker's fault, never as "disk".
"""

from __future__ import annotations

import logging
import os
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from monky_deployd.adapters.box.docker import docker_api
from monky_deployd.config import DiskCfg, DockerCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

log = logging.getLogger(__name__)

DEFAULT_CONTAINERD_ROOT = Path("/var/lib/containerd")
CONTAINERD_SNAPSHOTTER = "io.containerd.snapshotter.v1"
MOUNTINFO = Path("/proc/self/mountinfo")


@dataclass(frozen=True)
class Measurement:
    """One filesystem as the pre-flight saw it."""

    path: Path  # the first pull target found on this filesystem
    measured_at: Path  # the existing path statvfs ran on (path or its nearest existing parent)
    mount_point: Path
    fs_type: str
    free_bytes: int
    required_bytes: int
    all_paths: tuple[Path, ...] = ()

    @property
    def ok(self) -> bool:
        return self.free_bytes >= self.required_bytes


def human(n: int) -> str:
    """``2.8 GiB (3006477107 bytes)``: human and exact."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            shown = f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
            return f"{shown} ({n} bytes)"
        size /= 1024
    raise AssertionError("unreachable")


# --- docker info ---------------------------------------------------------------------------


def _unavailable(message: str, detail: str = "") -> DeployError:
    return DeployError(
        f"Docker's daemon cannot be asked where pulls write: {message} "
        "(this is a Docker fault, not a disk fault)",
        code=Code.DOCKER_UNAVAILABLE,
        hint="that dockerd runs (`docker info`), DOCKER_HOST in config.yaml, and the agent's "
        "access to the docker socket (group docker)",
        detail=detail,
    )


def docker_info(docker_cfg: DockerCfg, env: Mapping[str, str]) -> dict[str, object]:
    """What ``docker info`` says of the daemon, from the Engine API (``GET /info`` on
    ``docker.host``: no docker CLI process), once the docker CLI every pull and ``up`` runs is
    found on the child's PATH; DeployError DOCKER_UNAVAILABLE if not (a Docker fault, never
    "disk"). ``docker.host`` neither unix:// nor tcp:// stays DOCKER_HOST_UNSUPPORTED."""
    binary = docker_cfg.binary
    if shutil.which(binary, path=env.get("PATH", "")) is None:
        raise _unavailable(
            f"the docker CLI {binary!r} (docker.binary) is not found on PATH={env.get('PATH', '')}"
        )
    try:
        info, where = docker_api.engine_info(docker_cfg)
    except DeployError as exc:
        if exc.code is not Code.DOCKER_UNAVAILABLE:  # the tick's deadline, an unsupported host
            raise
        raise _unavailable(exc.message, exc.detail) from exc
    if not info.get("DockerRootDir"):
        raise _unavailable(
            f"the Docker engine at {where} answered GET /info without a DockerRootDir"
        )
    return info


# --- where a pull writes -------------------------------------------------------------------


def uses_containerd_store(info: Mapping[str, object]) -> bool:
    """True when the daemon keeps images in the containerd image store (snapshotter)."""
    if info.get("Driver") == "overlayfs":
        return True
    status = info.get("DriverStatus") or []
    if isinstance(status, list):
        for pair in status:
            if isinstance(pair, list | tuple) and any(
                isinstance(v, str) and CONTAINERD_SNAPSHOTTER in v for v in pair
            ):
                return True
    return False


def containerd_root(docker_cfg: DockerCfg) -> Path:
    """containerd's root: the config override, else config.toml's ``root =``, else the default."""
    if docker_cfg.containerd_root is not None:
        return docker_cfg.containerd_root
    path = docker_cfg.containerd_config
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return DEFAULT_CONTAINERD_ROOT
    except OSError as exc:
        raise DeployError(
            f"cannot read containerd's config {path} to find where image layers are stored: "
            f"{exc.strerror or exc}",
            code=Code.CONTAINERD_CONFIG_UNREADABLE,
            hint=f"the mode of {path} (containerd ships it 0644), or set docker.containerd_root "
            "in config.yaml",
        ) from exc
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise DeployError(
            f"containerd's config {path} is not valid TOML ({exc}), so the agent cannot tell "
            "where image layers are stored",
            code=Code.CONTAINERD_CONFIG_UNREADABLE,
            hint=f"the syntax of {path}, or set docker.containerd_root in config.yaml",
        ) from exc
    root = data.get("root")
    if root is None:
        return DEFAULT_CONTAINERD_ROOT
    if not isinstance(root, str) or not root.startswith("/"):
        raise DeployError(
            f"containerd's config {path} has root = {root!r}, not an absolute path",
            code=Code.CONTAINERD_CONFIG_UNREADABLE,
            hint=f"`root =` in {path}, or set docker.containerd_root in config.yaml",
        )
    return Path(root)


def pull_targets(info: Mapping[str, object], docker_cfg: DockerCfg) -> list[Path]:
    """The directories a pull writes to, from ``docker info`` and containerd's config."""
    root = info.get("DockerRootDir")
    if not isinstance(root, str) or not root:
        raise _unavailable("`docker info` answered without a DockerRootDir")
    targets = [Path(root)]
    if uses_containerd_store(info):
        ctr = containerd_root(docker_cfg)
        if ctr not in targets:
            targets.append(ctr)
    return targets


# --- measuring -----------------------------------------------------------------------------


def _existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists and can be stat-ed."""
    current = path
    while True:
        try:
            current.stat()
            return current
        except OSError:
            if current.parent == current:
                return current
            current = current.parent


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mount_of(path: Path) -> tuple[Path, str]:
    """(mount point, filesystem type) holding the existing ``path``: the longest mountinfo match."""
    resolved = path.resolve()
    best: tuple[Path, str] | None = None
    try:
        lines = MOUNTINFO.read_text(errors="replace").splitlines()
    except OSError:
        lines = []
    for line in lines:
        left, sep, right = line.partition(" - ")
        parts = left.split()
        if not sep or len(parts) < 5:
            continue
        mount = Path(_unescape(parts[4]))
        if resolved == mount or mount in resolved.parents:
            fs_type = right.split()[0] if right.split() else "?"
            if best is None or len(mount.parts) >= len(best[0].parts):
                best = (mount, fs_type)
    if best is not None:
        return best
    # No mountinfo: walk up while the device stays the same.
    dev, current = resolved.stat().st_dev, resolved
    while current.parent != current and current.parent.stat().st_dev == dev:
        current = current.parent
    return current, "?"


def check_space(
    targets: list[Path], need_bytes: int | None, headroom_bytes: int
) -> list[Measurement]:
    """Measure each filesystem once; raise DISK_INSUFFICIENT naming every one that is short."""
    required = (need_bytes or 0) + headroom_bytes
    by_dev: dict[int, Measurement] = {}
    for target in targets:
        at = _existing(target)
        try:
            st = os.stat(at)
            vfs = os.statvfs(at)
        except OSError as exc:
            raise DeployError(
                f"cannot measure free space for {target}: {exc.strerror or exc}",
                code=Code.DISK_UNMEASURABLE,
                hint=f"that {at} exists and the agent's user can reach it",
            ) from exc
        if st.st_dev in by_dev:
            prev = by_dev[st.st_dev]
            by_dev[st.st_dev] = Measurement(
                prev.path,
                prev.measured_at,
                prev.mount_point,
                prev.fs_type,
                prev.free_bytes,
                prev.required_bytes,
                (*prev.all_paths, target),
            )
            continue
        mount, fs_type = mount_of(at)
        by_dev[st.st_dev] = Measurement(
            path=target,
            measured_at=at,
            mount_point=mount,
            fs_type=fs_type,
            free_bytes=vfs.f_bavail * vfs.f_frsize,
            required_bytes=required,
            all_paths=(target,),
        )
    measurements = list(by_dev.values())
    for m in measurements:
        log.info(
            "disk pre-flight",
            extra={
                "event": "preflight.measure",
                "path": str(m.path),
                "mount_point": str(m.mount_point),
                "free_bytes": m.free_bytes,
                "required_bytes": m.required_bytes,
                "ok": m.ok,
            },
        )
    short = [m for m in measurements if not m.ok]
    if short:
        raise _insufficient(short, measurements, need_bytes, headroom_bytes)
    return measurements


def _describe(m: Measurement) -> str:
    paths = ", ".join(str(p) for p in m.all_paths)
    return (
        f"{paths} is on filesystem {m.mount_point} ({m.fs_type}) with {human(m.free_bytes)} "
        f"free; the pull needs {human(m.required_bytes)}"
    )


def _insufficient(
    short: list[Measurement],
    measured: list[Measurement],
    need_bytes: int | None,
    headroom_bytes: int,
) -> DeployError:
    need = human(need_bytes) if need_bytes else "no disk_need_bytes declared"
    first = short[0]
    return DeployError(
        "not enough free disk space where the pull writes: "
        + "; ".join(_describe(m) for m in short),
        code=Code.DISK_INSUFFICIENT,
        hint=f"free space on {first.mount_point} (docker image prune, old volumes, logs), or "
        f"move the store; required = bundle need ({need}) + headroom "
        f"({human(headroom_bytes)}, disk.headroom_bytes in config.yaml)",
        detail="\n".join(f"{'SHORT' if not m.ok else 'ok'}: {_describe(m)}" for m in measured),
    )


def run(
    info: Mapping[str, object], docker_cfg: DockerCfg, disk_cfg: DiskCfg, need_bytes: int | None
) -> list[Measurement]:
    """The pre-flight: where pulls write, then whether each filesystem has room."""
    return check_space(pull_targets(info, docker_cfg), need_bytes, disk_cfg.headroom_bytes)
