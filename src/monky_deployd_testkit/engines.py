"""The suite's two Docker engines (``scripts/docker-up.sh`` starts both).

- ``docker20``: Debian 12's Docker 20.10 with the classic image store, on the default socket:
  every Docker test runs on it.
- ``docker26``: Docker 26 with the containerd image store (the estate's kind: Docker 29 keeps
  images there too; image IDs are manifest digests), on ``SECOND_SOCK`` with its own data-root
  and containerd. ``scripts/test.sh`` runs the engine-facing e2e files (apply, verify, bake,
  rollback, restore, repin, image GC, pre-flight, jobs, drift) a second time with
  ``DOCKER_HOST`` pointing at it: the lab's docker commands inherit it and the agent's
  ``docker.host`` follows it (``Estate.config``). It is the suite's own: ``restart_second`` stops
  and starts it (an engine upgrade, a reboot), which a test may do; the first engine, never.

The whole suite runs both engines' passes at once, each on several workers (scripts/test.sh), so
a restart must not pull the engine from under another test: ``in_use`` is a readers-writer lock
between processes (flock on two files in the temp dir). Every test of the second engine's pass
holds it shared; a test marked ``second_engine_restart`` holds it alone, and new users wait
behind it (the turnstile) instead of starving it. tests/conftest.py takes it around each test's
whole run, fixtures included.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from monky_deployd_testkit.dockerlab import DockerUnavailable

ROOT = Path("/opt/monky-docker26")  # Debian 13's binaries, unpacked (docker-up.sh)
RUN_DIR = Path("/run/monky-docker26")
SECOND_SOCK = f"unix://{RUN_DIR}/docker.sock"
LOG = Path("/var/log/monky-test-dockerd26.log")
LOCK = Path(tempfile.gettempdir()) / "monky-test-second-engine.lock"
TURNSTILE = Path(tempfile.gettempdir()) / "monky-test-second-engine.turnstile"


@contextlib.contextmanager
def in_use(*, alone: bool) -> Iterator[None]:
    """Hold the second engine: shared with the other tests, or ``alone`` (a restart)."""
    with TURNSTILE.open("a") as turnstile, LOCK.open("a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)  # held while a restart waits: no new user enters
        fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        global _alone
        _alone = alone
        try:
            yield
        finally:
            _alone = False


_alone = False  # this process holds the second engine alone (in_use(alone=True))


def second_available() -> None:
    """Raise ``DockerUnavailable`` (the test fails, never skips) unless the second engine
    answers with the containerd image store."""
    proc = subprocess.run(
        ("docker", "info", "--format", "{{json .DriverStatus}}"),
        env={**os.environ, "DOCKER_HOST": SECOND_SOCK},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0 or "io.containerd.snapshotter" not in proc.stdout:
        raise DockerUnavailable(
            f"the second engine (Docker 26, containerd store) does not answer at {SECOND_SOCK}: "
            f"{(proc.stderr or proc.stdout).strip()[-300:]}; start it with scripts/docker-up.sh"
        )


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a dockerd an earlier restart started is this process's child:
    once it exits it is reaped here, not left a zombie that looks alive)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def restart_second(down_s: float = 0.0) -> None:
    """Stop the second engine's dockerd (SIGTERM, as systemd and a shutdown do: it stops the
    containers, and forgets its events), wait ``down_s``, start it again with the same command
    line (``dockerd.argv``, written by docker-up.sh) and wait until it answers. Only inside
    ``in_use(alone=True)``: mark the test ``second_engine_restart``."""
    if not _alone:
        raise RuntimeError(
            "restart_second outside in_use(alone=True): mark the test "
            "@pytest.mark.second_engine_restart (tests/conftest.py holds the engine for it)"
        )
    pid = int((RUN_DIR / "dockerd.pid").read_text().strip())
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + 60
    while time.monotonic() < end and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        raise DockerUnavailable(f"the second engine's dockerd ({pid}) did not stop within 60 s")
    time.sleep(down_s)
    argv = (RUN_DIR / "dockerd.argv").read_text().splitlines()
    with LOG.open("ab") as log:
        path = f"{ROOT}/usr/bin:{ROOT}/usr/sbin:{os.environ.get('PATH', '')}"
        subprocess.Popen(
            argv,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env={**os.environ, "PATH": path},
        )
    end = time.monotonic() + 60
    while time.monotonic() < end:
        try:
            second_available()
            return
        except DockerUnavailable:
            time.sleep(0.5)
    second_available()
