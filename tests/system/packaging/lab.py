"""The packaging lab: a real Debian 12 container, the real .deb, a loopback package registry.

- ``ensure_test_image()``: ``local/monky-pkgtest:bookworm`` = ``local/debian:bookworm``
  (scripts/debian-image.sh) plus the package's dependencies, curl and systemd (not running: a box
  where ``systemctl`` exists but fails). Built once, cached by tag; a lock serialises builders.
- ``build_deb()``: runs packaging/build-deb.sh once per session; returns the .deb path.
- ``Box``: one container (``--network host``, ``dist/`` mounted read-only at /dist); ``sh()`` runs
  a shell command in it; removed on ``close()``.
- ``RegistryServer``: an HTTP server on 127.0.0.1:<free port> that serves files by path, records
  every request's path and headers, and can hold ("stall") a path until released.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import tempfile
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType

from monky_deployd import __version__
from monky_deployd_testkit.dockerlab import docker_available

REPO = Path(__file__).resolve().parents[3]
DIST = REPO / "dist"
BASE_IMAGE = "local/debian:bookworm"
TEST_IMAGE = "local/monky-pkgtest:bookworm"
TEST_IMAGE_PKGS = "python3 python3.11 acl adduser curl ca-certificates systemd"
VERSION = __version__
LOCK = Path(tempfile.gettempdir()) / "monky-test-pkgimage.lock"


def run(
    argv: list[str],
    *,
    input: bytes | None = None,
    timeout: float = 600,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        argv,
        env=env,
        input=input.decode() if input is not None else None,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv[:4])}... exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}"
        )
    return proc


def _image_exists(tag: str) -> bool:
    return run(["docker", "image", "inspect", tag], check=False).returncode == 0


def ensure_test_image() -> str:
    docker_available()
    with LOCK.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        run([str(REPO / "scripts/debian-image.sh")])
        pkgs_label = TEST_IMAGE_PKGS.replace(" ", ",")
        if _image_exists(TEST_IMAGE):
            labels = run(
                ["docker", "image", "inspect", "-f", "{{json .Config.Labels}}", TEST_IMAGE]
            ).stdout
            if f'"monky.pkgs":"{pkgs_label}"' in labels:
                return TEST_IMAGE
        name = f"monky-pkgimage-{uuid.uuid4().hex[:8]}"
        try:
            run(
                [
                    "docker", "run", "--name", name, "--network", "host", BASE_IMAGE, "sh", "-ec",
                    "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                    f"--no-install-recommends {TEST_IMAGE_PKGS} >/dev/null "
                    "&& rm -rf /var/lib/apt/lists/*",
                ]
            )  # fmt: skip
            run(["docker", "commit", "-c", f"LABEL monky.pkgs={pkgs_label}", name, TEST_IMAGE])
        finally:
            run(["docker", "rm", "-f", name], check=False)
    return TEST_IMAGE


def build_deb() -> Path:
    docker_available()
    out = run([str(REPO / "packaging/build-deb.sh")], timeout=900).stdout.strip().splitlines()
    deb = Path(out[-1])
    assert deb.is_file(), f"build-deb.sh printed {out[-1]!r}, not a file"
    return deb


class Box:
    """A real Debian 12 container with dist/ at /dist (read-only)."""

    def __init__(self, image: str = TEST_IMAGE) -> None:
        self.name = f"monky-pkgtest-{uuid.uuid4().hex[:10]}"
        run(
            [
                "docker", "run", "-d", "--name", self.name, "--network", "host",
                "-v", f"{DIST}:/dist:ro", image, "sleep", "infinity",
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
        argv = ["docker", "exec", "-i"]
        for key in env or {}:
            argv += ["-e", key]
        return run(
            [*argv, self.name, "bash", "-c", script],
            input=input,
            check=check,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )

    def close(self) -> None:
        run(["docker", "rm", "-f", self.name], check=False)

    def __enter__(self) -> Box:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@dataclass
class Request:
    path: str
    headers: dict[str, str]


class RegistryServer:
    """Loopback HTTP: serves ``files`` (path -> bytes), 302s ``redirects``, 404 otherwise;
    records every request."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.redirects: dict[str, str] = {}  # path -> Location of a 302
        self.requests: list[Request] = []
        self.stall_path: str | None = None
        self.stalled = threading.Event()  # set when a request for stall_path arrived
        self.release = threading.Event()  # set by the test to let it through
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                with server._lock:
                    server.requests.append(Request(self.path, dict(self.headers.items())))
                if self.path == server.stall_path:
                    server.stalled.set()
                    server.release.wait(120)
                target = server.redirects.get(self.path)
                if target is not None:
                    self.send_response(302)
                    self.send_header("Location", target)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = server.files.get(self.path)
                if body is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "9")
                    self.end_headers()
                    self.wfile.write(b"not found")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def gitlab_path(self, version: str, file: str, project: str = "69") -> str:
        return f"/api/v4/projects/{project}/packages/generic/monky-deployd/{version}/{file}"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> RegistryServer:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
