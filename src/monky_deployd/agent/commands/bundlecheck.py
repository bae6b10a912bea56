"""``monky-deployd bundle check BUNDLE``: a box's whole admission of a bundle, run offline by the
code a tick runs, before the bundle is published (the release pipeline's CI job).

    signatures (``--trust FILE``: its ``trust:``)   core.admission.trust.judge (agent.apply.trust's)
    bundle validation, relative and ~ binds, registry
                                                    core.admission.prepare.check_bundle
    .env rendered from placeholders                 core.admission.prepare.env_values, render_env
    the policy on compose's model                   agent.policy.judge (engine=False)

No secret is read: each manifest entry's value is a placeholder of its kind (``placeholder``),
so interpolation still resolves. The box's own facts (the engine's data root and its
containers' mounts, its disk, its projects) are not judged, host paths' links are followed on
this machine: the
output says so in one line (``agent.policy.OFFLINE``). Exit 0 admitted, 5 refused, 2 usage;
1 when the check itself cannot run here (no docker CLI: COMMAND_NOT_FOUND).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from monky_deployd.agent.commands.bundlefile import Usage, read_bundle
from monky_deployd.core.errors import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, Code
from monky_deployd.core.faults import ConfigError, DeployError

if TYPE_CHECKING:
    from monky_deployd.core.admission.bundle import Bundle

EXIT_UNCHECKED = 1  # the check could not run here (the docker CLI is missing, compose hung)
DEFAULT_ENV = "bundle-check"
# variable names whose value compose reads as a number (a port, a count): "1" stands for them
_NUMBER_SUFFIXES = ("PORT", "_COUNT", "_REPLICAS", "_SIZE", "_TIMEOUT", "_UID", "_GID")


STAGES = ("bundle", "render", "policy")  # a tick's phases, in the order it judges them


@dataclass
class Verdict:
    """What ``bundle check`` found: each refusing stage's fault, in stage order (none:
    admitted); ``outcome``: "usage" or "unchecked" when no verdict was reached."""

    revision: str
    project: str = ""
    refusals: list[tuple[str, DeployError]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    outcome: str = ""
    message: str = ""

    @property
    def error(self) -> DeployError | None:
        """The first refusal: what a box's tick stops at."""
        return self.refusals[0][1] if self.refusals else None

    @property
    def stage(self) -> str:
        return self.refusals[0][0] if self.refusals else ""

    def refuse(self, stage: str, err: DeployError) -> None:
        self.refusals.append((stage, err))

    def violations(self) -> list[dict[str, str]]:
        """One entry per violation of every refusing stage: its stage, code, service, key path,
        why, the allowance that would permit it, how to write the bundle instead, and its line
        (the tick's detail line)."""
        return [v for stage, err in self.refusals for v in _entries(stage, err)]

    def exit_status(self) -> int:
        if self.outcome == "usage":
            return EXIT_USAGE
        if self.outcome == "unchecked":
            return EXIT_UNCHECKED
        return EXIT_REFUSED if self.refusals else EXIT_OK

    def as_json(self) -> dict[str, Any]:
        err = self.error
        verdict = self.outcome or ("refused" if err else "admitted")
        return {
            "verdict": verdict,
            "exit": self.exit_status(),
            "revision": self.revision,
            "project": self.project,
            "stage": self.stage,
            "stages": [stage for stage, _ in self.refusals],
            "code": str(err.code) if err else None,
            "message": err.message.splitlines()[0] if err else self.message,
            "hint": err.hint if err else "",
            "violations": self.violations(),
            "notes": self.notes,
        }

    def text(self) -> list[str]:
        if self.outcome:
            return [f"monky-deployd bundle check: {self.message}"]
        if not self.refusals:
            out = [f"ADMITTED: revision {self.revision} of project {self.project} passes"]
        else:
            out = []
            for stage, err in self.refusals:
                out.append(f"REFUSED {err.code} ({stage}): {err.message.splitlines()[0]}")
                out += [f"  {v['code']} ({stage}) {v['line']}" for v in _entries(stage, err)]
                if err.hint:
                    out.append(f"hint ({stage}): {err.hint}")
        out += [f"note: {n}" for n in self.notes]
        return out


