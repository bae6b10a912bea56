"""``docker compose`` for one project directory, through ``runner``.

Every call runs the revision's judged model (``compose.judged.json``, ``core.admission.artifact``:
what the policy judged, interpolation done, host paths pinned) with ``--env-file /dev/null``:
compose reads no ``.env`` of its own, so nothing of the release sets a variable compose reads or a
value it interpolates. A secret or config read from ``environment:`` reads a variable of the
agent's own name (``MONKY_DEPLOYD_VALUE_<n>``) whose judged value the model carries: ``up``
hands compose exactly those (``artifact.child_environment``), and nothing else of the model.
Only ``down`` of a revision staged before the model existed (``judged=False``, an older
agent's) falls back to its compose file: a down runs nothing.

The docker CLI always runs with ``DOCKER_CONFIG=<state_dir>/docker`` (the agent's own registry
credential, never ``$HOME/.docker``) and, when configured, ``DOCKER_HOST``. Pull failures are
classified by ``pullerrors`` so the registry's own words reach the log and the report.
"""

from __future__ import annotations

import os
from pathlib import Path

from monky_deployd.adapters.box import runner
from monky_deployd.adapters.box.docker.docker_config import docker_env as docker_only_env
from monky_deployd.adapters.box.state.state import COMPOSE_FILE, LABELS_FILE, MODEL_FILE, PINS_FILE
from monky_deployd.config import DockerCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.render import pullerrors
from monky_deployd.core.render.mask import NO_SECRETS, Masker

# compose's reading of a model (global flags, then the command): every profile (the judged model
# holds every service), env_file named and not read (as the judge read it)
READ_BACK = ("--profile", "*", "config", "--no-env-resolution", "--format", "json")
_MODEL_CAP = 1 << 28  # the judged model is compose's own input: it reads it whole too


def docker_env(cfg: DockerCfg, docker_dir: Path) -> dict[str, str]:
    """The whole environment of every docker child: PATH, DOCKER_CONFIG, DOCKER_HOST if set."""
    return runner.base_env(docker_only_env(docker_dir, cfg.host))


