"""The docker lab: a real busybox image and a real registry with htpasswd auth.

- ``docker_available()`` raises ``DockerUnavailable`` (a test FAILS, never skips) when the engine
  does not answer.
- ``ensure_busybox_image(tag)`` builds ``FROM scratch`` + busybox-static once; a lock file keeps
  parallel callers (pytest-xdist, two helpers) from building at the same time.
- ``Registry``: Debian's ``docker-registry serve config.yml`` on 127.0.0.1:<free port>, htpasswd
  auth, storage in a temporary directory, its access log in a file so tests can count requests
  ("no pull happened" = no manifest request).

Nothing here touches ``$HOME/.docker``: pushes log in with a throw-away ``DOCKER_CONFIG``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from types import TracebackType

DOCKER = os.environ.get("MONKY_TEST_DOCKER", "docker")
BUSYBOX_STATIC = Path("/bin/busybox")
DEFAULT_BUSYBOX_TAG = "monky-test/busybox:latest"
HTTP_METHODS = ("GET", "HEAD", "PUT", "POST", "PATCH", "DELETE")
LOCK_PATH = Path(tempfile.gettempdir()) / "monky-test-dockerlab.lock"


class DockerUnavailable(RuntimeError):
    """The Docker engine (or a lab tool) is missing; tests must fail loudly, not skip."""


def _run(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def docker_available() -> None:
    """Raise ``DockerUnavailable`` unless ``docker info`` answers with a server section."""
    if shutil.which(DOCKER) is None:
        raise DockerUnavailable(f"no `{DOCKER}` client on PATH: run scripts/docker-up.sh")
    try:
        proc = _run([DOCKER, "info", "--format", "{{json .ServerErrors}} {{.ServerVersion}}"])
    except subprocess.TimeoutExpired as exc:
        raise DockerUnavailable(
            "`docker info` did not answer: the Docker engine is hung or down; "
            "start it with scripts/docker-up.sh"
        ) from exc
    out = proc.stdout.strip()
    if proc.returncode != 0 or not out or out.startswith("[") or out.endswith(" "):
        raise DockerUnavailable(
            "the Docker engine is not running (docker info: "
            f"{(proc.stderr or proc.stdout).strip()[-300:]}); start it with scripts/docker-up.sh"
        )


class _Locked:
    """An exclusive flock on LOCK_PATH for the duration of a ``with`` block."""

    def __enter__(self) -> _Locked:
        self._fd = os.open(LOCK_PATH, os.O_CREAT | os.O_RDWR, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)


def image_exists(ref: str) -> bool:
    return _run([DOCKER, "image", "inspect", ref]).returncode == 0


def ensure_busybox_image(tag: str = DEFAULT_BUSYBOX_TAG) -> str:
    """Build ``tag`` (FROM scratch + busybox-static) unless it exists; return ``tag``."""
    docker_available()
    if image_exists(tag):
        return tag
    if not BUSYBOX_STATIC.is_file():
        raise DockerUnavailable(
            f"{BUSYBOX_STATIC} missing (Debian busybox-static): run scripts/docker-up.sh"
        )
    with _Locked():
        if image_exists(tag):  # another caller built it while we waited
            return tag
        with tempfile.TemporaryDirectory(prefix="monky-busybox-") as ctx:
            shutil.copy2(BUSYBOX_STATIC, Path(ctx, "busybox"))
            Path(ctx, "Dockerfile").write_text(
                "FROM scratch\n"
                "COPY busybox /bin/busybox\n"
                'RUN ["/bin/busybox","--install","-s","/bin"]\n'
                'CMD ["/bin/sh"]\n'
            )
            env = dict(os.environ, DOCKER_BUILDKIT="0")
            proc = _run([DOCKER, "build", "-q", "-t", tag, ctx], env=env, timeout=300)
            if proc.returncode != 0:
                raise DockerUnavailable(f"building {tag} failed: {proc.stderr.strip()[-800:]}")
    return tag


def build_image(tag: str, dockerfile: str, *, unique: bool = True) -> str:
    """Build ``dockerfile`` (its text, no context) as ``tag`` with the classic builder and
    return the image's ID; ``unique``: with a label of its own, so its ID is new even when the
    Dockerfile's is not (``FROM base``). DockerUnavailable when the build fails."""
    label = ("--label", f"monky.test.unique={uuid.uuid4().hex}") if unique else ()
    build = _run(
        [DOCKER, "build", "-q", "-t", tag, *label, "-"],
        input=dockerfile,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
        timeout=300,
    )
    if build.returncode != 0:
        raise DockerUnavailable(f"docker build of {tag} failed: {build.stderr.strip()}")
    return build.stdout.strip()


def remove_image(ref: str) -> None:
    """``docker rmi -f ref``; a missing image is fine."""
    _run([DOCKER, "rmi", "-f", ref])


