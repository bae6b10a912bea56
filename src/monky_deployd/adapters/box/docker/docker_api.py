"""Read-only questions to the Docker Engine API, over its socket, without a subprocess.

The steady-state tick only needs to know whether the applied project's containers are running;
asking the engine directly (``GET /containers/json``) costs a few milliseconds where
``docker compose ps`` costs a Go process start. Every answer is read by ``httpio.read_capped``: at
most ``docker.api_max_body_bytes``, within ``docker.command_timeout_s`` overall. The verify phase
inspects each container
(``GET /containers/{id}/json``: exit code, restart policy, start time, health log, image ID) and a
verified release records its images' digests (``GET /images/{id}/json``). The ownership check
also lists a project's volumes and networks (``GET /volumes``, ``GET /networks``), the local
policy asks whose each name of a release is (``resource_objects``); the disk
pre-flight asks where pulls write (``GET /info``), the host facts the engine's version
(``GET /version``); the bake and a job's exit read the project's events (``GET /events``: who
stopped a container). Everything that changes state still goes through ``docker compose``
(``compose.py``).

What verify and the bake watch, each container inspected and the project's events, is
``adapters.box.docker.watch``' (asked the same way: ``_fetch``, ``_get``, capped, within the
deadline, its faults named).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import httpx

from monky_deployd.adapters import deadline
from monky_deployd.adapters.httpio import PoolTransport, read_capped
from monky_deployd.adapters.tls import no_tls
from monky_deployd.config import DockerCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import CommandError, DeployError
from monky_deployd.core.lifecycle.services import ServiceState

if TYPE_CHECKING:  # (verify, bake and the apply's repair only: off the no-op tick's imports)
    from monky_deployd.core.admission.artifact import Mount
    from monky_deployd.core.lifecycle.halfdone import Seen

DEFAULT_SOCKET = "/var/run/docker.sock"
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
ONEOFF_LABEL = "com.docker.compose.oneoff"  # "True" on `docker compose run` containers
NUMBER_LABEL = "com.docker.compose.container-number"
WORKING_DIR_LABEL = "com.docker.compose.project.working_dir"
COMPOSE_VERSION_LABEL = "com.docker.compose.version"  # the compose that created the container
CONFIG_HASH_LABEL = "com.docker.compose.config-hash"  # the service config it was created from
REVISION_LABEL = (
    "monky-deployd.revision"  # core.records.reasons.LABEL_REVISION (the labels override)
)
DEPLOY_ID_LABEL = "monky-deployd.deploy-id"  # core.records.reasons.LABEL_DEPLOY_ID
_HEALTH_RE = re.compile(r"\((healthy|unhealthy|health: starting)\)")
_STAMP_RE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")
_EXIT_RE = re.compile(r"Exited \((-?\d{1,4})\)")


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
                    exit_code=_exit_code(str(r.get("Status", ""))),
                    container_id=str(r.get("Id", "")),
                    made_by=_made_by(r.get("Labels") or {}),
                    oneoff=(r.get("Labels") or {}).get(ONEOFF_LABEL) == "True",
                )
                for r in rows
            ),
            key=lambda s: s.name,
        )
    except (ValueError, AttributeError, TypeError) as exc:
        raise _not_a_list(where) from exc


def project_seen(cfg: DockerCfg, project: str) -> list[Seen]:
    """The project's containers with their names, states and numbers (``core.lifecycle.halfdone``'s
    input: what compose may have left half done)."""
    from monky_deployd.core.lifecycle.halfdone import Seen

    rows, where = _project_rows(cfg, project)
    try:
        return [
            Seen(
                service=str(labels.get(SERVICE_LABEL, "")),
                number=str(labels.get(NUMBER_LABEL, "")),
                name=str((r.get("Names") or [""])[0]).lstrip("/"),
                state=str(r.get("State", "")),
                created=int(r.get("Created") or 0),
                container_id=str(r.get("Id", "")),
                oneoff=labels.get(ONEOFF_LABEL) == "True",
            )
            for r in rows
            if isinstance(labels := r.get("Labels") or {}, dict)
        ]
    except (ValueError, AttributeError, TypeError, IndexError) as exc:
        raise _not_a_list(where) from exc


def _made_by(labels: dict[str, Any]) -> str:
    """``revision/deploy-id`` from the container's monky-deployd labels ("" without them)."""
    rev = str(labels.get(REVISION_LABEL) or "")
    return f"{rev}/{labels.get(DEPLOY_ID_LABEL) or ''}" if rev else ""


def revision_projects(cfg: DockerCfg, revision: str) -> set[str]:
    """The compose projects that have a container (any state) labelled with ``revision``
    (``monky-deployd.revision``): where a revision's containers run, whatever the records say."""
    filters = json.dumps({"label": [f"{REVISION_LABEL}={revision}"]})
    rows = _get(
        cfg, "/containers/json", {"all": "1", "filters": filters}, f"{revision}'s containers"
    )
    return {
        str(labels.get(PROJECT_LABEL))
        for r in (rows if isinstance(rows, list) else [])
        if isinstance(r, dict)
        and isinstance(labels := r.get("Labels"), dict)
        and labels.get(PROJECT_LABEL)
    }


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


