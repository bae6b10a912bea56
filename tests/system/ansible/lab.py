"""Parts for the Ansible role's real run: a loopback package server that records request headers,
a real Debian container reached through the community.docker.docker connection, and the .deb.

- ``PackageServer``: serves ``<prefix>/<version>/<file>`` from a directory on 127.0.0.1:<free port>
  and records every request (method, path, headers). Like the GitLab package registry it answers
  401 when the DEPLOY-TOKEN header is missing or wrong, so a role that dropped the header fails.
- ``DebianBox``: ``docker run --network host local/debian:bookworm`` (built by
  scripts/debian-image.sh), so the container reaches the loopback server; removed on exit.
- ``package_deb(out_dir)``: the real .deb, built by packaging/build-deb.sh.
"""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType

from monky_deployd_testkit.dockerlab import DOCKER, DockerUnavailable, docker_available

REPO = Path(__file__).resolve().parents[3]
DEBIAN_IMAGE = os.environ.get("DEBIAN_IMAGE", "local/debian:bookworm")


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    headers: dict[str, str]  # header names lower-cased


class PackageServer:
    """A loopback generic-package registry: GET <prefix>/<version>/<file> with DEPLOY-TOKEN."""

    def __init__(self, root: Path, token: str, prefix: str = "/generic/monky-deployd") -> None:
        self.root = root
        self.token = token
        self.prefix = prefix
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}{self.prefix}"

    def requests(self) -> list[Seen]:
        with self._lock:
            return list(self.seen)

    def __enter__(self) -> PackageServer:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, send_body: bool) -> None:
                headers = {k.lower(): v for k, v in self.headers.items()}
                with outer._lock:
                    outer.seen.append(Seen(self.command, self.path, headers))
                if headers.get("deploy-token") != outer.token:
                    self._reply(401, b'{"message":"401 Unauthorized"}', send_body)
                    return
                rel = self.path.removeprefix(outer.prefix + "/")
                target = (outer.root / rel).resolve()
                if (
                    not self.path.startswith(outer.prefix + "/")
                    or outer.root.resolve() not in target.parents
                    or not target.is_file()
                ):
                    self._reply(404, b'{"message":"404 Not Found"}', send_body)
                    return
                self._reply(200, target.read_bytes(), send_body, "application/octet-stream")

            def _reply(
                self, status: int, body: bytes, send_body: bool, ctype: str = "application/json"
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if send_body:
                    self.wfile.write(body)

            def do_GET(self) -> None:
                self._serve(True)

            def do_HEAD(self) -> None:
                self._serve(False)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def _run(argv: list[str], timeout: float = 300, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)


def ensure_debian_image() -> str:
    """Build local/debian:bookworm with scripts/debian-image.sh when absent; fail loudly."""
    docker_available()
    proc = _run(["bash", str(REPO / "scripts" / "debian-image.sh")], timeout=600)
    if proc.returncode != 0:
        raise DockerUnavailable(f"scripts/debian-image.sh failed: {proc.stderr.strip()[-800:]}")
    return DEBIAN_IMAGE


class DebianBox:
    """A running local/debian:bookworm container on the host network, removed on exit."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.name = f"monky-ansible-{uuid.uuid4().hex[:10]}"

    def __enter__(self) -> DebianBox:
        proc = _run(
            [
                DOCKER,
                "run",
                "-d",
                "--network",
                "host",
                "--name",
                self.name,
                self.image,
                "sleep",
                "infinity",
            ]
        )
        if proc.returncode != 0:
            raise DockerUnavailable(f"docker run {self.image} failed: {proc.stderr.strip()}")
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        _run([DOCKER, "rm", "-f", self.name], timeout=120)

    def sh(self, script: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return _run([DOCKER, "exec", self.name, "sh", "-ec", script], timeout=timeout)

    def check(self, script: str, timeout: float = 300) -> str:
        proc = self.sh(script, timeout)
        assert proc.returncode == 0, f"in {self.name}: {script}\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout


def package_deb(out_dir: Path) -> Path:
    """Build the real .deb with ``packaging/build-deb.sh --out out_dir``; return its path."""
    script = REPO / "packaging" / "build-deb.sh"
    assert script.is_file(), "packaging/build-deb.sh is missing: the role installs the real .deb"
    proc = _run(["bash", str(script), "--out", str(out_dir)], timeout=900, cwd=str(REPO))
    assert proc.returncode == 0, (
        f"build-deb.sh failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    )
    debs = sorted(out_dir.glob("monky-deployd_*.deb"))
    assert len(debs) == 1, f"expected one monky-deployd_*.deb in {out_dir}, found {debs}"
    return debs[0]
