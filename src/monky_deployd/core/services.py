"""What the engine says about one container of a compose project (a fact for the planner)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Service:
    name: str
    state: str
    health: str
    image: str
    exit_code: int | None = None  # an exited container's code (None: running, or unknown)

    def as_report(self) -> dict[str, str]:
        return {"name": self.name, "state": self.state, "health": self.health, "image": self.image}
