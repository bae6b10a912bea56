"""What verify and the bake watch, asked of the Docker Engine API: each container of a project
inspected (``GET /containers/{id}/json``: exit code, restart policy, start time, health log,
image ID) and the project's events (``GET /events``: who stopped a container). Read the way
``adapters.box.docker.docker_api`` reads every answer (capped, within the deadline, its faults
named). Off the no-op tick's imports.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from monky_deployd.adapters.box.docker.docker_api import (
    _STAMP_RE,
    CONFIG_HASH_LABEL,
    DEPLOY_ID_LABEL,
    ONEOFF_LABEL,
    PROJECT_LABEL,
    REVISION_LABEL,
    SERVICE_LABEL,
    _answered,
    _bad_answer,
    _fetch,
    _get,
    _project_rows,
)
from monky_deployd.config import DockerCfg
from monky_deployd.core.lifecycle.services import EngineEvent
from monky_deployd.core.lifecycle.verify import ContainerObs


def inspect_project(cfg: DockerCfg, project: str) -> list[ContainerObs]:
    """Every service container of the compose project, inspected (what the verify phase
    judges); not the one-off containers of ``docker compose run`` (an operator's exited
    ``run`` without ``--rm`` is not a replica that crashed)."""
    rows, where = _project_rows(cfg, project)  # a malformed list: the engine's fault, at once
    found: list[ContainerObs] = []
    for row in rows:
        cid = str(row.get("Id", ""))
        labels = row.get("Labels")
        if not cid or (isinstance(labels, dict) and labels.get(ONEOFF_LABEL) == "True"):
            continue
        info = _get(cfg, f"/containers/{cid}/json", None, f"container {cid[:12]}")
        if info is None:  # removed between the list and the inspect
            continue
        try:
            found.append(_observation(info))
        except (AttributeError, TypeError, ValueError, LookupError, OverflowError) as exc:
            raise _bad_answer(
                where, f"GET /containers/{cid[:12]}/json", "a container's inspection"
            ) from exc
    return sorted(found, key=lambda c: (c.service, c.container_id))


def _observation(info: dict[str, Any]) -> ContainerObs:
    from monky_deployd.core.lifecycle.verify import ContainerObs

    state = info.get("State") or {}
    health = state.get("Health") or {}
    log = health.get("Log") or []
    last = log[-1] if log and isinstance(log[-1], dict) else {}
    config = info.get("Config") or {}
    labels = config.get("Labels") or {}
    policy = (info.get("HostConfig") or {}).get("RestartPolicy") or {}
    return ContainerObs(
        service=str(labels.get(SERVICE_LABEL, "")),
        container_id=str(info.get("Id", "")),
        state=str(state.get("Status", "")),
        health=str(health.get("Status", "")),
        exit_code=int(state.get("ExitCode") or 0),
        restart_policy=str(policy.get("Name") or "no"),
        started_at=str(state.get("StartedAt", "")),
        health_output=str(last.get("Output", ""))[-1000:],
        image_id=str(info.get("Image", "")),
        image_ref=str(config.get("Image", "")),
        finished_at=_epoch(str(state.get("FinishedAt", ""))),
        unhealthy_since=_failing_since(log) if health.get("Status") == "unhealthy" else 0.0,
        restart_count=int(info.get("RestartCount") or 0),
        oom_killed=state.get("OOMKilled") is True,
        config_hash=str(labels.get(CONFIG_HASH_LABEL, "")),
        revision=str(labels.get(REVISION_LABEL, "")),
        deploy_id=str(labels.get(DEPLOY_ID_LABEL, "")),
        health_log=tuple(
            (_epoch(str(e.get("Start", ""))), int(e.get("ExitCode") or 0))
            for e in log
            if isinstance(e, dict)
        ),
        health_retries=int((config.get("Healthcheck") or {}).get("Retries") or 3),
    )


def _epoch(stamp: str) -> float:
    """The engine's RFC 3339 time (nanoseconds, ``Z``) in epoch seconds; 0.0 for its zero time
    (``0001-01-01T00:00:00Z``: never) or anything unreadable."""
    match = _STAMP_RE.match(stamp)
    if match is None or stamp.startswith("0001-"):
        return 0.0
    frac = (match.group(2) or "")[:6]
    try:
        when = datetime.fromisoformat(
            match.group(1) + (f".{frac}" if frac else "") + match.group(3)
        )
    except ValueError:
        return 0.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def _failing_since(log: list[Any]) -> float:
    """When the trailing run of failed healthchecks began (the health log keeps the last few);
    0.0 when unknown."""
    since = 0.0
    for entry in reversed(log):
        if not isinstance(entry, dict) or entry.get("ExitCode") == 0:
            break
        since = _epoch(str(entry.get("Start", ""))) or since
    return since


def project_events(cfg: DockerCfg, project: str, since: float, until: float) -> list[EngineEvent]:
    """The engine's container events of the compose project between ``since`` and ``until``
    (epoch seconds; ``GET /events`` answers from the engine's memory, which an engine restart
    empties and a busy engine rolls over), oldest first; read like every answer (capped)."""
    filters = json.dumps({"type": ["container"], "label": [f"{PROJECT_LABEL}={project}"]})
    params = {"since": f"{max(0.0, since):.6f}", "until": f"{max(since, until):.6f}"}
    params["filters"] = filters
    resp, where = _fetch(cfg, "/events", params, f"project {project}'s events")
    _answered(resp, where, "to GET /events")
    found: list[EngineEvent] = []
    decoder = json.JSONDecoder()
    text, at = resp.text, 0
    try:
        while (at := _skip_space(text, at)) < len(text):
            row, at = decoder.raw_decode(text, at)
            if isinstance(row, dict) and (event := _event(row)) is not None:
                found.append(event)
    except (ValueError, RecursionError, TypeError, AttributeError, OverflowError) as exc:
        raise _bad_answer(where, "GET /events", "a stream of JSON events") from exc
    return sorted(found, key=lambda e: e.at)


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


def _event(row: dict[str, Any]) -> EngineEvent | None:
    actor = row.get("Actor") or {}
    attrs = actor.get("Attributes") or {}
    cid = str(actor.get("ID") or row.get("id") or "")
    action = str(row.get("Action") or row.get("status") or "")
    if not cid or not action:
        return None
    nano = row.get("timeNano")
    at = int(nano) / 1e9 if isinstance(nano, int) else float(row.get("time") or 0)
    code = attrs.get("exitCode")
    digits = str(code if code is not None else "")
    return EngineEvent(cid, action, at, int(digits) if digits.lstrip("-").isdigit() else None)
