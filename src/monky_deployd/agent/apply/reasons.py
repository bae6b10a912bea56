"""Every apply, restore and rollback carries its reasons (``core.records.reasons``): gathered here
from the tick's facts, set on the tick record (the report's ``reasons``), logged in one line (event
``apply.reasons``), and kept in ``applied.json`` by the commit step (``agent.apply.steps.commit``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from monky_deployd.adapters.box.docker import docker_api
from monky_deployd.adapters.box.docker.compose import Compose
from monky_deployd.adapters.box.state.state import COMPOSE_FILE, StateDir
from monky_deployd.adapters.fsutil import read_if_exists
from monky_deployd.config import DockerCfg
from monky_deployd.core.admission import composefile
from monky_deployd.core.lifecycle.boxsteps import Ready
from monky_deployd.core.lifecycle.facts import AppliedFacts
from monky_deployd.core.lifecycle.plans import Apply, Restore
from monky_deployd.core.lifecycle.services import ServiceState
from monky_deployd.core.records import reasons
from monky_deployd.core.records.applied import Applied, ServiceLabel
from monky_deployd.core.records.held import Held
from monky_deployd.core.records.journal import Journal
from monky_deployd.core.records.tickrecord import TickRecord

log = logging.getLogger("monky_deployd")


def note(rec: TickRecord, found: tuple[reasons.Reason, ...], *, quiet: bool = False) -> None:
    """Set the tick's reasons and log them in one line (``quiet``: a first guess, before the
    checks; the report carries it if a check refuses the apply)."""
    rec.reasons = list(found)
    if quiet:
        return
    log.info(
        f"reasons: {reasons.describe(found)}",
        extra={"event": "apply.reasons", "phase": "plan", "reasons": [r.kind for r in found]},
    )


def drift(
    expected: tuple[str, ...], running: tuple[ServiceState, ...] | None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(missing, stopped): services of ``expected`` with no container, or one not running."""
    seen = {s.name: s.state for s in running or ()}
    missing = tuple(n for n in expected if n not in seen)
    stopped = tuple(n for n in expected if n in seen and seen[n] != "running")
    return missing, stopped


def for_restore(
    plan: Restore, running: tuple[ServiceState, ...] | None, interrupted: Journal | None
) -> tuple[reasons.Reason, ...]:
    rev = plan.applied.revision
    cut = f"{interrupted.phase} of {interrupted.revision}" if interrupted else None
    missing, stopped = drift(plan.missing, running) if cut is None else ((), ())
    return reasons.explain(
        reasons.ReasonFacts(rev, rev, missing=missing, stopped=stopped, interrupted=cut)
    )


def retry_facts(revision: str, held: Held | None, forced: bool) -> tuple[int, str, bool]:
    """(attempt, code, forced): attempt N after a held failure, or the operator's --retry."""
    if held is None or held.revision != revision:
        return 0, "", False
    return held.attempts + 1, held.code, forced


def before(state: StateDir, previous: AppliedFacts | None) -> reasons.Fingerprint | None:
    """The applied revision's fingerprint from applied.json; None when none was kept."""
    record = state.read_applied() if previous is not None else None
    return fingerprint_of(record)


def fingerprint_of(record: Applied | None) -> reasons.Fingerprint | None:
    if record is None or not (record.compose_sha256 or record.env_hashes):
        return None
    return reasons.Fingerprint(record.compose_sha256, record.env_hashes, record.secret_hashes)


def for_apply(
    plan: Apply,
    held: Held | None,
    forced: bool,
    *,
    fp_before: reasons.Fingerprint | None = None,
    fp_after: reasons.Fingerprint | None = None,
    images_before: Mapping[str, str] | None = None,
    images_after: Mapping[str, str] | None = None,
) -> tuple[reasons.Reason, ...]:
    prev = plan.previous.revision if plan.previous else None
    attempt, code, forced = retry_facts(plan.revision, held, forced)
    return reasons.explain(
        reasons.ReasonFacts(
            plan.revision,
            prev,
            fp_before,
            fp_after,
            images_before or {},
            images_after or {},
            retry_attempt=attempt,
            retry_code=code,
            forced=forced,
        )
    )


def checked(
    state: StateDir,
    rec: TickRecord,
    plan: Apply,
    ready: Ready,
    secrets: Mapping[str, object],
    held: Held | None,
    forced: bool,
) -> Ready:
    """Once every check passed: the new fingerprint (the hash key is made now, if it is the
    first), the full reasons noted, and the fingerprint handed to the commit step."""
    after = reasons.fingerprint(state.hash_key(), ready.compose, ready.env_text, secrets)
    note(rec, for_apply(plan, held, forced, fp_before=before(state, plan.previous), fp_after=after))
    return replace(ready, fingerprint=after)


def keep_labels(
    docker: DockerCfg,
    state: StateDir,
    compose: Compose,
    deploy_id: str,
    judged: tuple[Mapping[str, object], str] | None,
) -> dict[str, ServiceLabel]:
    """Rewrite the staged revision's labels override so that only a service this apply changes
    gets its revision and deploy id: one whose config digest
    (``core.records.reasons.service_digests`` of ``judged``: compose's effective configuration the
    policy read, and the rendered .env) differs from applied.json's, or whose pulled image is not
    the one the applied release ran, or a new one. The others keep the labels of the apply that
    last changed them, so compose does not recreate them for a label. An applied.json an older
    agent wrote holds compose's own hashes: compared once by ``config --hash``, the digests kept
    from then on. Returns what Commit keeps in applied.json (empty when neither can be had: every
    service is then labelled new)."""
    revision, project = compose.workdir.name, compose.project
    digests = reasons.service_digests(state.hash_key(), *judged) if judged is not None else None
    applied = state.read_applied()
    if applied is None or applied.project != project:
        before: Mapping[str, ServiceLabel] = {}
        moved: set[str] = set()
    else:
        before = applied.service_labels
        moved = _images_moved(docker, state, applied.revision, revision)
    hashes = digests
    if digests is None or not reasons.digested(before):
        hashes = compose.config_hashes()  # an older agent's record: its kind of hash, once
    if not hashes:
        log.warning(
            "compose config --hash gave no service hashes: every service gets new labels",
            extra={"event": "apply.labels", "revision": revision},
        )
        return {}
    stamped = reasons.service_labels(hashes, before, revision, deploy_id, moved, digests)
    state.write_labels(revision, reasons.labels_override(revision, deploy_id, hashes, stamped))
    return stamped


def _images_moved(docker: DockerCfg, state: StateDir, applied: str, revision: str) -> set[str]:
    """The services whose image, as pulled now, is not the one the applied release ran (a new
    image under the same tag: compose recreates them although their definition is the same)."""
    release = state.read_release(applied)
    raw = read_if_exists(state.revision_dir(revision) / COMPOSE_FILE)
    if release is None or raw is None:
        return set()
    doc = composefile.load(raw.decode("utf-8", "replace"))
    moved: set[str] = set()
    for service, ref in composefile.images(doc if isinstance(doc, dict) else {}):
        ran = release.images.get(service)
        if ran is None or "$" in ref:  # a variable: the hash covers what it resolves to
            continue
        now = docker_api.image_id(docker, ref)
        if now and ran.id and now != ran.id:
            moved.add(service)
    return moved
