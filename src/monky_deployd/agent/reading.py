"""One reading, performed (``core.admission.reading`` compares): compose's own reading of the
judged model, as ``up`` reads it, against what was judged; POLICY_TWO_READINGS on a difference.

- ``of_text``: the model's bytes before they are written (the policy phase, ``agent.policy.check``;
  the model of a revision an older agent staged, ``agent.policy.ensure_model``), handed to
  compose in memory;
- ``before_up``: the revision's files right before every ``up`` (an apply's, a restore's, a
  rollback's: ``agent.apply.steps``), read by the very ``Compose`` that runs the ``up``: the same
  ``--file`` list (the model, the agent's pins and labels overrides), ``--env-file /dev/null``,
  environment; the overrides' own values merged over the judged model as compose merges them.

And right before every ``up``, what compose would carry over from a container it replaces
(a bind kept at an anonymous volume's target or the image's ``VOLUME``: ``_nothing_carried``)
is refused unless the judged model says it (POLICY_RESOURCE_DRIFT).

One ``docker compose config`` each. Imported on the apply path only (and ``plan``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from monky_deployd.config import Config
from monky_deployd.core.admission import reading
from monky_deployd.core.render.mask import Masker

if TYPE_CHECKING:
    from monky_deployd.adapters.box.docker.compose import Compose


def of_text(
    cfg: Config,
    docker_dir: Path,
    revision: str,
    project: str,
    project_dir: Path,
    model: dict[str, object],
    text: str,
    masker: Masker,
) -> None:
    """Refuse (POLICY_TWO_READINGS) ``text``, the bytes of ``model`` about to be written, when
    compose reads them back as anything but ``model``."""
    from monky_deployd.adapters.box.docker import composeconfig
    from monky_deployd.core.admission.artifact import child_environment

    values = child_environment(model)  # up's environment: what compose resolves from it
    read = composeconfig.read_back(
        cfg.docker, docker_dir, project, project_dir, text, masker, values
    )
    _same(revision, model, read, masker)


def before_up(
    cfg: Config, compose: Compose, revision: str, model: dict[str, object], masker: Masker
) -> None:
    """Refuse (POLICY_TWO_READINGS) the revision's files when compose, reading them exactly as
    the coming ``up`` will, reads anything but ``model``, the judged model (``agent.policy.
    read_model``), with the agent's overrides."""
    from monky_deployd.adapters.box.docker import composeconfig

    overrides = [_override(cfg, path) for path in compose.overrides()]
    read = composeconfig.reading(compose.reading(), compose.project, masker)
    judged = reading.merged(model, *overrides)
    _same(revision, judged, read, masker)
    _nothing_carried(cfg, revision, compose.project, judged)


def _nothing_carried(cfg: Config, revision: str, project: str, judged: dict[str, object]) -> None:
    """Refuse (POLICY_RESOURCE_DRIFT) the up when compose would carry a mount the judged model
    does not say from a container it replaces into the new one (``core.admission.reading.
    carried``)."""
    from monky_deployd.adapters.box.docker import carried
    from monky_deployd.core.admission import policy

    services = judged.get("services")
    services = services if isinstance(services, dict) else {}
    found = reading.carried(
        judged, carried.containers(cfg.docker, project), carried.image_volumes(cfg.docker, services)
    )
    if found:
        raise policy.refusal(revision, found)


def _same(
    revision: str, judged: dict[str, object], read: dict[str, object], masker: Masker
) -> None:
    from monky_deployd.core.admission import policy

    found = reading.differences(judged, read)
    if found:
        raise policy.refusal(revision, reading.two_readings(found, masker))


def _override(cfg: Config, path: Path) -> dict[str, object]:
    """One of the agent's own override files, as YAML (compose's reading of it is compared)."""
    import yaml

    from monky_deployd.adapters import fsread

    try:
        raw = fsread.read_entry(path, cfg.max_bundle_bytes * 4)
        found = yaml.safe_load(raw) if raw is not None else None
    except (fsread.BadEntry, yaml.YAMLError):
        found = None
    return found if isinstance(found, dict) else {}
