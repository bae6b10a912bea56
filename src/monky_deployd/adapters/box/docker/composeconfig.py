"""The effective configuration of a release, as compose itself resolves it: ``docker compose
config --format json`` (interpolation, ``extends``, short and long syntax, every profile).

The release is handed to compose as two memory files (``memfd``: nothing is
written to disk, so a refused release leaves nothing behind, and ``plan`` writes nothing),
``--project-directory`` the directory it will run from (relative paths resolve as ``up`` will
resolve them). ``--no-env-resolution``: an ``env_file`` is named, not read. The output holds
the release's secret values (interpolated): it is parsed, never logged.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from monky_deployd.adapters.box import runner
from monky_deployd.adapters.box.docker.compose import READ_BACK, docker_env
from monky_deployd.config import DockerCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.records.ledger import cut
from monky_deployd.core.render.mask import NO_SECRETS, Masker


@contextlib.contextmanager
def _memfiles(*texts: str) -> Iterator[tuple[int, ...]]:
    fds: list[int] = []
    try:
        for i, text in enumerate(texts):
            fd = os.memfd_create(f"release-{i}")  # close-on-exec, but for the child (pass_fds)
            fds.append(fd)
            os.write(fd, text.encode())
        yield tuple(fds)
    finally:
        for fd in fds:
            os.close(fd)


# what each file handed to compose is, as its words name it (not /dev/fd/N)
_NAMES = ("the bundle's compose file", "the rendered .env", "the agent's override")
_WARNING_LINE = re.compile(r'^(?:(?:time="[^"\n]*" )?level=warning\b|WARN\[).*', re.MULTILINE)


_MESSAGE = re.compile(r'\bmsg="((?:[^"\\]|\\.)*)"')
_WARN_HEAD = re.compile(r"^WARN\[\d*\]\s*")


WARNINGS_SHOWN, WARNING_CHARS = 20, 400  # a bundle of a thousand `$x` floods no journal


def _warnings(output: str, names: dict[str, str], masker: Masker) -> tuple[str, ...]:
    """Compose's warnings in ``output`` (its stderr: an unset variable it read as blank, an
    obsolete key), each its message alone, masked, each memory file named as what it holds, cut
    to one line of ``WARNING_CHARS``; the first ``WARNINGS_SHOWN`` and how many more."""
    found: list[str] = []
    more = 0
    for warning in _WARNING_LINE.finditer(output):  # one at a time: a flood is counted, not kept
        if len(found) == WARNINGS_SHOWN:
            more += 1
            continue
        line = " ".join(warning.group().splitlines())
        said = _MESSAGE.search(line)
        # masked as compose quoted it (Go's escapes: a masker knows that form), then unquoted
        text = masker(said.group(1)).replace('\\"', '"') if said else _WARN_HEAD.sub("", line)
        for fd, name in names.items():
            text = text.replace(fd, name)
        found.append(cut(masker(text.strip()), WARNING_CHARS))
    return tuple(found) + ((f"and {more} more warnings",) if more else ())


def _said(output: str, names: dict[str, str]) -> list[str]:
    """Compose's own error, whole (its warnings left out: they refuse nothing), each memory
    file named as what it holds."""
    lines = [ln for ln in output.splitlines() if ln.strip() and not _WARNING_LINE.match(ln)]
    for fd, name in names.items():
        lines = [ln.replace(fd, name) for ln in lines]
    return lines


def effective(
    cfg: DockerCfg,
    docker_dir: Path,
    project: str,
    project_dir: Path,
    release: tuple[str, str],
    masker: Masker = NO_SECRETS,
    override: str = "",
) -> tuple[dict[str, object], tuple[str, ...]]:
    """The effective configuration of ``release`` (its compose file and rendered .env, handed
    over in memory) run from ``project_dir``, and compose's warnings on it (``_warnings``: they
    refuse nothing); ``override``: a compose file of the agent's own read after it
    (``core.admission.artifact.reads``). POLICY_UNJUDGED when compose cannot read it (the
    bundle's compose file is at fault: ``up`` would refuse it too)."""
    with _memfiles(*release, *((override,) if override else ())) as fds:
        files: tuple[str, ...] = ("--file", f"/dev/fd/{fds[0]}", "--env-file", f"/dev/fd/{fds[1]}")
        files += tuple(x for fd in fds[2:] for x in ("--file", f"/dev/fd/{fd}"))
        argv = _reading(cfg, project, project_dir, files)
        result = runner.run(
            argv,
            env=docker_env(cfg, docker_dir),
            timeout=cfg.command_timeout_s,
            masker=masker,
            check=False,
            pass_fds=fds,
        )
        names = {f"/dev/fd/{fd}": name for fd, name in zip(fds, _NAMES, strict=False)}
    if result.returncode != 0:
        err = runner.failure(result, Code.POLICY_UNJUDGED, masker)
        said = _said(err.detail, names)
        raise DeployError(
            f"compose cannot resolve the release of project {project}, so this box's policy "
            f"cannot judge it: {' '.join(said) or '(no output)'}",
            code=Code.POLICY_UNJUDGED,
            hint="the bundle's compose file (`docker compose config` of it names the fault)",
            detail="\n".join(said),
        )
    try:
        found = json.loads(result.stdout)
    except ValueError:
        found = None
    if not isinstance(found, dict):
        raise DeployError(
            f"`docker compose config --format json` of project {project} did not print a "
            "JSON object, so this box's policy cannot judge the release",
            code=Code.POLICY_UNJUDGED,
            hint=f"the compose plugin ({cfg.binary} compose version)",
        )
    return found, _warnings(result.stderr, names, masker)


def _reading(
    cfg: DockerCfg, project: str, project_dir: Path, files: tuple[str, ...]
) -> tuple[str, ...]:
    """The argv of compose's reading of ``files`` as project ``project`` from ``project_dir``
    (``compose.READ_BACK``: every profile, env_file named and not read): the judge's reading of
    a release and the read-back of its judged model alike."""
    head = (
        cfg.binary,
        "compose",
        "--project-name",
        project,
        "--project-directory",
        str(project_dir),
    )
    return (*head, *files, *READ_BACK)


def read_back(
    cfg: DockerCfg,
    docker_dir: Path,
    project: str,
    project_dir: Path,
    text: str,
    masker: Masker,
    values: Mapping[str, str] | None = None,
) -> dict[str, object]:
    """Compose's reading of the judged model's bytes ``text`` (``core.admission.artifact.text``)
    before they are written, as ``up`` will read them (``--env-file /dev/null``, from
    ``project_dir``, the same environment: ``values`` are the variables ``up`` adds,
    ``core.admission.artifact.child_environment``; ``compose.READ_BACK``). POLICY_TWO_READINGS
    when compose cannot read them back."""
    with _memfiles(text) as fds:
        argv = _reading(
            cfg, project, project_dir, ("--file", f"/dev/fd/{fds[0]}", "--env-file", os.devnull)
        )
        result = runner.run(
            argv,
            env={**docker_env(cfg, docker_dir), **(values or {})},
            timeout=cfg.command_timeout_s,
            masker=masker,
            check=False,
            pass_fds=fds,
        )
    return reading(result, project, masker)


READ = Code.POLICY_TWO_READINGS


def reading(result: runner.Result, project: str, masker: Masker) -> dict[str, object]:
    """The model compose printed (``read_back``, ``Compose.reading``); POLICY_TWO_READINGS
    when it could not read the judged model back."""
    found = None
    if result.returncode == 0:
        try:
            found = json.loads(result.stdout)
        except ValueError:
            found = None
    if isinstance(found, dict):
        return found
    detail = "" if result.returncode == 0 else runner.failure(result, READ, masker).detail
    said = runner.last_line(detail) if detail else "it printed no JSON object"
    raise DeployError(
        f"compose cannot read back the judged model of project {project}, so what `up` would "
        f"run is not known to be what was judged: {said}",
        code=READ,
        hint="the compose plugin (`docker compose version`) and the bundle's strings: a "
        "character compose's reader refuses",
        detail=detail,
    )