class Compose:
    def __init__(
        self,
        cfg: DockerCfg,
        docker_dir: Path,
        project: str,
        workdir: Path,
        masker: Masker = NO_SECRETS,
        *,
        pinned: bool = False,
        judged: bool = True,
    ) -> None:
        self.cfg = cfg
        # the judged model; a down of an older agent's revision without one: its compose file
        model = workdir / MODEL_FILE
        self.files: tuple[str, ...] = (
            ("--file", str(model), "--env-file", os.devnull)
            if judged or model.is_file()
            else ("--file", str(workdir / COMPOSE_FILE))
        )
        self.pinned = pinned  # also read compose.pinned.yaml (a release's images by ID)
        self.project = project
        self.workdir = workdir
        self.env = docker_env(cfg, docker_dir)
        self.masker = masker  # every secret the project's output may echo

    def overrides(self, labels: bool = True) -> tuple[Path, ...]:
        """The agent's own override files every call reads after the model, in order: the
        pins (a restore), the labels override when written."""
        pins = (self.workdir / PINS_FILE,) if self.pinned else ()
        over = self.workdir / LABELS_FILE
        return (*pins, *((over,) if labels and over.is_file() else ()))

    def _argv(self, *args: str, labels: bool = True) -> tuple[str, ...]:
        return (
            self.cfg.binary,
            "compose",
            "--project-name",
            self.project,
            "--project-directory",
            str(self.workdir),
            *self.files,
            *(a for over in self.overrides(labels) for a in ("--file", str(over))),
            *args,
        )

    def reading(self) -> runner.Result:
        """Compose's own reading of what ``up`` runs (the same files, ``--env-file``,
        environment: ``_up_env``; every profile): ``config --format json``
        (``agent.reading``). Its output holds the release's secrets: parsed, never logged."""
        return runner.run(
            self._argv(*READ_BACK),
            env=self._up_env(),
            timeout=self.cfg.command_timeout_s,
            cwd=str(self.workdir),
            masker=self.masker,
            check=False,
        )

    def _run(self, *args: str, timeout: float, code: Code) -> runner.Result:
        return runner.run(
            self._argv(*args),
            env=self.env,
            timeout=timeout,
            cwd=str(self.workdir),
            masker=self.masker,
            code=code,
        )

    def pull(self, registry_host: str | None = None) -> None:
        result = runner.run(
            self._argv("pull", "--quiet"),
            env=self.env,
            timeout=self.cfg.pull_timeout_s,
            cwd=str(self.workdir),
            masker=self.masker,
            check=False,
        )
        if result.returncode != 0:
            raise pullerrors.pull_error(
                result.stderr + "\n" + result.stdout,
                masker=self.masker,
                returncode=result.returncode,
                registry_host=registry_host,
            )

    def up(self, services: tuple[str, ...] = (), *, skip: tuple[str, ...] = ()) -> None:
        """``up --detach --remove-orphans``; pinned: ``--pull never`` too (the images are here);
        ``services``: only those, ``--no-deps`` (and no orphan removal: the rest stays as is);
        ``skip`` (with every other service in ``services``): jobs done for their config, which
        ``up`` would start again (compose starts an exited dependency again, even one another
        service waits for with ``service_completed_successfully``): the others ``--no-deps``
        (compose still orders and waits among them), orphans removed; none left: no ``up``."""
        which = ("--no-deps", *services) if services else ("--remove-orphans",)
        if skip:
            rest = tuple(s for s in services if s not in skip)
            if not rest:
                return
            which = ("--remove-orphans", "--no-deps", *rest)
        self._up("--detach", *which)

    def stop(self, services: tuple[str, ...]) -> None:
        """``stop <services>``: their containers stopped, kept (a held host path moved)."""
        if services:
            self._run("stop", *services, timeout=self.cfg.up_timeout_s, code=Code.DOWN_FAILED)

    def create(self, services: tuple[str, ...]) -> None:
        """``up --no-start --no-deps <services>``: their containers made (again) with this
        config and not started: jobs done for that config whose container was another's."""
        if services:
            self._up("--no-start", "--no-deps", *services)

    def _up_env(self) -> dict[str, str]:
        """The one environment of ``up`` and of compose's reading before it (``reading``): an
        entry the model leaves for compose to resolve from its environment reads the same in
        both (one reading, issue 45)."""
        return {**self.env, **self._values()}

    def _values(self) -> dict[str, str]:
        """The judged values of the model's secrets and configs read from ``environment:``
        (``core.admission.artifact.child_environment``); {} when there is no model to read
        (compose then names what it lacks)."""
        import json

        from monky_deployd.adapters import fsread
        from monky_deployd.core.admission import artifact

        try:
            raw = fsread.read_entry(self.workdir / MODEL_FILE, _MODEL_CAP)
            model = json.loads(raw) if raw is not None else None
        except (fsread.BadEntry, ValueError, RecursionError):
            model = None
        return artifact.child_environment(model) if isinstance(model, dict) else {}

    def _up(self, *args: str) -> None:
        never = ("--pull", "never") if self.pinned else ()
        result = runner.run(
            self._argv("up", *never, *args),
            env=self._up_env(),
            timeout=self.cfg.up_timeout_s,
            cwd=str(self.workdir),
            masker=self.masker,
            check=False,
        )
        if result.returncode != 0:
            disk = "no space left on device" in runner.tail(result.stderr or result.stdout)
            raise runner.failure(result, Code.DISK_FULL if disk else Code.UP_FAILED, self.masker)

    def config_hashes(self) -> dict[str, str] | None:
        """Each service's config hash (``docker compose config --hash '*'``: the hash compose
        compares to decide a recreate) WITHOUT the labels override; None when compose cannot
        say (its last line is logged by the caller; ``up`` names the fault). Only to compare
        with an applied.json an older agent wrote (``agent.apply.reasons.keep_labels``)."""
        result = runner.run(
            self._argv("config", "--hash", "*", labels=False),
            env=self.env,
            timeout=self.cfg.command_timeout_s,
            cwd=str(self.workdir),
            masker=self.masker,
            check=False,
        )
        if result.returncode != 0:
            return None
        found: dict[str, str] = {}
        for line in result.stdout.splitlines():
            name, _, digest = line.strip().partition(" ")
            if name and digest:
                found[name] = digest.strip()
        return found

    def down(self) -> None:
        """Stop and remove the project's containers and networks; volumes are kept."""
        self._run("down", "--remove-orphans", timeout=self.cfg.up_timeout_s, code=Code.DOWN_FAILED)