def owners(kind: str, objects: list[dict[str, Any]]) -> list[str | None]:
    """The project label of each of ``objects`` (``resource_objects`` of ``kind``)."""
    labels = [
        _dict(o.get("Config")).get("Labels") if kind == "container" else o.get("Labels")
        for o in objects
    ]
    return [
        str(ls[PROJECT_LABEL]) if isinstance(ls, dict) and ls.get(PROJECT_LABEL) else None
        for ls in labels
    ]


def resource_objects(cfg: DockerCfg, kind: str, name: str) -> list[dict[str, Any]]:
    """Each volume, network or container (``kind``) the engine has by the name ``name``, as it
    answers (its driver, options, labels); empty when it has none. One GET: ``GET
    /volumes/{name}``; ``GET /networks`` filtered by name, the exact name kept (the engine
    allows two networks of one name); ``GET /containers/{name}/json``, its ``Name`` checked (the
    engine also answers for an ID prefix). The local policy's facts (``agent.policy.names_now``:
    whose each is, and how the project's own are defined)."""
    from urllib.parse import quote

    what = f"the {kind} {name}"
    if kind == "volume":
        info = _get(cfg, f"/volumes/{quote(name, safe='')}", None, what)
        return [info] if isinstance(info, dict) and info.get("Name") == name else []
    if kind == "network":
        found = _get(cfg, "/networks", {"filters": json.dumps({"name": [name]})}, what)
        if not isinstance(found, list):
            raise _bad_answer(cfg.host or DEFAULT_SOCKET, "GET /networks", "a list of networks")
        return [r for r in found if isinstance(r, dict) and r.get("Name") == name]
    if kind == "container":
        info = _get(cfg, f"/containers/{quote(name, safe='')}/json", None, what)
        ours = isinstance(info, dict) and info.get("Name") == f"/{name}"
        return [info] if ours and isinstance(info, dict) else []
    raise ValueError(f"not a kind of resource: {kind}")


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _project_rows(cfg: DockerCfg, project: str) -> tuple[list[dict[str, Any]], str]:
    filters = json.dumps({"label": [f"{PROJECT_LABEL}={project}"]})
    resp, where = _fetch(
        cfg, "/containers/json", {"all": "1", "filters": filters}, f"project {project}'s containers"
    )
    _answered(resp, where, "to a container list")
    try:
        rows = resp.json()
    except (ValueError, RecursionError) as exc:
        raise _not_a_list(where) from exc
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise _not_a_list(where)
    return rows, where


def _answered(resp: httpx.Response, where: str, asked: str) -> None:
    """DOCKER_UNAVAILABLE unless the engine answered 200 (``asked``: ``to GET /events``...)."""
    if resp.status_code != 200:
        raise CommandError(
            f"the Docker engine at {where} answered HTTP {resp.status_code} {asked}",
            code=Code.DOCKER_UNAVAILABLE,
            hint="`docker ps` as this user, and dockerd's log",
            detail=resp.text[:500],
        )


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


def _exit_code(status: str) -> int | None:
    """``Exited (3) 2 seconds ago`` -> 3; None for any other status."""
    match = _EXIT_RE.match(status)
    return int(match.group(1)) if match else None


def _health(status: str) -> str:
    match = _HEALTH_RE.search(status)
    return match.group(1).removeprefix("health: ") if match else ""


def _get(cfg: DockerCfg, path: str, params: dict[str, str] | None, what: str) -> Any:
    """One GET to the engine, its JSON body; 404 -> None; other faults DOCKER_UNAVAILABLE."""
    resp, where = _fetch(cfg, path, params, what)
    if resp.status_code == 404:
        return None
    _answered(resp, where, f"when asked for {what}")
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


def mounts(cfg: DockerCfg) -> list[Mount]:
    """Every host path a container of the box has mounted, with whether it may write there
    (``core.admission.artifact.Mount``): each container's bind sources (``GET
    /containers/json?all=1``, stopped ones too: a restart mounts again) and the ``device`` of each
    local volume it uses (``GET /volumes``: a volume that binds a host directory)."""
    from monky_deployd.core.admission.artifact import Mount

    rows = _get(cfg, "/containers/json", {"all": "1"}, "its containers' mounts")
    vols = _get(cfg, "/volumes", None, "its volumes")
    devices: dict[str, str] = {}
    for vol in (vols.get("Volumes") if isinstance(vols, dict) else None) or []:
        opts = vol.get("Options") if isinstance(vol, dict) else None
        device = opts.get("device") if isinstance(opts, dict) else None
        if isinstance(device, str) and device.startswith("/"):
            devices[str(vol.get("Name"))] = device
    found: list[Mount] = []
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict):
            continue
        names = row.get("Names") or ["?"]
        who = f"container {str(names[0]).lstrip('/')}"
        labels = row.get("Labels")
        project = str(labels.get(PROJECT_LABEL, "")) if isinstance(labels, dict) else ""
        for mount in row.get("Mounts") or []:
            if not isinstance(mount, dict):
                continue
            kind = mount.get("Type")
            source = mount.get("Source") if kind == "bind" else devices.get(str(mount.get("Name")))
            if isinstance(source, str) and source:
                found.append(Mount(who, project, source, mount.get("RW") is not False))
    return found