def _entries(stage: str, err: DeployError) -> list[dict[str, str]]:
    from monky_deployd.core.admission.rules import Refusal

    if isinstance(err, Refusal):
        return [
            {
                "stage": stage,
                "code": str(v.code),
                "service": v.service,
                "key": v.key,
                "why": v.asks,
                "allow_with": v.allow_with,
                "rewrite": v.rewrite,
                "line": v.line(),
            }
            for v in err.violations
        ]
    lines = err.detail.splitlines() or err.message.splitlines()[1:] or [err.message]
    if err.code is Code.POLICY_UNJUDGED:  # compose's own error: one fault, whole
        lines = [" ".join(ln.strip() for ln in lines)]
    where = "env_template" if stage == "render" else ""
    return [
        {
            "stage": stage,
            "code": str(err.code),
            "service": "",
            "key": _where(line) or where,
            "why": line,
            "allow_with": "",
            "rewrite": err.hint if stage == "render" else "",
            "line": line,
        }
        for line in lines
        if line.strip()
    ]


def _where(line: str) -> str:
    """``at 'compose.services'`` -> its key path (a BUNDLE_INVALID problem's)."""
    if line.startswith("at '") and "'" in line[4:]:
        return line[4:].split("'", 1)[0]
    return ""


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


def emit(text: str) -> None:
    """``text`` and a newline on stdout; a reader that has gone (``| head``) ends the output
    quietly (the exit status stays the verdict's)."""
    import os

    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)  # no second error when Python exits
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def usage_json(revision: str, message: str) -> str:
    """The JSON verdict of a command line the parser refused (``cliargs``)."""
    found = Verdict(revision, outcome="usage", message=message).as_json()
    return json.dumps(found, indent=2, ensure_ascii=False)


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
    if env_text is None:  # a refused name: the policy judges the rest of the template
        env_text = _without_refused_names(bundle, verdict)
    if env_text is None:
        verdict.notes.append("policy: not judged (the .env could not be rendered)")
        return verdict
    _stage(verdict, "policy", lambda: _policy(cfg, bundle, env_text, verdict, relative))
    return verdict


def _without_refused_names(bundle: Bundle, verdict: Verdict) -> str | None:
    """The .env rendered without the assignments render refused by their name alone
    (ENV_COMPOSE_SETTING, ENV_NAME_RESERVED: the rest of the template is whole), so the policy
    still judges the release in this run; None for any other render refusal."""
    import dataclasses

    from monky_deployd.core.render import envfile
    from monky_deployd.core.render.dotenv import parse

    err = verdict.refusals[-1][1]
    if err.code not in (Code.ENV_COMPOSE_SETTING, Code.ENV_NAME_RESERVED):
        return None
    template = bundle.env_template
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
    try:
        text = _rendered(dataclasses.replace(bundle, env_template="".join(kept)))
    except DeployError:
        return None
    verdict.notes.append(
        f"policy: judged without the template's lines of {', '.join(sorted(refused))} "
        "(render refused them)"
    )
    return text


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
        found, model = performed.judge(
            cfg, Path(docker_dir), bundle.project, project_dir, release, engine=False
        )
    verdict.notes.append(performed.OFFLINE)
    found = [v for v in found if not _named_before(v, relative, str(project_dir))]
    if found:
        raise policy.refusal(bundle.revision, found)
    _model_budget(cfg, model)


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
    from monky_deployd.core.admission import trust

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


def _rendered(bundle: Bundle) -> str:
    """The bundle's .env rendered from placeholders, as the tick's render phase checks it."""
    from monky_deployd.core.admission import prepare

    found = {e: placeholder(e.name) for e in bundle.manifest if e.use is None}
    env = prepare.env_values(bundle, prepare.SecretReads(found, {}))
    env_text = prepare.render_env(bundle.env_template, env)
    prepare.check_environment(bundle, env_text)
    return env_text
