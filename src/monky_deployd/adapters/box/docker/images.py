"""The engine's facts on image names (issue 45: box-wide names), asked read-only like
``docker_api``: who runs each image name (``users``: every container's image name and compose
project, ``GET /containers/json?all=1``; whether the image a name gives came from a registry,
``GET /images/{name}/json``'s ``RepoDigests``) for ``core.admission.builds.foreign_tags``, and
which image each name gives now (``ids``: what was on the box before a release pulled or built,
for the image GC's ``core.lifecycle.prune``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from monky_deployd.adapters.box.docker.docker_api import PROJECT_LABEL, _get
from monky_deployd.config import DockerCfg

if TYPE_CHECKING:
    from monky_deployd.core.admission.builds import Users


def users(cfg: DockerCfg) -> Users:
    """Each image name a container of the box (any project, any state) was created from ->
    the projects of those containers (None: no compose label) and whether the image the name
    gives now came from a registry: it has a RepoDigest, on an engine whose RepoDigests say so
    (the classic store; the containerd image store gives a built image one too: never)."""
    from monky_deployd.adapters.box.docker.preflight import uses_containerd_store
    from monky_deployd.core.admission.builds import User, ref

    rows = _get(cfg, "/containers/json", {"all": "1"}, "every container's image")
    names: dict[str, set[str | None]] = {}
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict) or not isinstance(row.get("Image"), str):
            continue
        labels = row.get("Labels")
        project = labels.get(PROJECT_LABEL) if isinstance(labels, dict) else None
        names.setdefault(ref(row["Image"]), set()).add(str(project) if project else None)
    # the containerd image store fills RepoDigests for an image built or loaded on the box too
    # (checked on Docker 26: a build's RepoDigests names its own ID): there no image name is
    # known to have come from a registry, so a pull over another project's is never admitted
    info = _get(cfg, "/info", None, "its info") if names else None
    registry_known = isinstance(info, dict) and not uses_containerd_store(info)
    found = {}
    for name, projects in names.items():
        info = (
            None
            if name.startswith("sha256:")
            else _get(cfg, f"/images/{name}/json", None, f"image {name}")
        )
        digests = info.get("RepoDigests") if isinstance(info, dict) else None
        found[name] = User(frozenset(projects), registry_known and bool(digests))
    return found


def ids(cfg: DockerCfg, names: Iterable[str]) -> dict[str, str]:
    """Each of ``names`` -> the ID of the image it gives now ("" when there is none)."""
    found = {}
    for name in names:
        info = _get(cfg, f"/images/{name}/json", None, f"image {name}")
        got = info.get("Id") if isinstance(info, dict) else None
        found[name] = got if isinstance(got, str) else ""
    return found
