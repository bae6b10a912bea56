"""An estate for end-to-end ticks: the loopback fakes (or the session's real OpenBao, ``real=``),
a real registry, a real engine, and the real CLI run as a subprocess with a config pointing at
all of them.

A test takes one as ``with Lab(tmp, registry, image, db_password=...) as lab: yield lab``: the
exit runs ``cleanup()`` whether or not the test passed."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import yaml

from monky_deployd_testkit.dockerlab import Registry, remove_containers
from monky_deployd_testkit.fakes.estate import Estate
from monky_deployd_testkit.realbao import RealBao

CLI = (sys.executable, "-m", "monky_deployd.cli")
# Where a lab's bind root lies: not under /tmp (pytest's tmp_path), /var/tmp, /home or /root,
# which the agent's systemd unit hides from it, so config.yaml refuses a bind root there
# (config_policy.HIDDEN_BY_UNIT). MONKY_TEST_BIND_BASE moves it (a non-root run).
BIND_BASE = Path(os.environ.get("MONKY_TEST_BIND_BASE", "/srv/monky-tests"))


def bind_root(prefix: str) -> Path:
    """A new directory of its own under ``BIND_BASE`` (``prefix`` and a random suffix: xdist
    workers and parallel runs keep apart); the caller removes it (``shutil.rmtree``)."""
    BIND_BASE.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=BIND_BASE))


@dataclass
class Run:
    rc: int
    lines: list[dict[str, Any]]
    stdout: str
    stderr: str

    @property
    def summary(self) -> dict[str, Any]:
        return self.lines[-1]

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [ln for ln in self.lines if ln.get("level") == "ERROR"]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [ln for ln in self.lines if ln.get("event") == name]


def parse_lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def cli_env(home: Path) -> dict[str, str]:
    """The CLI process's environment: PATH, HOME and, when the caller has them, PYTHONPATH (so a
    worktree's tests run that worktree's code, not the package the venv installed) and
    DOCKER_HOST (the suite's second engine)."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    for name in ("PYTHONPATH", "DOCKER_HOST"):  # DOCKER_HOST: a hook's docker commands, on the
        if os.environ.get(name):  # suite's second engine (the agent reads docker.host only)
            env[name] = os.environ[name]
    return env


# The CLI under a hook (Lab.kill_during): right after the os.replace that puts journal.json in
# place with phase PHASE (of REVISION, when not empty), SIGKILL the tick's process group (its
# session: the agent and its docker children), as systemd kills the unit's cgroup.
KILL_HOOK = """
import json, os, signal, sys
from pathlib import Path
journal, phase, revision = Path(sys.argv.pop(1)), sys.argv.pop(1), sys.argv.pop(1)
real = os.replace
def call(src, dst, *args, **kwargs):
    out = real(src, dst, *args, **kwargs)
    if os.path.basename(dst) == journal.name:
        try:
            got = json.loads(journal.read_bytes())
        except (OSError, ValueError):
            got = {}
        if got.get("phase") == phase and revision in ("", got.get("revision")):
            os.killpg(os.getpgid(0), signal.SIGKILL)
    return out
os.replace = call
from monky_deployd.cli import main
sys.exit(main())
"""


class Lab:
    def __init__(
        self,
        tmp: Path,
        registry: Registry,
        image: str,
        *,
        real: RealBao | None = None,
        db_password: str | None = None,
        tenancy_port: int = 0,
    ) -> None:
        """``db_password``: the app secret the default bundle's manifest reads
        (envs/env-e2e-01/app, key db_password); None leaves it unwritten. ``tenancy_port``: the
        fake tenancy's port (0: a free one; a Ziti network's host.v1 upstream, zitinet.py)."""
        self.tmp = tmp
        # the directory a bundle may bind-mount from (config.yaml's bind_roots)
        self.binds = bind_root("lab")
        self.registry = registry
        self.estate: Estate[Any] = (
            Estate(env="env-e2e-01", real=real, tenancy_port=tenancy_port)
            if real is not None
            else Estate(env="env-e2e-01", tenancy_port=tenancy_port)
        ).start()
        self.project = "e2e" + uuid.uuid4().hex[:8]
        # projects a test moved the lab to: cleanup() takes them down too
        self.extra_projects: tuple[str, ...] = ()
        self.image = image  # a ref in the registry: <host>/<repo>:<tag>
        self.state_dir = tmp / "state"
        self.grant_file = self.estate.write_grant(tmp / "grant.jwt")
        self.config_path = tmp / "config.yaml"
        self.write_config()
        self.estate.bao.set_secret(
            "envs/env-e2e-01/registry", {"robot": f"{registry.username}:{registry.password}"}
        )
        if db_password is not None:
            self.estate.bao.set_secret("envs/env-e2e-01/app", {"db_password": db_password})

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def write_config(self, **overrides: Any) -> None:
        cfg = self.estate.config(state_dir=self.state_dir, grant_file=self.grant_file)
        cfg["disk"] = {"headroom_bytes": 64 * 1024 * 1024}
        cfg["lock_wait_s"] = 1
        # short verify windows: tests count what happened, never how long it took
        # and no bake: a test that stops a container after an apply tests drift (the restore);
        # tests/e2e/test_lifecycle.py sets verify.bake_s itself
        cfg["verify"] = {"stable_s": 2, "deadline_s": 30, "poll_s": 0.25, "bake_s": 0}
        # the lab's own files may be bind-mounted (the local policy refuses other host paths)
        cfg["policy"] = {"allow": {"bind_roots": [str(self.binds)]}}
        cfg.update(overrides)
        self.config_path.write_text(yaml.safe_dump(cfg))

    def bundle(
        self,
        *,
        env_template: str = "# rendered by the agent: substitutes every ${VAR}\n"
        "DB_PASSWORD=${DB_PASSWORD}\nLOG_LEVEL=info\n",
        manifest: list[dict[str, str]] | None = None,
        image: str | None = None,
        project: str | None = None,
        services: tuple[str, ...] = ("web",),
        web: dict[str, Any] | None = None,
        top: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A bundle of ``services`` (each a sleeping busybox); ``web``: keys of the ``web``
        service's compose entry set or replaced (``{"cap_add": [...]}``; None removes one);
        ``top``: the compose file's top-level keys beside ``services`` (``volumes``)."""
        svc = {
            name: {
                "image": image or self.image,
                "command": ["sleep", "3600"],
                "env_file": [".env"],
                "environment": {"FROM_INTERPOLATION": "${DB_PASSWORD}"},
                "network_mode": "none",
                "stop_grace_period": "1s",
            }
            for name in services
        }
        if web and "web" in svc:
            svc["web"].update(web)
            svc["web"] = {k: v for k, v in svc["web"].items() if v is not None}
        if manifest is None:
            manifest = [
                {"name": "DB_PASSWORD", "path": "envs/env-e2e-01/app", "key": "db_password"},
                {
                    "name": "registry",
                    "path": "envs/env-e2e-01/registry",
                    "key": "robot",
                    "use": "registry-auth",
                },
            ]
        return {
            "project": project or self.project,
            "compose": yaml.safe_dump({"services": svc, **(top or {})}),
            "env_template": env_template,
            "manifest": manifest,
            "registry_host": self.registry.host,
        }

    def env(self) -> dict[str, str]:
        """The CLI's environment with the lab's HOME (``cli_env``)."""
        return cli_env(self.tmp / "home")

    def cli(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``monky-deployd <args> --config <the lab's>`` as a process, with the lab's HOME."""
        return subprocess.run(
            (*CLI, *args, "--config", str(self.config_path)),
            capture_output=True,
            text=True,
            env=cli_env(self.tmp / "home"),
            timeout=timeout,
            check=False,
        )

    def _tick_process(self) -> subprocess.Popen[bytes]:
        """``apply --once`` started in a session of its own (its docker children with it)."""
        return subprocess.Popen(
            (*CLI, "apply", "--once", "--config", str(self.config_path)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self.env(),
            start_new_session=True,
        )

    def kill_during(self, phase: str, revision: str | None = None) -> None:
        """Run a tick and SIGKILL it with its docker children (as systemd kills the unit's
        cgroup) the moment journal.json says it entered ``phase`` (of ``revision``, when
        given): from inside, right after the agent puts that journal in place (KILL_HOOK), so
        a short phase (commit) is never missed and the kill never lands in the next one however
        loaded the box is (a poll of journal.json from outside raced both)."""
        journal = self.state_dir / "journal.json"
        proc = subprocess.Popen(
            (
                *(sys.executable, "-c", KILL_HOOK, str(journal), phase, revision or ""),
                *("apply", "--once", "--config", str(self.config_path)),
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self.env(),
            start_new_session=True,
        )
        try:
            proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL, (
            f"the tick ended (exit {proc.returncode}) before reaching {phase} of {revision}"
        )

    def kill_at(self, action: str, *, after: int = 1) -> dict[str, Any]:
        """Start a tick and SIGKILL it with its docker children (as systemd kills the unit's
        cgroup) the moment the engine reports the ``after``-th container ``action`` (create,
        stop, destroy, rename, start, ...) of the lab's project: ``docker events`` read as they
        happen, never a sleep. Returns that event."""
        since = f"{time.time():.3f}"
        events = subprocess.Popen(
            (
                "docker", "events", "--since", since,
                "--filter", f"label=com.docker.compose.project={self.project}",
                "--filter", "type=container", "--filter", f"event={action}",
                "--format", "{{json .}}",
            ),
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        proc = self._tick_process()
        seen: list[dict[str, Any]] = []

        def close_when_over() -> None:  # the tick ended on its own: the stream ends too
            proc.wait()
            time.sleep(2)  # events already on their way are still read
            events.kill()

        threading.Thread(target=close_when_over, daemon=True).start()
        try:
            assert events.stdout is not None
            for line in events.stdout:
                seen.append(json.loads(line))
                if len(seen) == after:
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
            assert seen, f"the engine reported no {action} of {self.project}"
        finally:
            events.kill()
            events.wait(timeout=30)
            if proc.poll() is None and len(seen) < after:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        assert proc.returncode == -signal.SIGKILL, f"the tick ended before the {action}"
        return seen[-1]

    def tick(self, *extra: str) -> Run:
        proc = self.cli("apply", "--once", *extra, timeout=600)
        return Run(proc.returncode, parse_lines(proc.stdout), proc.stdout, proc.stderr)

    def _ps(
        self, project: str | None, fmt: str, *filters: str, every: bool = False
    ) -> list[list[str]]:
        """``docker ps`` of the project's running containers (``every``: in any state, ``-a``):
        the words of each line."""
        argv = [
            "docker",
            "ps",
            *(("-a",) if every else ()),
            "--filter",
            f"label=com.docker.compose.project={project or self.project}",
        ]
        for f in filters:
            argv += ["--filter", f]
        out = subprocess.run(
            (*argv, "--format", fmt), capture_output=True, text=True, check=True
        ).stdout
        return [ln.split() for ln in out.splitlines() if ln.strip()]

    def containers(self, project: str | None = None) -> dict[str, str]:
        """service -> container id of the project's running containers."""
        rows = self._ps(project, '{{.ID}} {{.Label "com.docker.compose.service"}}')
        return {svc: cid for cid, svc in rows}

    def mounts(self, project: str | None = None) -> list[dict[str, Any]]:
        """Every mount (the engine's ``Mounts`` entries) of every container of the project (the
        lab's by default), in any state."""
        label = f"label=com.docker.compose.project={project or self.project}"
        ids = subprocess.run(
            ("docker", "ps", "-aq", "--filter", label), capture_output=True, text=True, check=True
        ).stdout.split()
        if not ids:
            return []
        out = subprocess.run(
            ("docker", "inspect", "--format", "{{json .Mounts}}", *ids),
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        return [m for line in out.splitlines() for m in json.loads(line) or []]

    def states(self, service: str) -> list[str]:
        """The engine's state of each of the service's containers, in any state (``created``,
        ``running``, ``exited`` ...)."""
        rows = self._ps(
            None, "{{.State}}", f"label=com.docker.compose.service={service}", every=True
        )
        return [row[0] for row in rows]

    def labelled(self, revision: str) -> dict[str, str]:
        """service -> deploy id of the running containers labelled with ``revision``
        (``docker ps --filter label=monky-deployd.revision=<rev>``)."""
        rows = self._ps(
            None,
            '{{.Label "com.docker.compose.service"}} {{.Label "monky-deployd.deploy-id"}}',
            f"label=monky-deployd.revision={revision}",
        )
        return {svc: deploy for svc, deploy in rows}

    def container_env(self, service: str = "web") -> dict[str, str]:
        cid = self.containers()[service]
        raw = subprocess.run(
            ("docker", "exec", cid, "cat", "/proc/1/environ"), capture_output=True, check=True
        ).stdout
        pairs = [item.decode("utf-8").split("=", 1) for item in raw.split(b"\0") if item]
        return {k: v for k, v in pairs}

    def set_health(self, healthy: bool, service: str = "web") -> None:
        """Turn the service's healthcheck ``test -f /healthy`` (its command touches the file at
        start) healthy or unhealthy by the test's hand, then wait until the engine reports it so.
        A timer inside the container (``sleep 4; rm /healthy``) races `up` and verify on a loaded
        box; this does not."""
        cid = self.containers()[service]
        change = ("touch", "/healthy") if healthy else ("rm", "-f", "/healthy")
        subprocess.run(("docker", "exec", cid, *change), check=True)
        want, seen = ("healthy" if healthy else "unhealthy"), ""
        for _ in range(240):
            seen = subprocess.run(
                ("docker", "inspect", "--format", "{{.State.Health.Status}}", cid),
                capture_output=True, text=True, check=True,
            ).stdout.strip()  # fmt: skip
            if seen == want:
                return
            time.sleep(0.25)
        raise AssertionError(f"{service} never reported {want} (last: {seen!r})")

    def end_bake(self) -> None:
        """End the running bake now, by the test's hand: bake.json's ``until`` (the commit's
        time + verify.bake_s) moved to this moment, written as the agent writes it. A test then
        runs its in-the-bake ticks under a bake far longer than any loaded box needs, and the
        next tick promotes without the test waiting out a timer."""
        from dataclasses import replace

        from monky_deployd.adapters.box.state.state import StateDir

        state = StateDir(self.state_dir)
        bake = state.read_bake()
        assert bake is not None, "nothing bakes"
        state.write_bake(replace(bake, until=min(bake.until, time.time())))

    def pulls(self) -> int:
        return self.registry.request_count("/manifests/", ("GET", "HEAD"))

    def cleanup(self) -> None:
        for project in {self.project, *self.extra_projects}:
            remove_containers(project)
            subprocess.run(
                ("docker", "network", "rm", f"{project}_default"), capture_output=True, check=False
            )
        self.estate.stop()
        shutil.rmtree(self.binds, ignore_errors=True)
