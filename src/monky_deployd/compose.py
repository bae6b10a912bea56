"""``docker compose`` for one project directory, through ``runner``.

The docker CLI always runs with ``DOCKER_CONFIG=<state_dir>/docker`` (the agent's own registry
credential, never ``$HOME/.docker``) and, when configured, ``DOCKER_HOST``. Pull failures are
classified by ``pullerrors`` so the registry's own words reach the log and the report.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import pullerrors, runner
from .config import DockerCfg
from .errors import CommandError
from .state import COMPOSE_FILE


@dataclass(frozen=True)
class Service:
    name: str
    state: str
    health: str
    image: str

    def as_report(self) -> dict[str, str]:
        return {"name": self.name, "state": self.state, "health": self.health, "image": self.image}


def docker_env(cfg: DockerCfg, docker_dir: Path) -> dict[str, str]:
    """The whole environment of every docker child: PATH, DOCKER_CONFIG, DOCKER_HOST if set."""
    extra = {"DOCKER_CONFIG": str(docker_dir)}
    if cfg.host:
        extra["DOCKER_HOST"] = cfg.host
    return runner.base_env(extra)


class Compose:
    def __init__(
        self,
        cfg: DockerCfg,
        docker_dir: Path,
        project: str,
        workdir: Path,
        secrets: Iterable[str] = (),
    ) -> None:
        self.cfg = cfg
        self.project = project
        self.workdir = workdir
        self.env = docker_env(cfg, docker_dir)
        self.secrets = tuple(secrets)

    def _argv(self, *args: str) -> tuple[str, ...]:
        return (
            self.cfg.binary,
            "compose",
            "--project-name",
            self.project,
            "--project-directory",
            str(self.workdir),
            "--file",
            str(self.workdir / COMPOSE_FILE),
            *args,
        )

    def _run(self, *args: str, timeout: float, code: str) -> runner.Result:
        return runner.run(
            self._argv(*args),
            env=self.env,
            timeout=timeout,
            cwd=str(self.workdir),
            secrets=self.secrets,
            code=code,
        )

    def pull(self) -> None:
        try:
            self._run("pull", "--quiet", timeout=self.cfg.pull_timeout_s, code="PULL_FAILED")
        except CommandError as exc:
            if exc.code == "COMMAND_TIMEOUT" or not exc.detail:
                raise
            code, line = pullerrors.classify(exc.detail)
            raise CommandError(
                f"docker compose pull failed for project {self.project}: {line}",
                code=code,
                hint=_PULL_HINTS.get(code, "the registry's message above"),
                detail=exc.detail,
            ) from exc

    def up(self) -> None:
        try:
            self._run(
                "up",
                "--detach",
                "--remove-orphans",
                timeout=self.cfg.up_timeout_s,
                code="UP_FAILED",
            )
        except CommandError as exc:
            if exc.code == "UP_FAILED" and "no space left on device" in exc.detail:
                exc.code = "DISK_FULL"
            raise

    def down(self) -> None:
        """Stop and remove the project's containers and networks; volumes are kept."""
        self._run("down", "--remove-orphans", timeout=self.cfg.up_timeout_s, code="DOWN_FAILED")


_PULL_HINTS = {
    "REGISTRY_AUTH": "the registry credential (manifest entry `use: registry-auth`) for the "
    "bundle's registry_host, written to <state_dir>/docker/config.json",
    "IMAGE_NOT_FOUND": "that the image names and tags of the bundle's compose file exist "
    "in the registry",
    "REGISTRY_UNREACHABLE": "DNS and network reachability of the registry from this box",
    "DISK_FULL": "free space on Docker's data-root and containerd's root (`docker info`)",
}
