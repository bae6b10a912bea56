"""Which images a commit may remove: those only pruned releases ran. Pure.

An image is a candidate when a release being pruned recorded it as its project's own (pulled or
built by its apply: ``ReleaseImage.own``; an image the engine had before, another project's
rollback image among them, never), no kept release (the new
last-known-good, the one before it) recorded it, and no container on the engine, of any project
and in any state, uses it. The agent then asks ``docker image rm <id>`` without force: the engine
refuses an image a container uses or that several repositories name, and such a refusal is only
logged.
"""

from __future__ import annotations

from collections.abc import Iterable

from monky_deployd.core.records.release import Release


def images_to_remove(
    pruned: Iterable[Release], kept: Iterable[Release], in_use: set[str]
) -> tuple[str, ...]:
    keep = {img.id for rel in kept for img in rel.images.values()} | in_use
    gone = {img.id for rel in pruned for img in rel.images.values() if img.own}
    return tuple(sorted(i for i in gone - keep if i.startswith("sha256:")))
