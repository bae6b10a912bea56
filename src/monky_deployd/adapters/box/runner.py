"""The one place the agent starts subprocesses.

``run`` takes an argument tuple (never a shell string), an explicit environment built from a
minimal base (``PATH`` plus what the caller adds, such as ``DOCKER_CONFIG``), a timeout, and the
tick's ``Masker`` (``core.render.mask``). The command is logged masked; on failure a
``CommandError`` carries the tail of the output as ``detail``: the whole output is masked first,
then cut (a multi-line secret is recognised only in the whole text). A child's life is tied to the
tick: it gets at most the tick's time left as its timeout (``adapters.deadline``), and the kernel
kills it when the agent dies (``PR_SET_PDEATHSIG``), so a SIGKILLed agent leaves no
``docker compose`` running (the compose plugin ends with the ``docker`` CLI that started it: the
CLI, from 24 on, closes the plugin's socket when it dies; measured with 28.2).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass

from monky_deployd.adapters import deadline
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import CommandError
from monky_deployd.core.render.mask import NO_SECRETS, Masker

log = logging.getLogger(__name__)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
STDERR_TAIL_LINES = 20


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    ms: int


def base_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A minimal child environment: PATH (the agent's, or a safe default) plus ``extra``."""
    env = {"PATH": os.environ.get("PATH") or DEFAULT_PATH, "LANG": "C.UTF-8"}
    if extra:
        env.update(extra)
    return env


def tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run(
    argv: tuple[str, ...],
    *,
    env: Mapping[str, str],
    timeout: float,
    cwd: str | None = None,
    masker: Masker = NO_SECRETS,
    check: bool = True,
    code: Code = Code.COMMAND_FAILED,
    pass_fds: tuple[int, ...] = (),
) -> Result:
    """Run ``argv`` and return its result; raise ``CommandError`` (with stderr tail) on failure.
    ``pass_fds``: descriptors the child inherits (a file it reads as ``/dev/fd/N``)."""
    shown = masker(" ".join(argv))
    try:  # a child gets at most the tick's time left
        limit = deadline.clamp(timeout)
    except deadline.Expired as exc:
        raise deadline.tick_error(f"before running {argv[0]}") from exc
    assert limit is not None
    log.debug("run", extra={"event": "command.start", "argv": shown})
    started = time.monotonic()
    try:
        proc = subprocess.run(
            argv,
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=limit,
            check=False,
            preexec_fn=functools.partial(_die_with_parent, os.getpid()),
            pass_fds=pass_fds,
        )
    except FileNotFoundError as exc:
        raise CommandError(
            f"cannot run {argv[0]}: not found on PATH",
            code=Code.COMMAND_NOT_FOUND,
            hint=f"that {argv[0]} is installed and on PATH={env.get('PATH', '')}",
        ) from exc
    except subprocess.TimeoutExpired as exc:
        if limit < timeout or deadline.tick_expired():  # the tick's time ran out, not its own
            raise deadline.tick_error(f"while {shown} ran (it was stopped)") from exc
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        raise CommandError(
            f"{shown} did not finish within {timeout:.0f} s",
            code=Code.COMMAND_TIMEOUT,
            hint="the Docker daemon's health and the registry's reachability",
            detail=tail(masker(err or "")),
        ) from exc
    ms = int((time.monotonic() - started) * 1000)
    result = Result(argv, proc.returncode, proc.stdout, proc.stderr, ms)
    log.debug(
        "ran",
        extra={"event": "command.end", "argv": shown, "rc": proc.returncode, "ms": ms},
    )
    if check and proc.returncode != 0:
        raise failure(result, code, masker)
    return result


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# resolved here, not in the forked child; None off Linux (nothing to tie the child with)
_PRCTL = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)


def _die_with_parent(parent: int) -> None:
    """In the child, between fork and exec: the kernel SIGKILLs it when the agent dies.

    PR_SET_PDEATHSIG fires when the *thread* that forked exits; ``run`` blocks that thread until
    the child has ended, so only the agent's death (SIGKILL, OOM) can trigger it. The setting
    survives exec. An agent that died before the prctl call has already re-parented the child:
    then it ends itself at once.
    """
    if _PRCTL is None:
        return
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)


def failure(result: Result, code: Code, masker: Masker = NO_SECRETS) -> CommandError:
    """The ``CommandError`` for a command that exited non-zero: its masked argv, exit status and
    last line, the tail of the masked output as ``detail`` (masked whole, then cut)."""
    shown = masker(" ".join(result.argv))
    detail = tail(masker(result.stderr or result.stdout))
    return CommandError(
        f"{shown} exited with status {result.returncode}: {last_line(detail)}",
        code=code,
        detail=detail,
    )


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "(no output)"
