"""Read-only questions to the Docker Engine API, over its socket, without a subprocess.

The steady-state tick only needs to know whether the applied project's containers are running;
asking the engine directly (``GET /containers/json``) costs a few milliseconds where
``docker compose ps`` costs a Go process start. Everything that changes state still goes through
``docker compose`` (``compose.py``).
"""

from __future__ import annotations

import json
import re

import httpx

from monky_deployd.adapters.tls import no_tls
from monky_deployd.config import DockerCfg
from monky_deployd.core.errors import Code, CommandError
from monky_deployd.core.services import Service

DEFAULT_SOCKET = "/var/run/docker.sock"
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
_HEALTH_RE = re.compile(r"\((healthy|unhealthy|health: starting)\)")


def _client(cfg: DockerCfg, timeout: float) -> tuple[httpx.Client, str]:
    host = cfg.host or f"unix://{DEFAULT_SOCKET}"
    if host.startswith("unix://"):
        path = host.removeprefix("unix://")
        transport = httpx.HTTPTransport(uds=path, verify=no_tls())
        return httpx.Client(transport=transport, timeout=timeout, trust_env=False), path
    if host.startswith("tcp://"):
        base = "http://" + host.removeprefix("tcp://")
        return httpx.Client(base_url=base, timeout=timeout, trust_env=False, verify=no_tls()), base
    raise CommandError(
        f"docker.host {host!r} is neither unix:// nor tcp://",
        code=Code.DOCKER_HOST_UNSUPPORTED,
        outcome="refused",
        hint="docker.host in config.yaml (unset means the local socket)",
    )


def project_containers(cfg: DockerCfg, project: str) -> list[Service]:
    """The compose project's containers (running or not), by service name."""
    client, where = _client(cfg, cfg.command_timeout_s)
    filters = json.dumps({"label": [f"{PROJECT_LABEL}={project}"]})
    base = "" if where.startswith("http") else "http://docker"
    try:
        with client:
            resp = client.get(f"{base}/containers/json", params={"all": "1", "filters": filters})
    except httpx.HTTPError as exc:
        raise CommandError(
            f"cannot ask the Docker engine at {where} for project {project}'s containers: {exc}",
            code=Code.DOCKER_UNAVAILABLE,
            hint=f"that dockerd is running and {where} is accessible to this user "
            "(member of the docker group)",
        ) from exc
    if resp.status_code != 200:
        raise CommandError(
            f"the Docker engine at {where} answered HTTP {resp.status_code} to a container list",
            code=Code.DOCKER_UNAVAILABLE,
            hint="`docker ps` as this user, and dockerd's log",
            detail=resp.text[:500],
        )
    try:
        rows = resp.json()
        return sorted(
            (
                Service(
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
        raise CommandError(
            f"the Docker engine at {where} answered a container list that is not JSON",
            code=Code.DOCKER_UNAVAILABLE,
            hint="dockerd's version and log",
        ) from exc


def _health(status: str) -> str:
    match = _HEALTH_RE.search(status)
    return match.group(1).removeprefix("health: ") if match else ""
