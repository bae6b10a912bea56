"""``monky-deployd bundle check BUNDLE``: a box's whole admission of a bundle, run offline by the
code a tick runs, before the bundle is published (the release pipeline's CI job). Every stage
that can run reports in one run, each judging what the one before did not refuse outright
(``run``); a tick still stops at its first refusal, the verdict's first (``bundleverdict``).

    bundle: size (max_bundle_bytes), signatures (``--trust FILE``: core.signing.trust.judge),
            validation (core.admission.bundle.validate), relative and ~ binds (check_binds,
            after the template's own literal values), registry credential
    render: .env rendered from placeholders     core.admission.prepare.env_values, render_env
    policy: the policy on compose's model       agent.policy.judge (engine=False); the judged
            model's read-back budget (max_bundle_bytes x 8)
    policy: compose's reading of the judged model's bytes
                                                agent.reading.of_text (POLICY_TWO_READINGS)

No secret is read: each manifest entry's value is a placeholder of its kind (``placeholder``),
so interpolation still resolves. The box's own facts (the engine's data root and its
containers' mounts, its disk, its projects) are not judged, host paths' links are followed on
this machine: the output says so in one line (``agent.policy.OFFLINE``). Exit 0 admitted, 5
refused, 2 usage; 1 when the check itself cannot run here (no docker CLI: COMMAND_NOT_FOUND);
``--format json``: the JSON verdict on stdout for each.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monky_deployd.agent.commands.bundlefile import Usage, read_bundle
from monky_deployd.agent.commands.bundleverdict import Verdict, emit
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import ConfigError, DeployError

if TYPE_CHECKING:
    from monky_deployd.core.admission.bundle import Bundle

DEFAULT_ENV = "bundle-check"
# variable names whose value compose reads as a number (a port, a count): "1" stands for them
_NUMBER_SUFFIXES = ("PORT", "_COUNT", "_REPLICAS", "_SIZE", "_TIMEOUT", "_UID", "_GID")


def main(args: argparse.Namespace) -> int:
    try:
        verdict = run(args)
    except Usage as exc:
        verdict = Verdict(args.revision, outcome="usage", message=str(exc))
    except DeployError as err:  # the check itself could not run here (no docker CLI)
        verdict = Verdict(args.revision, outcome="unchecked", message=str(err))
    if verdict.outcome:
        print("\n".join(verdict.text()), file=sys.stderr)
    if args.format == "json":
        shown = json.dumps(verdict.as_json(), indent=2, ensure_ascii=False)
    else:
        shown = "" if verdict.outcome else "\n".join(verdict.text())
    if shown:
        emit(shown)
    return verdict.exit_status()


def _yaml_section(path: Path, key: str) -> object:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise Usage(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    except yaml.YAMLError:
        raise Usage(f"{path} is not YAML") from None
    if not isinstance(data, dict) or key not in data:
        raise Usage(f"{path} holds no {key}: section")
    return data[key]


def config_for(args: argparse.Namespace) -> Any:
    """The Config whose policy judges: ``--policy``'s section over the defaults, or over the
    config.yaml ``-c`` (or ``$MONKY_DEPLOYD_CONFIG``) names (its ``policy:`` replaced whole,
    the rest kept: its state_dir, locks.dir and docker.host are protected paths and roots);
    else config.yaml's; ``--trust``'s section as its trust (no trust: signatures not
    verified)."""
    from pydantic import ValidationError

    from monky_deployd.config import Config, load

    try:
        if args.policy is not None:
            section = _yaml_section(args.policy, "policy")
            if section is None:
                raise Usage(
                    f"{args.policy}'s policy: section is empty: write `policy: {{}}` for the "
                    "defaults (no allowance), as a box's config.yaml must"
                )
            cfg = Config.model_validate({"env": args.env or DEFAULT_ENV, "policy": section})
            if getattr(args, "config_named", False):  # -c's config.yaml, its policy replaced
                cfg = load(args.config).model_copy(update={"policy": cfg.policy})
        else:
            cfg = load(args.config)
        trust = _yaml_section(args.trust, "trust") if args.trust is not None else {}
        return cfg.model_copy(
            update={"trust": type(cfg.trust).model_validate(trust), "env": args.env or cfg.env}
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise Usage(f"the policy or trust given is not valid: {problems}") from None
    except ConfigError as err:
        raise Usage(str(err)) from None


def placeholder(name: str) -> str:
    """A manifest variable's stand-in: ``1`` for a name compose reads as a number (a port, a
    count), else a word naming it."""
    if name.upper().endswith(_NUMBER_SUFFIXES):
        return "1"
    return f"placeholder-{name.lower()}"


def run(args: argparse.Namespace) -> Verdict:
    """The verdict on ``args.bundle`` (see the module): every stage that can run, each judging
    what the one before did not refuse outright."""
    from monky_deployd.core.admission import bundle as contract
    from monky_deployd.core.admission.bundle import REVISION_RE

    if not REVISION_RE.fullmatch(args.revision):
        raise Usage(
            f"--revision {args.revision!r} is not a revision: 1-64 of A-Z a-z 0-9 . _ - "
            "starting with a letter or digit"
        )
    cfg = config_for(args)
    raw = read_bundle(args.bundle)
    verdict = Verdict(revision=args.revision, project=str(raw.get("project", "")))
    size = len(json.dumps(raw, separators=(",", ":"), ensure_ascii=False).encode())
    if size > cfg.max_bundle_bytes:
        verdict.refuse("bundle", _too_large(size, cfg.max_bundle_bytes))
    elif size > cfg.max_bundle_bytes * 0.95:  # tenancy's envelope is not counted
        verdict.notes.append(
            f"the bundle is {size} bytes, within 5% of the {cfg.max_bundle_bytes} a box reads "
            "(max_bundle_bytes): tenancy's answer around it may take it over, and a box refuses "
            "that unread (TENANCY_RESPONSE_TOO_LARGE)"
        )
    _stage(verdict, "bundle", lambda: _signatures(cfg, args.revision, raw, verdict))
    try:
        bundle = contract.validate(args.revision, raw, binds=False)
    except DeployError as err:  # malformed: nothing more can be read
        verdict.refuse("bundle", err)
        return verdict
    _stage(verdict, "bundle", lambda: _binds(bundle))
    relative = [
        v
        for _, err in verdict.refusals
        for v in getattr(err, "violations", ())
        if err.code is Code.BUNDLE_RELATIVE_BIND
    ]
    _stage(verdict, "bundle", lambda: _registry(bundle))
    env_text = _stage(verdict, "render", lambda: _rendered(bundle))
    if env_text is None:  # a refused name, a variable with no value: the policy judges the rest
        env_text = _judgeable(bundle, verdict)
    if env_text is None:
        verdict.notes.append("policy: not judged (the .env could not be rendered)")
        return verdict
    _stage(verdict, "policy", lambda: _policy(cfg, bundle, env_text, verdict, relative))
    return verdict


def _judgeable(bundle: Bundle, verdict: Verdict) -> str | None:
    """The .env the policy can still judge after render refused the template: without the
    assignments refused by their name alone (ENV_COMPOSE_SETTING, ENV_NAME_RESERVED: the rest of
    the template is whole; a fault of that rest is recorded at render too), and with a stand-in
    (``placeholder``) for each variable that has no value (ENV_INCOMPLETE: once the manifest has
    its entry, the check gives it a stand-in all the same). None for any other render refusal
    (the template cannot be read)."""
    from monky_deployd.core.render import envfile

    said: list[str] = []
    err = verdict.refusals[-1][1]
    if err.code in (Code.ENV_COMPOSE_SETTING, Code.ENV_NAME_RESERVED):
        template, refused = _without_refused_names(bundle.env_template)
        bundle = dataclasses.replace(bundle, env_template=template)
        said.append(f"without the template's lines of {', '.join(refused)} (render refused them)")
        text = _stage(verdict, "render", lambda: _rendered(bundle))
        if text is not None:
            verdict.notes.append(f"policy: judged {' and '.join(said)}")
            return str(text)
        err = verdict.refusals[-1][1]  # the rest of the template's own refusal, recorded
    if err.code is not Code.ENV_INCOMPLETE:
        return None
    lacking = envfile.unresolved(bundle.env_template, _stand_ins(bundle))
    try:
        text = _rendered(bundle, {name: placeholder(name) for name in lacking})
    except DeployError:
        return None
    said.append(f"with a stand-in for {', '.join(lacking)} (no value: render refused them)")
    verdict.notes.append(f"policy: judged {' and '.join(said)}")
    return str(text)


def _without_refused_names(template: str) -> tuple[str, list[str]]:
    """``template`` without the assignments render refuses by their name alone, and those
    names, sorted."""
    from monky_deployd.core.render import envfile
    from monky_deployd.core.render.dotenv import parse

    refused = set(envfile.compose_settings(a.name for a in parse(template)))
    refused |= {a.name for a in parse(template)} & envfile.RESERVED_NAMES
    kept, pos = [], 0
    for a in parse(template):
        if a.name in refused:
            head = template.rfind("\n", 0, a.start) + 1
            tail = template.find("\n", a.end)
            kept.append(template[pos:head])
            pos = len(template) if tail < 0 else tail + 1
    kept.append(template[pos:])
    return "".join(kept), sorted(refused)


def _stage(verdict: Verdict, stage: str, step: Any) -> Any:
    """``step()``'s result; its refusal recorded at ``stage`` (None returned). The check's
    own faults (no docker CLI, compose hung) end the run."""
    try:
        return step()
    except DeployError as err:
        if err.code in (Code.COMMAND_NOT_FOUND, Code.COMMAND_TIMEOUT):
            raise
        verdict.refuse(stage, err)
        return None


def _too_large(size: int, cap: int) -> DeployError:
    return DeployError(
        f"the bundle is at least {size} bytes, more than the {cap} a box reads "
        "(max_bundle_bytes): a box refuses it unread",
        code=Code.TENANCY_RESPONSE_TOO_LARGE,
        hint="the bundle (a compose file and template of megabytes is a mistake), or the "
        "boxes' max_bundle_bytes",
    )


def _binds(bundle: Bundle) -> None:
    from monky_deployd.core.admission import bundle as contract
    from monky_deployd.core.admission import composefile

    doc = dict(_dict(composefile.load(bundle.compose)))
    env = composefile.literal_values(bundle.env_template, (e.name for e in bundle.manifest))
    contract.check_binds(bundle.revision, doc, env)


def _dict(value: object) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def _registry(bundle: Bundle) -> None:
    from monky_deployd.core.render import registry_cred

    registry_cred.select_entry([{"name": e.name, "use": e.use} for e in bundle.manifest])


def _policy(cfg: Any, bundle: Bundle, env_text: str, verdict: Verdict, relative: list[Any]) -> None:
    """The policy on compose's model; a bind the bundle stage named (``relative``: a relative
    or ``~`` path compose resolves from the revision directory) is not named again."""
    from monky_deployd.agent import policy as performed
    from monky_deployd.core.admission import policy

    project_dir = cfg.state_dir.absolute() / "revisions" / bundle.revision
    with tempfile.TemporaryDirectory(prefix="monky-bundle-check-") as docker_dir:
        release = (bundle.compose, env_text)
        found, model, warned = performed.judge(
            cfg, Path(docker_dir), bundle.project, project_dir, release, engine=False
        )
        verdict.notes.append(performed.OFFLINE)
        verdict.notes += [f"compose warns (admitted as it reads): {said}" for said in warned]
        found = [v for v in found if not _named_before(v, relative, str(project_dir))]
        if found:
            raise policy.refusal(bundle.revision, found)
        _model_budget(cfg, model)
        from monky_deployd.agent import reading  # compose reads the model back as judged
        from monky_deployd.core.admission import artifact
        from monky_deployd.core.render.mask import NO_SECRETS

        text = artifact.text(model)
        said = (bundle.revision, bundle.project, project_dir, model, text, NO_SECRETS)
        reading.of_text(cfg, Path(docker_dir), *said)


def _named_before(v: Any, relative: list[Any], project_dir: str) -> bool:
    """``v`` judges a bind the bundle stage named: one of its service's relative sources as
    compose resolves it (from the revision directory, ``..`` too), or a ``~`` one (there)."""
    import posixpath

    if v.key != "volumes":
        return False
    path = v.asks.split(" ", 1)[0]
    for r in relative:
        source = r.asks.split(" ", 1)[0]
        if r.service != v.service:
            continue
        if path == posixpath.normpath(posixpath.join(project_dir, source)) or (
            source.startswith("~") and path.startswith(project_dir)
        ):
            return True
    return False


def _model_budget(cfg: Any, model: dict[str, object]) -> None:
    """The judged model a box writes must be one it reads back before each ``up``."""
    from monky_deployd.core.admission import artifact

    size, cap = len(artifact.text(model).encode()), cfg.max_bundle_bytes * 8
    if size > cap:
        raise DeployError(
            f"the judged model of this release would be {size} bytes, more than the {cap} a "
            "box reads back before each up (max_bundle_bytes x 8)",
            code=Code.POLICY_UNJUDGED,
            hint="the bundle's compose file and .env (their size), or the boxes' max_bundle_bytes",
        )


def _signatures(cfg: Any, revision: str, raw: dict[str, Any], verdict: Verdict) -> None:
    """The tick's first check (``agent.apply.trust``) with ``--trust``'s settings, against no floor
    (the box's highest release applied is the box's)."""
    from monky_deployd.agent.apply import trust as performed
    from monky_deployd.core.signing import trust

    rule = cfg.trust
    if not rule.keys:
        verdict.notes.append("signatures not verified (no --trust)")
        return
    found, notes = performed.judged(cfg.env, rule, revision, raw, time.time(), None)
    verdict.notes += notes
    if isinstance(found, trust.Verified):
        verdict.notes.append(
            f"signed by {len(found.keyids)} trusted key(s) (threshold {rule.threshold}), "
            f"release {found.release.version} valid until {found.release.expires_text}"
        )


def _stand_ins(bundle: Bundle) -> dict[str, str]:
    """Each manifest variable's stand-in (``placeholder``), by name."""
    return {e.name: placeholder(e.name) for e in bundle.manifest if e.use is None}


def _rendered(bundle: Bundle, more: Mapping[str, str] | None = None) -> str:
    """The bundle's .env rendered from placeholders, as the tick's render phase checks it;
    ``more``: stand-ins for variables the manifest lacks (``_judgeable``)."""
    from monky_deployd.core.admission import prepare

    found = {e: placeholder(e.name) for e in bundle.manifest if e.use is None}
    env = prepare.env_values(bundle, prepare.SecretReads(found, {}))
    if more:
        env = dataclasses.replace(env, values={**env.values, **more})
    env_text = prepare.render_env(bundle.env_template, env)
    prepare.check_environment(bundle, env_text)
    return env_text
