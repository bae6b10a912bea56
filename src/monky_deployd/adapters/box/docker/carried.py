"""What compose would carry over into the containers the coming ``up`` replaces (issue 45's
attack: a replaced container's bind kept at an anonymous volume's target or its image's
``VOLUME``), asked of the engine right before every ``up``: the project's containers (``GET
/containers/json``, their mounts) and each service's image's declared volumes (``GET
/images/{ref}/json``). Judged by ``core.admission.reading.carried``."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from typing import Any

from monky_deployd.config import DockerCfg
from monky_deployd.core.admission.reading import PROJECT_LABEL


def containers(cfg: DockerCfg, project: str) -> list[dict[str, Any]]:
    """The project's containers, any state, as the Engine API lists them (their mounts)."""
    from monky_deployd.adapters.box.docker.docker_api import _get

    filters = json.dumps({"label": [f"{PROJECT_LABEL}={project}"]})
    rows = _get(cfg, "/containers/json", {"all": "1", "filters": filters}, "its containers")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def image_volumes(
    cfg: DockerCfg, services: Mapping[str, object]
) -> dict[str, frozenset[str] | None]:
    """Each service's image's declared ``VOLUME`` targets (None: no such local image yet)."""
    from monky_deployd.adapters.box.docker.docker_api import _get

    out: dict[str, frozenset[str] | None] = {}
    for name, spec in services.items():
        ref = spec.get("image") if isinstance(spec, dict) else None
        info = _get(cfg, f"/images/{ref}/json", None, f"image {ref}") if ref else None
        conf = info.get("Config") if isinstance(info, dict) else None
        if not isinstance(conf, dict):
            out[str(name)] = None
            continue
        vols = conf.get("Volumes")
        out[str(name)] = frozenset(
            posixpath.normpath(str(v)) for v in (vols if isinstance(vols, dict) else {})
        )
    return out
