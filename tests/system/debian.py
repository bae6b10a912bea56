"""The system tier's parts, shared by tests/system/packaging and tests/system/ansible: real
Debian 12 containers, the real .deb, and the loopback package registry they download it from.

- ``ensure_debian_image()``: ``local/debian:bookworm`` (scripts/debian-image.sh; ``$DEBIAN_IMAGE``
  names another), the bare base: the Ansible run installs python3 itself.
- ``ensure_pkgtest_image()``: ``local/monky-pkgtest:bookworm`` = the base plus the package's
  dependencies, curl and systemd (not running: a box where ``systemctl`` exists but fails). Built
  once, cached by tag and a label of its packages; a lock serialises concurrent builders.
- ``build_deb()``: packaging/build-deb.sh into dist/ (tests/system/conftest.py runs it once per
  session for both suites); returns the .deb path.
- ``Box``: one container (``--network host``, so it reaches loopback servers; ``dist/`` at /dist
  read-only; PID 1 is ``sleep``, not systemd); ``sh()`` runs a bash script in it, ``check()`` one
  that must succeed (``set -e``) and returns its stdout; removed on ``close()``.
- ``SystemdBox``: a ``Box`` whose PID 1 is systemd 252 with what makes its sandbox real
  (``SYSTEMD_ARGS``: capabilities, unconfined seccomp, cgroups, tmpfs /run) and the host's Docker
  engine (socket, the docker CLI and compose plugin read-only, a ``docker`` group with the
  socket's GID); ``journal(unit)`` reads the unit's journal entries.
- ``PackageRegistry``: a generic-package registry on 127.0.0.1:<free port>, a ``LoopbackServer``
  of the test kit: serves ``files`` by path, 302s ``redirects``, can demand the DEPLOY-TOKEN header
  (401 without it, like GitLab's) and hold ("stall") a path until released; records every request.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email.message import Message
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from monky_deployd import __version__
from monky_deployd_testkit.dockerlab import DOCKER, docker_available
from monky_deployd_testkit.fakes.http import LoopbackServer, Request, Response, json_response

REPO = Path(__file__).resolve().parents[2]
DIST = REPO / "dist"
VERSION = __version__
DEBIAN_IMAGE = os.environ.get("DEBIAN_IMAGE", "local/debian:bookworm")
PKGTEST_IMAGE = "local/monky-pkgtest:bookworm"
PKGTEST_PKGS = "python3 python3.11 acl adduser curl ca-certificates systemd tzdata"
LOCK = Path(tempfile.gettempdir()) / "monky-test-pkgimage.lock"


def run(
    argv: list[str],
    *,
    input: bytes | None = None,
    timeout: float = 600,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv``; with ``check``, a non-zero exit is an AssertionError with both outputs."""
    proc = subprocess.run(
        argv,
        env=env,
        input=input.decode() if input is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv[:4])}... exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
        )
    return proc


# -- images and the .deb ------------------------------------------------------------------------


def ensure_debian_image() -> str:
    """The base image, built by scripts/debian-image.sh when absent; fails loudly."""
    docker_available()
    run(["bash", str(REPO / "scripts" / "debian-image.sh")])
    return DEBIAN_IMAGE


def _image_exists(tag: str) -> bool:
    return run([DOCKER, "image", "inspect", tag], check=False).returncode == 0


def ensure_pkgtest_image() -> str:
    docker_available()
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        base = ensure_debian_image()
        pkgs_label = PKGTEST_PKGS.replace(" ", ",")
        if _image_exists(PKGTEST_IMAGE):
            labels = run(
                [DOCKER, "image", "inspect", "-f", "{{json .Config.Labels}}", PKGTEST_IMAGE]
            ).stdout
            if f'"monky.pkgs":"{pkgs_label}"' in labels:
                return PKGTEST_IMAGE
        name = f"monky-pkgimage-{uuid.uuid4().hex[:8]}"
        try:
            run(
                [
                    DOCKER, "run", "--name", name, "--network", "host", base, "sh", "-ec",
                    "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                    f"--no-install-recommends {PKGTEST_PKGS} >/dev/null "
                    "&& rm -rf /var/lib/apt/lists/*",
                ]
            )  # fmt: skip
            run([DOCKER, "commit", "-c", f"LABEL monky.pkgs={pkgs_label}", name, PKGTEST_IMAGE])
        finally:
            run([DOCKER, "rm", "-f", name], check=False)
    return PKGTEST_IMAGE


