"""Read-only questions to the Docker Engine API, over its socket, without a subprocess.

The steady-state tick only needs to know whether the applied project's containers are running;
asking the engine directly (``GET /containers/json``) costs a few milliseconds where
``docker compose ps`` costs a Go process start. Every answer is read by ``httpio.read_capped``: at
most ``docker.api_max_body_bytes``, within ``docker.command_timeout_s`` overall. The verify phase
inspects each container
(``GET /containers/{id}/json``: exit code, restart policy, start time, health log, image ID) and a
verified release records its images' digests (``GET /images/{id}/json``). The ownership check
also lists a project's volumes and networks (``GET /volumes``, ``GET /networks``); the disk
pre-flight asks where pulls write (``GET /info``), the host facts the engine's version
(``GET /version``). Everything that
changes state still goes through ``docker compose`` (``compose.py``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from monky_deployd.adapters import deadline
from monky_deployd.adapters.httpio import PoolTransport, read_capped
from monky_deployd.adapters.tls import no_tls
from monky_deployd.config import DockerCfg
from monky_deployd.core.errors import Code, CommandError, DeployError
from monky_deployd.core.services import ServiceState
from monky_deployd.core.verify import ContainerObs

DEFAULT_SOCKET = "/var/run/docker.sock"
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
ONEOFF_LABEL = "com.docker.compose.oneoff"  # "True" on `docker compose run` containers
WORKING_DIR_LABEL = "com.docker.compose.project.working_dir"
COMPOSE_VERSION_LABEL = "com.docker.compose.version"  # the compose that created the container
_HEALTH_RE = re.compile(r"\((healthy|unhealthy|health: starting)\)")


def _client(cfg: DockerCfg, timeout: float) -> tuple[httpx.Client, str]:
    host = cfg.host or f"unix://{DEFAULT_SOCKET}"
    if host.startswith("unix://"):
        path = host.removeprefix("unix://")
        transport = PoolTransport(uds=path, ssl_context=no_tls())
        return httpx.Client(transport=transport, timeout=timeout, trust_env=False), path
    if host.startswith("tcp://"):
        base = "http://" + host.removeprefix("tcp://")
        transport = PoolTransport(ssl_context=no_tls())
        client = httpx.Client(base_url=base, transport=transport, timeout=timeout, trust_env=False)
        return client, base
    raise CommandError(
        f"docker.host {host!r} is neither unix:// nor tcp://",
        code=Code.DOCKER_HOST_UNSUPPORTED,
        outcome="refused",
        hint="docker.host in config.yaml (unset means the local socket)",
    )


def project_containers(cfg: DockerCfg, project: str) -> list[ServiceState]:
    """The compose project's containers (running or not), by service name."""
    rows, where = _project_rows(cfg, project)
    try:
        return sorted(
            (
                ServiceState(
                    name=str(r.get("Labels", {}).get(SERVICE_LABEL, "")),
                    state=str(r.get("State", "")),
                    health=_health(str(r.get("Status", ""))),
                    image=str(r.get("Image", "")),
                )
                for r in rows
            ),
            key=lambda s: s.name,
        )
    except (ValueError, AttributeError, TypeError) as exc:
        raise _not_a_list(where) from exc


def project_working_dirs(cfg: DockerCfg, project: str) -> dict[str, str]:
    """container name -> the project directory compose recorded for it (its
    ``com.docker.compose.project.working_dir`` label; "" when it has none), for every container
    (running or not) of the compose project ``project``."""
    rows, where = _project_rows(cfg, project)
    try:
        return {
            str((r.get("Names") or [r.get("Id", "?")])[0]).lstrip("/"): str(
                (r.get("Labels") or {}).get(WORKING_DIR_LABEL, "")
            )
            for r in rows
        }
    except (ValueError, AttributeError, TypeError, IndexError) as exc:
        raise _not_a_list(where) from exc


def compose_version_of(cfg: DockerCfg, project: str, label: str, value: str) -> str:
    """The version of the compose that created the project's containers labelled
    ``label=value`` (their ``com.docker.compose.version`` label: compose's core version,
    ``2.40.3``, without a build suffix ``--short`` would print); "" when none is, or when they
    disagree."""
    rows, _ = _project_rows(cfg, project)
    found = {
        str(labels.get(COMPOSE_VERSION_LABEL) or "")
        for r in rows
        if isinstance(labels := r.get("Labels"), dict) and labels.get(label) == value
    }
    return found.pop() if len(found) == 1 else ""


