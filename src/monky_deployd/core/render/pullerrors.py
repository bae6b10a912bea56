"""Classify ``docker compose pull`` failures by the registry's (or daemon's) own words.

``classify(output)`` returns ``(code, line)``: a stable code and the verbatim line that carries
the fault ("no basic auth credentials", "manifest unknown", "no such host", "no space left on
device" ...), with compose's progress noise stripped. ``pull_error`` turns that into the
``CommandError`` the tick raises, so the log's first error line and the report's ``detail`` carry
the registry's words, never ``rc=1`` alone. ``pull_error`` masks the whole output with the tick's
``Masker`` before anything else reads it (a line cut from a multi-line secret is masked too).
"""

from __future__ import annotations

import re

from monky_deployd.core.errors import Code
from monky_deployd.core.faults import CommandError
from monky_deployd.core.render.mask import NO_SECRETS, Masker

# Checked in this order: the first code with a matching line wins (a full disk can surface as a
# failed layer download, so it is checked before the network and auth patterns).
PATTERNS: tuple[tuple[Code, tuple[str, ...]], ...] = (
    (Code.DISK_FULL, ("no space left on device", "disk quota exceeded")),
    # The docker CLI could not reach its own daemon: not the registry's fault.
    (Code.DOCKER_UNAVAILABLE, ("cannot connect to the docker daemon", "docker.sock")),
    (
        Code.REGISTRY_UNREACHABLE,
        (
            "no such host",
            "temporary failure in name resolution",
            "server misbehaving",
            "i/o timeout",
            "connection refused",
            "no route to host",
            "network is unreachable",
            "tls handshake timeout",
            "client.timeout exceeded",
        ),
    ),
    (
        Code.REGISTRY_AUTH,
        (
            "no basic auth credentials",
            "unauthorized",
            "pull access denied",
            "denied: ",
            "authentication required",
        ),
    ),
    (Code.IMAGE_NOT_FOUND, ("manifest unknown", "name unknown", "not found")),
)

MEANING = {
    Code.DISK_FULL: (
        "the pull ran out of disk space",
        "free space on Docker's data-root and containerd's root (`docker info`, "
        "/etc/containerd/config.toml `root =`), and the bundle's disk_need_bytes",
    ),
    Code.DOCKER_UNAVAILABLE: (
        "the docker CLI could not reach the Docker daemon",
        "that dockerd runs (`docker info`), DOCKER_HOST in config.yaml, and the agent's access "
        "to the docker socket (group docker)",
    ),
    Code.REGISTRY_UNREACHABLE: (
        "the registry could not be reached",
        "DNS for the registry host, the network path from this box, and the registry's health",
    ),
    Code.REGISTRY_AUTH: (
        "the registry refused the agent's credential",
        "the registry-auth entry in OpenBao (robot name, password, expiry), that the robot may "
        "pull this project, and the bundle's registry_host matches the images' registry",
    ),
    Code.IMAGE_NOT_FOUND: (
        "the registry has no such image or tag",
        "the image references in the bundle's compose file and that the tag was pushed",
    ),
    Code.PULL_FAILED: (
        "docker compose pull failed",
        "the line quoted here and the Docker daemon's log",
    ),
}

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
# Compose/CLI progress lines, e.g. " web Pulling", " 3f4ca61aafcd Downloading [==>  ] 1MB/3MB",
# "[+] Pulling 1/1", " ✔ web Pulled", " Image 127.0.0.1:5000/team/app:v1 Pulling" (compose 5.x).
_PROGRESS_RE = re.compile(
    r"^(?:\[\+\].*|[✔✓⠿⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏\s]*(?:Image\s+)?\S+\s+"
    r"(?:Pulling(?: fs layer)?|Pulled|Waiting|Downloading|Download complete"
    r"|Verifying Checksum|Extracting|Pull complete|Already exists|Skipped(?: - .*)?"
    r"|Interrupted|Image is up to date|Digest:.*|Status:.*)\b.*)$"
)
_MARKER_RE = re.compile(r"^[\s✘✗×!⠿]+")


def clean_lines(output: str) -> list[str]:
    """Non-empty, de-duplicated output lines without ANSI codes and progress noise."""
    seen: set[str] = set()
    lines: list[str] = []
    for raw in _ANSI_RE.sub("", output).replace("\r", "\n").splitlines():
        line = raw.strip()
        if not line or _PROGRESS_RE.match(line):
            continue
        line = _MARKER_RE.sub("", line).strip()
        if line and line not in seen:
            seen.add(line)
            lines.append(line)
    return lines


def classify(output: str) -> tuple[Code, str]:
    """``(code, verbatim line)`` for a failed pull's combined output."""
    lines = clean_lines(output)
    lowered = [line.lower() for line in lines]
    for code, needles in PATTERNS:
        for line, low in zip(lines, lowered, strict=True):
            if any(needle in low for needle in needles):
                return code, line
    return Code.PULL_FAILED, lines[-1] if lines else "(no output)"


def pull_error(
    output: str,
    *,
    masker: Masker = NO_SECRETS,
    returncode: int | None = None,
    registry_host: str | None = None,
) -> CommandError:
    """The ``CommandError`` for a failed pull: code, the registry's words first, output tail;
    ``output`` is masked whole before it is classified or cut."""
    output = masker(output)
    code, line = classify(output)
    meaning, hint = MEANING[code]
    if code is Code.REGISTRY_AUTH and "no basic auth credentials" in line.lower():
        meaning = "the registry requires a login and the agent has none for this registry"
        hint = (
            "that the bundle has a registry-auth manifest entry and that its registry_host is "
            "the registry in the image reference"
        )
    where = f" ({registry_host})" if registry_host and code is not Code.DISK_FULL else ""
    status = f" [exit status {returncode}]" if returncode is not None else ""
    return CommandError(
        f"docker compose pull failed: {meaning}{where}: {line}{status}",
        code=code,
        hint=hint,
        detail="\n".join(clean_lines(output)[-20:]),
    )
