"""What ran: ``revisions/<rev>/release.json`` (``Release``: a verified revision's images) and
``projects.json`` (``Projects``: the compose projects the agent started). A steady tick reads
neither (off its imports, issue 29); what ``core.records.applied``'s docstring says of the
records (exact bytes, reasons without values) holds here. Each validator is built on first use
(``defer_build``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, field

from pydantic import ConfigDict, ValidationError
from pydantic.dataclasses import dataclass

from monky_deployd.core.records.applied import _no_services, parse_record

_LAZY = ConfigDict(defer_build=True)


# -- revisions/<rev>/release.json --------------------------------------------------------------


@dataclass(frozen=True, config=_LAZY)
class ReleaseImage:
    """The image a service's container actually ran when its revision was verified."""

    id: str  # sha256:... (what the rollback pins: it needs no registry)
    ref: str = ""  # the compose file's image reference (a tag)
    digest: str = ""  # a RepoDigest (repo@sha256:...) when the engine knows one
    # this project's apply pulled or built it (the engine did not have it before, or had it as
    # this project's own): the only images the GC removes (issue 45). A record without it (an
    # agent before issue 45, or a tick that could not ask the engine first) is never removed
    own: bool = False


def _no_images() -> dict[str, ReleaseImage]:
    return {}


@dataclass(frozen=True, config=_LAZY)
class Release:
    """A verified revision kept on disk next to its compose.yaml and .env."""

    revision: str
    project: str
    services: list[str] = field(default_factory=_no_services)
    images: dict[str, ReleaseImage] = field(default_factory=_no_images)
    compose_sha256: str = ""  # what it was rendered from: the bundle's compose file
    env_sha256: str = ""  # and the rendered .env (a hash: never the values)
    verified_at: str = ""

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()

    @staticmethod
    def from_json(raw: bytes) -> Release:
        data = parse_record(raw)
        if isinstance(data, dict):
            try:
                return Release(**data)
            except (ValidationError, TypeError):
                pass
        raise ValueError("not a release record")

    def pins(self) -> str:
        """A compose override that pins every recorded service to its image ID (no pull)."""
        lines = ["# written by monky-deployd: the images this revision ran when verified", ""]
        lines.append("services:")
        for name, image in sorted(self.images.items()):
            lines += [f"  {json.dumps(name)}:", f"    image: {json.dumps(image.id)}"]
        return "\n".join(lines) + "\n"


# -- projects.json -----------------------------------------------------------------------------

PROJECTS_KEPT = 64  # the most recent names: a rename is rare, the file stays small


def _no_names() -> list[str]:
    return []


@dataclass(frozen=True, config=_LAZY)
class Projects:
    """The compose projects the agent started (written before its first ``up`` of a project).
    A project with volumes or networks but no container is the agent's only when named here
    (compose labels volumes and networks with the project, not with a working directory)."""

    names: list[str] = field(default_factory=_no_names)

    def with_name(self, name: str) -> Projects:
        """These names and ``name``, the newest last, at most ``PROJECTS_KEPT``."""
        names = [n for n in self.names if n != name] + [name]
        return Projects(names[-PROJECTS_KEPT:])

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), indent=2, sort_keys=True).encode()

    @staticmethod
    def from_json(raw: bytes) -> Projects:
        data = parse_record(raw)
        if isinstance(data, dict):
            try:
                return Projects(**data)
            except (ValidationError, TypeError):
                pass
        raise ValueError("not a projects record")
