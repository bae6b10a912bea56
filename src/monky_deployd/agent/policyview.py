"""The running revision under today's policy, for ``plan`` and ``doctor``: what the policy
would refuse in it now (``running``, ``running_lines``: reported, never taken down) and whether
its held host paths still lead where they did (``doctor_check``: what the tick stops it for).

Imported only by ``plan`` and ``doctor``: never on a tick.
"""

from __future__ import annotations

from pathlib import Path

from monky_deployd.adapters.box.docker import hostpath
from monky_deployd.agent.policy import judge, staged
from monky_deployd.config import Config
from monky_deployd.core.admission import rules as terms
from monky_deployd.core.commands.checks import Check
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.render.mask import NO_SECRETS, Masker


def running(
    cfg: Config,
    docker_dir: Path,
    revisions_dir: Path,
    revision: str,
    project: str,
    masker: Masker = NO_SECRETS,
) -> list[terms.Violation] | None:
    """What today's policy would refuse in the running revision (its staged files); None when
    they are gone. Never acted on: a policy change does not take a revision down."""
    project_dir = revisions_dir / revision
    texts = staged(cfg, project_dir)
    if texts is None:
        return None
    from monky_deployd.core.render import atrest  # what compose may echo of the .env: masked

    masker = masker.extend(atrest.secrets_in_env_file(texts[1]))
    return judge(cfg, docker_dir, project, project_dir, texts, masker)[0]


def running_lines(cfg: Config, docker_dir: Path, revisions_dir: Path, masker: Masker) -> list[str]:
    """``plan``'s and ``doctor``'s words on the applied revision under today's policy: one line
    per violation (empty: none, or nothing applied)."""
    from monky_deployd.adapters.box.state.state import StateDir

    applied = StateDir(cfg.state_dir).read_applied()
    if applied is None:
        return []
    try:
        found = running(cfg, docker_dir, revisions_dir, applied.revision, applied.project, masker)
    except DeployError as err:
        return [f"the running revision {applied.revision} cannot be judged: {err.message}"]
    if not found:
        return []
    head = (
        f"the running revision {applied.revision} breaks this box's policy (it keeps running; "
        "a new revision asking the same is refused):"
    )
    return [head, *(f"  {v.line()}" for v in found)]


def doctor_check(cfg: Config, masker: Masker) -> Check:
    """doctor's ``policy`` line: FAIL naming each held host path of the running revision that
    no longer leads where it did (POLICY_PATH_MOVED, what the tick stops it for); WARN naming
    the running services today's policy refuses."""
    from monky_deployd.adapters.box.state.state import StateDir

    state = StateDir(cfg.state_dir)
    applied = state.read_applied()
    try:
        moved = (
            hostpath.held_now(cfg.docker, state.revision_dir(applied.revision)) if applied else ()
        )
    except DeployError as err:
        moved = (("", f"its held host paths cannot be checked: {err.message}"),)
    if moved:
        return Check(
            "policy",
            "FAIL",
            f"a held host path of the running revision no longer leads where it did at its up "
            f"(the tick keeps its services stopped): {'; '.join(why for _, why in moved)}",
            "what changed on the path's way; put it back, then `monky-deployd apply --once "
            "--retry` (judged anew), or publish a new revision",
            str(Code.POLICY_PATH_MOVED),
        )
    lines = running_lines(cfg, state.docker_dir, state.revisions_dir, masker)
    if not lines:
        return Check("policy", "OK", "the running revision (if any) is within this box's policy")
    return Check(
        "policy",
        "WARN",
        lines[0].rstrip(":") + ": " + "; ".join(ln.strip() for ln in lines[1:]),
        "config.yaml's policy (the lines name the allowance), or the next bundle",
        str(Code.POLICY_REFUSED),
    )
