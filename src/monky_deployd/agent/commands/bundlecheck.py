"""``monky-deployd bundle check BUNDLE``: a box's whole admission of a bundle, run offline by the
code a tick runs, before the bundle is published (the release pipeline's CI job).

    signatures (``--trust FILE``: its ``trust:``)   core.admission.trust.judge (agent.apply.trust's)
    bundle validation, relative and ~ binds, registry
                                                    core.admission.prepare.check_bundle
    .env rendered from placeholders                 core.admission.prepare.env_values, render_env
    the policy on compose's model                   agent.policy.judge (engine=False)
    compose's reading of the judged model's bytes   agent.reading.of_text (POLICY_TWO_READINGS)

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


@dataclass
class Verdict:
    """What ``bundle check`` found: ``error`` None when admitted."""

    revision: str
    project: str = ""
    stage: str = ""
    error: DeployError | None = None
    notes: list[str] = field(default_factory=list)

    def violations(self) -> list[dict[str, str]]:
        """One entry per violation: its code, service, key path, why, the allowance that would
        permit it, how to write the bundle instead, and its line (the tick's detail line)."""
        from monky_deployd.core.admission.rules import Refusal

        err = self.error
        if err is None:
            return []
        if isinstance(err, Refusal):
            return [
                {
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
        return [
            {
                "code": str(err.code),
                "service": "",
                "key": _where(line),
                "why": line,
                "allow_with": "",
                "rewrite": "",
                "line": line,
            }
            for line in lines
            if line.strip()
        ]

    def as_json(self) -> dict[str, Any]:
        err = self.error
        return {
            "verdict": "refused" if err else "admitted",
            "revision": self.revision,
            "project": self.project,
            "stage": self.stage if err else "",
            "code": str(err.code) if err else None,
            "message": err.message.splitlines()[0] if err else "",
            "hint": err.hint if err else "",
            "violations": self.violations(),
            "notes": self.notes,
        }

    def text(self) -> list[str]:
        err = self.error
        if err is None:
            out = [f"ADMITTED: revision {self.revision} of project {self.project} passes"]
        else:
            out = [f"REFUSED {err.code} ({self.stage}): {err.message.splitlines()[0]}"]
            out += [f"  {v['code']} {v['line']}" for v in self.violations()]
            if err.hint:
                out.append(f"hint: {err.hint}")
        out += [f"note: {n}" for n in self.notes]
        return out


def _where(line: str) -> str:
    """``at 'compose.services'`` -> its key path (a BUNDLE_INVALID problem's)."""
    if line.startswith("at '") and "'" in line[4:]:
        return line[4:].split("'", 1)[0]
    return ""


def main(args: argparse.Namespace) -> int:
    try:
        verdict = run(args)
    except Usage as exc:
        print(f"monky-deployd bundle check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except DeployError as err:  # the check itself could not run here (no docker CLI)
        print(str(err), file=sys.stderr)
        return EXIT_UNCHECKED
    if args.format == "json":
        print(json.dumps(verdict.as_json(), indent=2, ensure_ascii=False))
    else:
        print("\n".join(verdict.text()))
    return EXIT_REFUSED if verdict.error is not None else EXIT_OK


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
    """The Config whose policy judges: ``--policy``'s section over the defaults, else
    config.yaml's; ``--trust``'s section as its trust (no trust: signatures not verified)."""
    from pydantic import ValidationError

    from monky_deployd.config import Config, load

    try:
        if args.policy is not None:
            env = args.env or DEFAULT_ENV
            cfg = Config.model_validate(
                {"env": env, "policy": _yaml_section(args.policy, "policy")}
            )
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
    """The verdict on ``args.bundle`` (see the module)."""
    from monky_deployd.agent import policy as performed
    from monky_deployd.core.admission import prepare

    cfg = config_for(args)
    raw = read_bundle(args.bundle)
    verdict = Verdict(revision=args.revision, project=str(raw.get("project", "")))
    try:
        verdict.stage = "bundle"
        _signatures(cfg, args.revision, raw, verdict)
        bundle = prepare.check_bundle(args.revision, raw)
        verdict.stage = "render"
        env_text = _rendered(bundle)
        verdict.stage = "policy"
        project_dir = cfg.state_dir.absolute() / "revisions" / bundle.revision
        with tempfile.TemporaryDirectory(prefix="monky-bundle-check-") as docker_dir:
            release = (bundle.compose, env_text)
            found, model = performed.judge(
                cfg, Path(docker_dir), bundle.project, project_dir, release, engine=False
            )
            verdict.notes.append(performed.OFFLINE)
            if found:
                from monky_deployd.core.admission import policy

                raise policy.refusal(bundle.revision, found)
            from monky_deployd.agent import reading  # compose reads the model back as judged
            from monky_deployd.core.admission import artifact
            from monky_deployd.core.render.mask import NO_SECRETS

            text = artifact.text(model)
            said = (bundle.revision, bundle.project, project_dir, model, text, NO_SECRETS)
            reading.of_text(cfg, Path(docker_dir), *said)
    except DeployError as err:
        if err.code in (Code.COMMAND_NOT_FOUND, Code.COMMAND_TIMEOUT):
            raise
        verdict.error = err
    return verdict


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
