"""Before a pinned ``up`` (a restore, a rollback): pull back, by digest, the release's images
the box lost (``core.lifecycle.repin``), with the agent's registry credential
(``DOCKER_CONFIG``)."""

from __future__ import annotations

import logging

from monky_deployd.adapters.box import runner
from monky_deployd.adapters.box.docker import docker_api
from monky_deployd.adapters.box.docker.compose import docker_env
from monky_deployd.agent.context import Context
from monky_deployd.core.errors import Code
from monky_deployd.core.lifecycle import repin
from monky_deployd.core.render import pullerrors

log = logging.getLogger("monky_deployd")


def ensure_images(ctx: Context, revision: str) -> int:
    """Pull each image of ``revision``'s release that is not on the box by the digest the
    release recorded; raise PINNED_IMAGE_GONE when one cannot come back. Returns the pulls."""
    release = ctx.state.read_release(revision)
    if release is None:
        return 0
    cfg = ctx.cfg.docker
    present = {i.id: bool(docker_api.image_id(cfg, i.id)) for i in release.images.values()}
    gone = repin.missing(release, present)
    for service, image in gone:
        if not image.digest:
            raise repin.gone(revision, service, image, "its release recorded no digest")
        log.warning(
            f"the image of {service} pinned by revision {revision} ({image.id[:19]}) is gone "
            f"from this box: pulling it back by digest {image.digest}",
            extra={"event": "repin.pull", "revision": revision, "service": service},
        )
        result = runner.run(
            (cfg.binary, "pull", "--quiet", image.digest),
            env=docker_env(cfg, ctx.state.docker_dir),
            timeout=cfg.pull_timeout_s,
            masker=ctx.masker,
            check=False,
        )
        if result.returncode != 0:
            err = pullerrors.pull_error(
                result.stderr + "\n" + result.stdout,
                masker=ctx.masker,
                returncode=result.returncode,
            )
            if err.code is not Code.IMAGE_NOT_FOUND:
                raise err  # the registry is unreachable, refuses the login, ...: its own code
            raise repin.gone(
                revision, service, image, "the registry no longer has it either", err.detail
            )
        if not docker_api.image_id(cfg, image.id):
            raise repin.gone(
                revision, service, image, "the registry served an image with another ID"
            )
    return len(gone)