def project_leftovers(cfg: DockerCfg, project: str) -> list[str]:
    """The volumes and networks labelled ``com.docker.compose.project=<project>`` (what
    compose created for it and ``down`` keeps or a failed ``up`` left), as ``volume NAME`` and
    ``network NAME``: a project can exist on the box with no container at all."""
    filters = json.dumps({"label": [f"{PROJECT_LABEL}={project}"]})
    vols = _get(cfg, "/volumes", {"filters": filters}, f"project {project}'s volumes")
    nets = _get(cfg, "/networks", {"filters": filters}, f"project {project}'s networks")
    rows = (vols.get("Volumes") if isinstance(vols, dict) else None) or []
    found = [f"volume {r.get('Name')}" for r in rows if isinstance(r, dict) and r.get("Name")]
    found += [
        f"network {r.get('Name')}"
        for r in (nets if isinstance(nets, list) else [])
        if isinstance(r, dict) and r.get("Name")
    ]
    return sorted(found)


def _project_rows(cfg: DockerCfg, project: str) -> tuple[list[dict[str, Any]], str]:
    filters = json.dumps({"label": [f"{PROJECT_LABEL}={project}"]})
    resp, where = _fetch(
        cfg, "/containers/json", {"all": "1", "filters": filters}, f"project {project}'s containers"
    )
    if resp.status_code != 200:
        raise CommandError(
            f"the Docker engine at {where} answered HTTP {resp.status_code} to a container list",
            code=Code.DOCKER_UNAVAILABLE,
            hint="`docker ps` as this user, and dockerd's log",
            detail=resp.text[:500],
        )
    try:
        rows = resp.json()
    except (ValueError, RecursionError) as exc:
        raise _not_a_list(where) from exc
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise _not_a_list(where)
    return rows, where


def _fetch(
    cfg: DockerCfg, path: str, params: dict[str, str] | None, what: str
) -> tuple[httpx.Response, str]:
    """One GET to the engine, read by ``read_capped`` (``docker.api_max_body_bytes``, within
    ``docker.command_timeout_s``); transport faults and the deadlines named."""
    client, where = _client(cfg, cfg.command_timeout_s)
    base = "" if where.startswith("http") else "http://docker"
    limit = cfg.api_max_body_bytes
    try:
        with client:
            resp = read_capped(
                client,
                "GET",
                f"{base}{path}",
                max_bytes=limit,
                deadline_s=cfg.command_timeout_s,
                too_large=lambda: CommandError(
                    f"the Docker engine at {where} answered {what} with more than {limit} bytes "
                    "(docker.api_max_body_bytes); refused unread",
                    code=Code.DOCKER_RESPONSE_TOO_LARGE,
                    hint=f"what listens at {where} (docker.host): dockerd answers a project's "
                    "list in kilobytes",
                ),
                params=params,
            )
    except DeployError:
        raise
    except httpx.HTTPError as exc:
        bound = deadline.expired_in(exc)
        if bound is not None and bound.kind == "tick":
            raise deadline.tick_error(f"while asking the Docker engine at {where}") from exc
        if bound is not None:
            raise CommandError(
                f"the Docker engine at {where} did not answer {what} "
                f"within {cfg.command_timeout_s:g} s (docker.command_timeout_s)",
                code=Code.DOCKER_UNAVAILABLE,
                hint="dockerd's health and load (`docker ps` as this user), and what listens "
                f"at {where}",
            ) from exc
        raise CommandError(
            f"cannot ask the Docker engine at {where} for {what}: {exc}",
            code=Code.DOCKER_UNAVAILABLE,
            hint=f"that dockerd is running and {where} is accessible to this user "
            "(member of the docker group)",
        ) from exc
    return resp, where


def _bad_answer(where: str, request: str, expected: str) -> CommandError:
    """The engine answered ``request`` with something that is not ``expected``."""
    return CommandError(
        f"the Docker engine at {where} answered {request} with something that is not {expected}",
        code=Code.DOCKER_UNAVAILABLE,
        hint="dockerd's version and log",
    )


def _not_a_list(where: str) -> CommandError:
    return _bad_answer(where, "GET /containers/json", "a JSON list of containers")


