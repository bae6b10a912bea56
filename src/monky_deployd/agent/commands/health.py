"""``status``'s view of the applied revision's services and its bake (``core.lifecycle.jobs``,
``core.lifecycle.bake``): from the containers ``agent.commands.status`` already asked the engine
for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.core.lifecycle import jobs as lifecycle
from monky_deployd.core.records.applied import Applied
from monky_deployd.core.records.tickrecord import rfc3339


@dataclass(frozen=True)
class Seen:
    states: tuple[tuple[str, str], ...] = ()  # service -> ok | done | its fault word
    no_healthcheck: tuple[str, ...] = ()
    baking: str = ""
    bake: dict[str, Any] | None = None

    def as_view(self) -> dict[str, Any]:
        return {
            "services": [{"service": n, "state": w} for n, w in self.states],
            "no_healthcheck": list(self.no_healthcheck),
            "bake": self.bake,
        }


def of(state: StateDir, applied: Applied | None, svc: dict[str, Any], now: float) -> Seen:
    """Each long-running service's state (empty when the engine did not answer) and the bake."""
    if applied is None:
        return Seen()
    bake = state.read_bake()
    bake_view: dict[str, Any] | None = None
    baking = ""
    if bake is not None and bake.revision == applied.revision:
        bake_view = {
            "revision": bake.revision,
            "since": rfc3339(bake.since, "seconds"),
            "until": rfc3339(bake.until, "seconds"),
            "previous": bake.previous_revision,
            "failed": bake.failed or None,
        }
        if bake.failed:
            baking = f"revision {bake.revision} failed its bake and is never promoted"
        elif now < bake.until:
            keep = f" ({bake.previous_revision} kept until then)" if bake.previous_revision else ""
            baking = f"revision {bake.revision} bakes until {rfc3339(bake.until, 'seconds')}{keep}"
        else:
            baking = f"revision {bake.revision}'s bake is over: the next tick promotes it"
    if svc.get("engine") != "ok":
        return Seen(baking=baking, bake=bake_view)
    containers = svc.get("containers", [])
    states = lifecycle.service_states(
        applied.services,
        svc.get("done_jobs", applied.jobs),
        (
            (str(c["service"]), str(c["state"]), str(c["health"]), c.get("exit_code"))
            for c in containers
        ),
    )
    for name, made in svc.get("foreign", {}).items():  # what runs is not what was applied
        states = {**states, name: f"drift (runs a container {made} made)"}
    bare = sorted(
        {
            str(c["service"])
            for c in containers
            if c["state"] == "running" and not c["health"] and c["service"] in applied.services
        }
    )
    return Seen(tuple(sorted(states.items())), tuple(bare), baking, bake_view)
