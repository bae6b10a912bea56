"""A check that waits says so: ``doctor`` prints its lines only when every check is done, so a
check waiting on a service (a stalled tenancy: its whole ``timeout_s``) would show nothing. Each
check runs inside ``waiting(line)``: when it is still running after ``AFTER_S`` and stderr is a
terminal, ``line`` (what it waits for) goes to stderr once. Never on a pipe or the journal."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

AFTER_S = 1.0

# doctor's checks that wait on something outside the process -> what they wait for
WAITS = {
    "identity": "the Ziti SDK to load the identity",
    "controller": "the Ziti controller",
    "tenancy-intercept": "the Ziti intercept of tenancy",
    "openbao-intercept": "the Ziti intercept of OpenBao",
    "tenancy": "tenancy to answer (up to tenancy.timeout_s)",
    "openbao": "OpenBao to answer (up to openbao.timeout_s)",
    "token": "OpenBao: the token's lookup or a login with the grant",
    "checkin": "tenancy's answer to a check-in",
    "secrets": "OpenBao's answers for the bundle's secrets",
    "registry": "the registry's answer",
    "docker-socket": "the Docker engine's answer",
    "disk": "the Docker engine and its filesystems",
    "compose": "`docker compose version`",
    "timer": "systemctl",
    "clock": "tenancy's Date",
}


@contextmanager
def waiting(line: str, stream: IO[str] | None = None, after_s: float = AFTER_S) -> Iterator[None]:
    out = sys.stderr if stream is None else stream
    if not out.isatty():
        yield
        return

    def say() -> None:
        print(line, file=out, flush=True)

    timer = threading.Timer(after_s, say)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def doctor_line(check: str) -> str:
    return f"doctor: {check}: waiting for {WAITS.get(check, 'its answer')} ..."
