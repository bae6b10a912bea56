"""What the engine says about one container of a compose project (a fact for the planner)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class ServiceState:
    name: str
    state: str
    health: str
    image: str
    exit_code: int | None = None  # an exited container's code (None: running, or unknown)
    container_id: str = ""
    made_by: str = ""  # its labels ``revision/deploy-id``: the apply that made it (or "")
    oneoff: bool = False  # a ``docker compose run`` container: an operator's, not the service's

    def as_report(self) -> dict[str, str]:
        return {"name": self.name, "state": self.state, "health": self.health, "image": self.image}


@dataclass(frozen=True)
class EngineEvent:
    """One container event of the engine's own log (``GET /events``): ``start``, ``die`` (with
    its ``exit_code``), ``kill`` (with its ``signal``: an API stop, kill, restart or removal),
    ``oom``, ``destroy``, ``restart``, ``health_status: unhealthy``."""

    container_id: str
    action: str
    at: float  # epoch seconds (the engine's timeNano)
    exit_code: int | None = None


def repo_digest(ref: str, known: list[str] | tuple[str, ...]) -> str:
    """The RepoDigest (``repo@sha256:...``) among ``known`` (an image's RepoDigests) of the
    repository the compose reference ``ref`` names (``host:5000/app/web:1.4``, ``...@sha256:..``:
    ``host:5000/app/web``); an image pulled from several repositories has several. None of that
    repository: the first known, or ``""``. The one rule for ``Commit`` and ``status``."""
    repo = ref.split("@")[0]
    if ":" in repo.rsplit("/", 1)[-1]:  # a tag, not a registry's port
        repo = repo.rsplit(":", 1)[0]
    return next((d for d in known if d.split("@")[0] == repo), known[0] if known else "")


def foreign(
    made_by: Mapping[str, str], running: Iterable[ServiceState]
) -> tuple[tuple[str, str], ...]:
    """``(service, what made its container)`` for each container that another apply made than
    the one applied.json names for its service (``made_by``: service -> ``revision/deploy-id``,
    its labels): another revision's container under the service's name (a rollback a lock
    stopped), or one made by hand. A service applied.json has no labels for is not judged; one
    whose entry names no deploy (``r1/``: an older record) is judged by its revision only."""
    out: dict[str, str] = {}
    for c in running:
        want = made_by.get(c.name) if not c.oneoff else None
        if want and not same_apply(want, c.made_by) and c.name not in out:
            out[c.name] = c.made_by or "no monky-deployd labels"
    return tuple(sorted(out.items()))


def same_apply(want: str, made: str) -> bool:
    """Whether a container's labels ``made`` (``revision/deploy-id``) are the apply ``want``
    names; a ``want`` without a deploy-id compares the revision only (never a false drift)."""
    if want.endswith("/"):
        return made.split("/", 1)[0] == want[:-1]
    return made == want


def orphans(declared: Iterable[str], running: Iterable[ServiceState]) -> tuple[str, ...]:
    """The project's services with a container that the applied revision does not declare."""
    known = set(declared)
    return tuple(sorted({c.name for c in running if c.name not in known and not c.oneoff}))