def _health(status: str) -> str:
    match = _HEALTH_RE.search(status)
    return match.group(1).removeprefix("health: ") if match else ""


def _get(cfg: DockerCfg, path: str, params: dict[str, str] | None, what: str) -> Any:
    """One GET to the engine, its JSON body; 404 -> None; other faults DOCKER_UNAVAILABLE."""
    resp, where = _fetch(cfg, path, params, what)
    if resp.status_code == 404:
        return None
    if resp.status_code != 200:
        raise CommandError(
            f"the Docker engine at {where} answered HTTP {resp.status_code} when asked for {what}",
            code=Code.DOCKER_UNAVAILABLE,
            hint="`docker ps` as this user, and dockerd's log",
            detail=resp.text[:500],
        )
    try:
        return resp.json()
    except (ValueError, RecursionError) as exc:
        raise CommandError(
            f"the Docker engine at {where} answered {what} with something that is not JSON",
            code=Code.DOCKER_UNAVAILABLE,
            hint="dockerd's version and log",
        ) from exc


def engine_version(cfg: DockerCfg) -> tuple[str, str, str]:
    """(engine version, API version, where) from ``GET /version`` (doctor: the socket answers
    this user); DOCKER_UNAVAILABLE naming the socket otherwise."""
    client, where = _client(cfg, cfg.command_timeout_s)
    client.close()  # only its address: _get opens its own
    info = _get(cfg, "/version", None, "its version")
    if not isinstance(info, dict):
        raise CommandError(
            f"the Docker engine at {where} answered GET /version with no version",
            code=Code.DOCKER_UNAVAILABLE,
            hint="dockerd's version and log",
        )
    return str(info.get("Version", "?")), str(info.get("ApiVersion", "?")), where


def engine_info(cfg: DockerCfg) -> tuple[dict[str, Any], str]:
    """(``GET /info``, where): the daemon's part of ``docker info`` (``DockerRootDir``,
    ``Driver``, ``DriverStatus``, ``RegistryConfig``, ``ServerVersion``), without the CLI's Go
    process; DOCKER_UNAVAILABLE naming the socket otherwise."""
    client, where = _client(cfg, cfg.command_timeout_s)
    client.close()  # only its address: _get opens its own
    info = _get(cfg, "/info", None, "its info")
    if not isinstance(info, dict):
        raise _bad_answer(where, "GET /info", "the daemon's info")
    return info, where


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
    state = info.get("State") or {}
    health = state.get("Health") or {}
    log = health.get("Log") or []
    last = log[-1] if log and isinstance(log[-1], dict) else {}
    config = info.get("Config") or {}
    policy = (info.get("HostConfig") or {}).get("RestartPolicy") or {}
    return ContainerObs(
        service=str((config.get("Labels") or {}).get(SERVICE_LABEL, "")),
        container_id=str(info.get("Id", "")),
        state=str(state.get("Status", "")),
        health=str(health.get("Status", "")),
        exit_code=int(state.get("ExitCode") or 0),
        restart_policy=str(policy.get("Name") or "no"),
        started_at=str(state.get("StartedAt", "")),
        health_output=str(last.get("Output", ""))[-1000:],
        image_id=str(info.get("Image", "")),
        image_ref=str(config.get("Image", "")),
    )


def repo_digests(cfg: DockerCfg, image_id: str) -> list[str]:
    """The image's RepoDigests (``repo@sha256:...``); empty when the engine knows none."""
    info = _get(cfg, f"/images/{image_id}/json", None, f"image {image_id[:19]}")
    digests = info.get("RepoDigests") if isinstance(info, dict) else None
    return [str(d) for d in digests] if isinstance(digests, list) else []


def image_id(cfg: DockerCfg, ref: str) -> str:
    """The ID (``sha256:...``) of the local image ``ref`` names; "" when there is none."""
    info = _get(cfg, f"/images/{ref}/json", None, f"image {ref}")
    found = info.get("Id") if isinstance(info, dict) else None
    return found if isinstance(found, str) else ""


def images_in_use(cfg: DockerCfg) -> set[str]:
    """The image ID of every container on the engine, of any project, in any state."""
    rows = _get(cfg, "/containers/json", {"all": "1"}, "every container")
    return {
        str(r.get("ImageID", ""))
        for r in (rows if isinstance(rows, list) else [])
        if isinstance(r, dict)
    }
