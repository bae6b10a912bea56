"""A release's pinned images, when the box lost them. PURE.

A restore and a rollback run the last-known-good release from the image IDs it ran when
verified (``release.json``; ``compose.pinned.yaml``, ``up --pull never``): no registry is
needed while the images are on the box. A ``docker image prune -a`` (a common cron) removes
them once no container uses them. Then the agent pulls each missing image back by the digest
its release recorded (``repo@sha256:...``, with the agent's registry credential), which gives
the same image ID, and pins as before; when that is impossible it says exactly why
(``PINNED_IMAGE_GONE``): the registry no longer has that digest, the release recorded no
digest, or the registry served an image with another ID.
"""

from __future__ import annotations

from collections.abc import Mapping

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.records.release import Release, ReleaseImage

HINT = (
    "re-push the image named (its digest) to the registry, or publish a new revision; an "
    "image prune on the box (`docker image prune -a`) removed it"
)


def missing(release: Release, present: Mapping[str, bool]) -> tuple[tuple[str, ReleaseImage], ...]:
    """The services whose pinned image is not on the box (``present``: image ID -> found),
    by service name; an image two services share is named once."""
    seen: set[str] = set()
    out: list[tuple[str, ReleaseImage]] = []
    for service, image in sorted(release.images.items()):
        if image.id and not present.get(image.id, False) and image.id not in seen:
            seen.add(image.id)
            out.append((service, image))
    return tuple(out)


def gone(
    revision: str, service: str, image: ReleaseImage, why: str, detail: str = ""
) -> DeployError:
    """PINNED_IMAGE_GONE: ``why`` says what the registry (or the release) lacks."""
    digest = image.digest or "(no digest recorded)"
    return DeployError(
        f"the image {service} of revision {revision} ran when verified ({image.id[:19]}, "
        f"{digest}) is gone from this box and cannot be pulled back: {why}",
        code=Code.PINNED_IMAGE_GONE,
        hint=HINT,
        detail=detail,
    )
