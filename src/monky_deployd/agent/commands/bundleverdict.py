"""``bundle check``'s verdict (``bundlecheck`` reaches it): each refusing stage's fault in
stage order, as text lines (each violation saying its stage) or as the JSON object a pipeline
step reads on stdout for every exit (``verdict``: admitted, refused, usage, unchecked; ``exit``);
``emit`` writes it and ends quietly when the reader has gone (``| head``).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

from monky_deployd.core.errors import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, Code
from monky_deployd.core.faults import DeployError

EXIT_UNCHECKED = 1  # the check could not run here (the docker CLI is missing, compose hung)
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