def build_deb() -> Path:
    """packaging/build-deb.sh (the venv is built in the bookworm image) into dist/, once per test
    run: pytest-xdist's workers share the run's id (``PYTEST_XDIST_TESTRUNUID``), the first
    builds under the lock and the others take the path it recorded."""
    docker_available()
    script = REPO / "packaging" / "build-deb.sh"
    assert script.is_file(), "packaging/build-deb.sh is missing: the tests install the real .deb"
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID") or uuid.uuid4().hex
    record = Path(tempfile.gettempdir()) / "monky-test-deb.built"
    with (Path(tempfile.gettempdir()) / "monky-test-deb.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(OSError, ValueError):
            built_by, path = record.read_text().split("\n")[:2]
            if built_by == run_id and Path(path).is_file():
                return Path(path)
        out = run(["bash", str(script)], timeout=900).stdout.strip().splitlines()
        deb = Path(out[-1])
        assert deb.is_file(), f"build-deb.sh printed {out[-1]!r}, not a file"
        record.write_text(f"{run_id}\n{deb}\n")
    return deb


def sha256sums(*files: Path) -> bytes:
    """SHA256SUMS over ``files`` (one directory), written by `sha256sum` as the CI release jobs
    write the one they publish beside the .deb."""
    (folder,) = {f.parent for f in files}
    argv = ["sha256sum", "--", *(f.name for f in files)]
    return subprocess.run(argv, cwd=folder, capture_output=True, check=True, timeout=120).stdout


# -- the container ------------------------------------------------------------------------------


class Box:
    """A real Debian 12 container on the host network, dist/ at /dist (read-only)."""

    def __init__(
        self,
        image: str,
        *,
        args: Sequence[str] = (),
        command: Sequence[str] = ("sleep", "infinity"),
    ) -> None:
        self.image = image
        self.name = f"monky-systest-{uuid.uuid4().hex[:10]}"
        DIST.mkdir(exist_ok=True)  # else docker creates the mount point as root
        run(
            [
                DOCKER, "run", "-d", "--name", self.name, "--network", "host",
                "-v", f"{DIST}:/dist:ro", *args, image, *command,
            ]
        )  # fmt: skip

    def sh(
        self,
        script: str,
        *,
        check: bool = True,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 600,
    ) -> subprocess.CompletedProcess[str]:
        # Values travel in docker's environment (`-e NAME`), not on any command line.
        argv = [DOCKER, "exec", "-i"]
        for key in env or {}:
            argv += ["-e", key]
        return run(
            [*argv, self.name, "bash", "-c", script],
            input=input,
            check=check,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )

    def check(self, script: str, timeout: float = 300) -> str:
        """Run ``script`` under ``set -e``; it must succeed. Its stdout."""
        proc = self.sh("set -e\n" + script, check=False, timeout=timeout)
        assert proc.returncode == 0, f"in {self.name}: {script}\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout

    def close(self) -> None:
        run([DOCKER, "rm", "-f", self.name], check=False, timeout=120)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


# -- systemd as PID 1 ----------------------------------------------------------------------------

# Without the capabilities and seccomp=unconfined systemd silently skips every namespace directive
# (ProtectSystem=, PrivateTmp=, ...: "assuming containerized execution and ignoring", at debug
# level only): a test proves the sandbox applies before it trusts anything else.
SYSTEMD_ARGS = (
    "--tmpfs", "/run", "--tmpfs", "/run/lock", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:ro",
    "-e", "container=docker", "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
    "--security-opt", "seccomp=unconfined",
)  # fmt: skip
DOCKER_SOCKET = Path("/var/run/docker.sock")
COMPOSE_PLUGIN_DIRS = (
    "/usr/local/lib/docker/cli-plugins",
    "/usr/libexec/docker/cli-plugins",
    "/usr/lib/docker/cli-plugins",
)


def _host_docker_parts() -> tuple[Path, Path]:
    """The host's docker CLI and compose plugin (real files, symlinks resolved); fail loudly."""
    cli = shutil.which(DOCKER)
    assert cli, f"{DOCKER} is not on PATH (scripts/docker-up.sh)"
    for directory in COMPOSE_PLUGIN_DIRS:
        plugin = Path(directory) / "docker-compose"
        if plugin.exists():
            return Path(cli).resolve(), plugin.resolve()
    raise AssertionError(
        f"no docker-compose plugin in {COMPOSE_PLUGIN_DIRS} (scripts/docker-up.sh)"
    )


class SystemdBox(Box):
    """A Debian 12 container whose PID 1 is systemd, driving the host's Docker engine."""

    def __init__(self, image: str) -> None:
        cli, plugin = _host_docker_parts()
        super().__init__(
            image,
            args=(
                *SYSTEMD_ARGS,
                "-v", f"{DOCKER_SOCKET.resolve()}:/run/docker.sock",
                "-v", f"{cli}:/usr/bin/docker:ro",
                "-v", f"{plugin}:/usr/local/lib/docker/cli-plugins/docker-compose:ro",
            ),
            command=("/lib/systemd/systemd",),
        )  # fmt: skip
        try:
            # The socket's group exists before the package's postinst (which adds the user to it).
            gid = DOCKER_SOCKET.stat().st_gid
            self.check(
                "for _ in $(seq 100); do\n"
                "  state=$(systemctl is-system-running 2>/dev/null) || true\n"
                '  case "$state" in running|degraded) break;; esac; sleep 0.2\n'
                "done\n"
                f"groupadd --gid {gid} docker"
            )
        except BaseException:
            self.close()
            raise

    def journal(self, unit: str, *args: str) -> list[dict[str, Any]]:
        """The unit's journal entries (``journalctl -o json``): MESSAGE, PRIORITY, _PID, ...;
        journald first writes what it has received (``--sync``: on a loaded box a process's
        last entries may still be queued when its unit has ended)."""
        out = self.check(
            f"journalctl --sync; journalctl --no-pager -o json -u {unit} {' '.join(args)}"
        )
        return [json.loads(line) for line in out.splitlines() if line.strip()]


T = TypeVar("T")


def until(read: Callable[[], T], done: Callable[[T], bool], timeout: float = 30) -> T:
    """``read()`` again until ``done`` holds of it (or ``timeout`` seconds): a unit's last
    journal entries may reach the journal after the unit has ended on a loaded box
    (``journalctl --sync`` writes what journald received, not what is still queued on the
    unit's stream). Returns the last reading; the caller asserts on it."""
    end = time.monotonic() + timeout
    while True:
        got = read()
        if done(got) or time.monotonic() > end:
            return got
        time.sleep(0.2)


# -- the package registry -----------------------------------------------------------------------


@dataclass(frozen=True)
class Fetch:
    method: str
    path: str  # the request-target as sent (a query string included)
    headers: Message  # case-insensitive: .get("DEPLOY-TOKEN") is .get("deploy-token")


class PackageRegistry(LoopbackServer):
    """GET/HEAD ``files`` (path -> bytes) as application/octet-stream, a 302 for ``redirects``
    (path -> Location), 404 otherwise; with ``token``, 401 unless DEPLOY-TOKEN carries it (or,
    with ``auth = "gitea"``, unless ``Authorization: token <token>`` does, as Gitea's). A
    request for ``stall_path`` sets ``stalled`` and waits for ``release`` (stop() releases)."""

    def __init__(self, token: str | None = None) -> None:
        super().__init__()
        self.token = token
        self.auth = "gitlab"  # or "gitea": which header carries ``token``
        self.files: dict[str, bytes] = {}
        self.redirects: dict[str, str] = {}
        self.requests: list[Fetch] = []
        self.stall_path: str | None = None
        self.stalled = threading.Event()
        self.release = threading.Event()

    @property
    def base_url(self) -> str:
        return self.url

    def gitlab_path(self, version: str, file: str, project: str = "69") -> str:
        return f"/api/v4/projects/{project}/packages/generic/monky-deployd/{version}/{file}"

    def stop(self) -> None:
        self.release.set()
        super().stop()

    def record(self, req: Request) -> None:
        with self.lock:
            self.requests.append(Fetch(req.method, req.target, req.headers))

    def _authorized(self, req: Request) -> bool:
        if self.auth == "gitea":
            return req.header("Authorization") == f"token {self.token}"
        return req.header("DEPLOY-TOKEN") == self.token

    def route(self, req: Request) -> Response:
        if req.method not in ("GET", "HEAD"):
            return json_response(501, {"message": f"{req.method} is not supported"})
        if req.target == self.stall_path:
            self.stalled.set()
            self.release.wait(120)
        if self.token is not None and not self._authorized(req):
            return json_response(401, {"message": "401 Unauthorized"})
        location = self.redirects.get(req.target)
        if location is not None:
            return Response(302, b"", {"Location": location})
        body = self.files.get(req.target)
        if body is None:
            return json_response(404, {"message": "404 Not Found"})
        return Response(200, body, {"Content-Type": "application/octet-stream"})