def remove_containers(project: str) -> None:
    """Every container (running or not) of the compose project ``project``, force-removed."""
    ids = subprocess.run(
        (DOCKER, "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"),
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    if ids:
        subprocess.run((DOCKER, "rm", "-f", *ids), capture_output=True, check=False)


def terminate(proc: subprocess.Popen[bytes] | None, wait_s: float = 10) -> None:
    """Stop a server process the testkit started: SIGTERM, then SIGKILL after ``wait_s``."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Registry:
    """A real docker-registry with htpasswd auth on 127.0.0.1:<free port>."""

    def __init__(self, username: str = "monky-robot", password: str | None = None) -> None:
        self.username = username
        # A colon inside the password exercises the username:password split at the FIRST colon.
        self.password = password or f"pw:{uuid.uuid4().hex[:12]}:x"
        self.port = 0
        self.root: Path | None = None
        self.log_path = Path("/nonexistent")
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: object = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Registry:
        docker_available()
        for tool in ("docker-registry", "htpasswd"):
            if shutil.which(tool) is None:
                raise DockerUnavailable(f"`{tool}` missing: run scripts/docker-up.sh")
        self.root = Path(tempfile.mkdtemp(prefix="monky-registry-"))
        htpasswd = _run(["htpasswd", "-Bbn", self.username, self.password])
        if htpasswd.returncode != 0:
            raise DockerUnavailable(f"htpasswd failed: {htpasswd.stderr.strip()}")
        (self.root / "htpasswd").write_text(htpasswd.stdout)
        (self.root / "storage").mkdir()
        last_err = ""
        for _attempt in range(5):  # a free port can be taken between probe and bind
            self.port = free_port()
            config = self.root / "config.yml"
            config.write_text(
                "version: 0.1\n"
                "log:\n  level: info\n  accesslog:\n    disabled: false\n"
                "storage:\n"
                f"  filesystem:\n    rootdirectory: {self.root / 'storage'}\n"
                "  delete:\n    enabled: true\n"
                f"http:\n  addr: 127.0.0.1:{self.port}\n"
                "auth:\n  htpasswd:\n    realm: monky-test\n"
                f"    path: {self.root / 'htpasswd'}\n"
            )
            self.log_path = self.root / f"registry-{self.port}.log"
            log_file = open(self.log_path, "wb")  # noqa: SIM115 (kept open for the child)
            self._proc = subprocess.Popen(
                ["docker-registry", "serve", str(config)],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            log_file.close()
            if self._wait_ready():
                return self
            last_err = self.log_path.read_text(errors="replace")[-800:]
            self._kill()
        raise DockerUnavailable(f"docker-registry did not start: {last_err}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                return False
            try:
                urllib.request.urlopen(f"http://{self.host}/v2/", timeout=2)
                return True  # would mean no auth; still "up"
            except urllib.error.HTTPError as exc:
                if exc.code == 401:
                    return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def _kill(self) -> None:
        terminate(self._proc)
        self._proc = None

    def stop(self) -> None:
        self._kill()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> Registry:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def push_new_image(self, ref: str, base: str) -> None:
        """Build an image that differs from ``base`` (a unique label) and push it as ``ref``
        (``<host>/<repo>:<tag>``): a new digest under the same tag."""
        tag = f"monky-new-{uuid.uuid4().hex[:8]}"
        build_image(tag, f"FROM {base}\n")
        host_repo, _, version = ref.rpartition(":")
        self.push(tag, host_repo.partition("/")[2], version)
        subprocess.run((DOCKER, "image", "rm", tag), capture_output=True, check=False)

    def push_unique_image(self, base: str, repo: str, tag: str = "1") -> tuple[str, str]:
        """An image of ``base`` with an ID of its own (a unique label), pushed as
        ``<host>/<repo>-<random>:<tag>`` and not kept locally: (ref, image id)."""
        local = f"monky-test/unique-{uuid.uuid4().hex[:10]}:{tag}"
        image_id = build_image(local, f"FROM {base}\n")
        ref = self.push(local, f"{repo}-{uuid.uuid4().hex[:6]}", tag)
        remove_image(local)
        return ref, image_id

    def push(self, local_tag: str, repo: str, tag: str = "latest") -> str:
        """Push ``local_tag`` as ``<host>/<repo>:<tag>``; return that ref (not kept locally)."""
        ref = f"{self.host}/{repo}:{tag}"
        with tempfile.TemporaryDirectory(prefix="monky-push-cfg-") as cfg:
            env = dict(os.environ, DOCKER_CONFIG=cfg)
            steps = [
                ([DOCKER, "tag", local_tag, ref], None),
                (
                    [DOCKER, "login", "-u", self.username, "--password-stdin", self.host],
                    self.password,
                ),
                ([DOCKER, "push", ref], None),
            ]
            try:
                for argv, stdin in steps:
                    proc = _run(argv, env=env, input=stdin, timeout=300)
                    if proc.returncode != 0:
                        raise DockerUnavailable(
                            f"{' '.join(argv[:2])} failed: {(proc.stderr or proc.stdout)[-800:]}"
                        )
            finally:
                remove_image(ref)  # so a later pull of ref really hits the registry
        return ref

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def request_count(
        self, path_substring: str | None = None, methods: tuple[str, ...] = HTTP_METHODS
    ) -> int:
        """Access-log lines (one per HTTP request) whose request line contains the substring.

        ``request_count("/manifests/", ("GET", "HEAD"))`` counts manifest reads: zero means no
        pull reached the registry (a 401 answer is logged too, so refused pulls count).
        """
        count = 0
        for line in self.log_text().splitlines():
            # distribution's access log: combined log format, `"GET /v2/... HTTP/1.1" 200 ...`
            if not any(f'"{verb} /' in line for verb in methods):
                continue
            if path_substring is None or path_substring in line:
                count += 1
        return count
