"""Why an apply happens: typed reasons from facts. Pure: no I/O, no clock, no logging.

Every apply (and restore, and rollback) carries its reasons: in one log line, in the report
(``reasons``, contract v1.1: ``[{"kind", "detail"}]``), in ``applied.json`` (so ``status`` can
show them) and, for a dry run, in ``monky-deployd plan``'s diff.

    kind            detail (names and digests, never a value)
    REVISION        "r41 -> r42" (or "(none) -> r42" on a fresh box)
    COMPOSE         "compose file changed"
    ENV_KEYS        "added A, B; removed C; changed D"
    SECRET_ROTATED  "DB_PASSWORD, registry"     (manifest entries whose value changed)
    IMAGE_DIGEST    "web: sha256:1111... -> sha256:2222..."
    DRIFT           "web missing; db stopped"   (or a killed tick's step)
    RETRY           "attempt 2 after PULL_FAILED"
    ROLLBACK        "to r41"
    FORCED          "apply --once --retry"

Values are compared by a keyed hash per key (``keyed_hash``): HMAC-SHA256 under a random
32-byte key kept in the state dir (``hash.key``, 0600), so ``applied.json`` holds no value and
no hash a dictionary attack could test a guess against without that key (a short secret's plain
SHA-256 is brute-forced in seconds). The key sits beside ``.env`` itself, with the same mode:
whoever can read it can read the values anyway.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from monky_deployd.core.records.applied import ServiceLabel

REVISION = "REVISION"
COMPOSE = "COMPOSE"
ENV_KEYS = "ENV_KEYS"
SECRET_ROTATED = "SECRET_ROTATED"  # noqa: S105 - a kind, not a secret
IMAGE_DIGEST = "IMAGE_DIGEST"
DRIFT = "DRIFT"
RETRY = "RETRY"
ROLLBACK = "ROLLBACK"
FORCED = "FORCED"
KINDS = (
    REVISION,
    COMPOSE,
    ENV_KEYS,
    SECRET_ROTATED,
    IMAGE_DIGEST,
    DRIFT,
    RETRY,
    ROLLBACK,
    FORCED,
)

LABEL_REVISION = "monky-deployd.revision"
LABEL_DEPLOY_ID = "monky-deployd.deploy-id"


@dataclass(frozen=True)
class Reason:
    kind: str
    detail: str

    def as_wire(self) -> dict[str, str]:
        return {"kind": self.kind, "detail": self.detail}

    def __str__(self) -> str:
        return f"{self.kind.lower()} ({self.detail})" if self.detail else self.kind.lower()


def describe(reasons: Iterable[Reason]) -> str:
    """One line for the log: ``revision (r1 -> r2); env_keys (changed A)``."""
    return "; ".join(str(r) for r in reasons) or "none"


# -- hashes, never values ----------------------------------------------------------------------


def keyed_hash(key: bytes, name: str, value: str) -> str:
    """HMAC-SHA256(key, name NUL value), hex: equal values of one name compare equal on one box."""
    msg = name.encode("utf-8", "surrogatepass") + b"\0" + value.encode("utf-8", "surrogatepass")
    return hmac.digest(key, msg, "sha256").hex()


def keyed_hasher(key: bytes) -> Callable[[str, str], str]:
    """``keyed_hash`` under one key, for many names: HMAC's keyed inner and outer SHA-256 states
    (RFC 2104) are made once and copied per name, half the cost of ``hmac.digest`` each time (a
    4 MiB template has 350,000 keys; bench/README.md, issue 22). The same hashes."""
    block = hashlib.sha256().block_size
    k = hashlib.sha256(key).digest() if len(key) > block else key
    k = k.ljust(block, b"\0")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in k))
    outer = hashlib.sha256(bytes(b ^ 0x5C for b in k))

    def one(name: str, value: str) -> str:
        i = inner.copy()
        i.update(f"{name}\0{value}".encode("utf-8", "surrogatepass"))
        o = outer.copy()
        o.update(i.digest())
        return o.hexdigest()

    return one


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_ASSIGNMENT = re.compile(r"(?:export\s+)?([^=:\s#]+)\s*[=:]\s?(.*)$", re.DOTALL)


def env_assignments(text: str) -> dict[str, str]:
    """The ``.env``'s assignments, name -> the value as written (quotes included: a change of
    quoting is a change); a repeated name keeps its last value, as Compose does."""
    found: dict[str, str] = {}
    for line in text.split("\n"):  # Compose's lines: only a newline ends one
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _ASSIGNMENT.match(line)
        if m is not None:
            found[m.group(1)] = m.group(2)
    return found


def value_text(value: object) -> str:
    """A KV value as hashed: strings as they are, anything else as canonical JSON."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


@dataclass(frozen=True)
class Fingerprint:
    """What an apply rendered, by hash: the compose file, each ``.env`` key, each manifest
    entry's value. Holds no value (``applied.json`` keeps it)."""

    compose_sha256: str = ""
    env: Mapping[str, str] = field(default_factory=dict)  # .env key -> keyed hash
    secrets: Mapping[str, str] = field(default_factory=dict)  # manifest name -> keyed hash


def fingerprint(
    key: bytes, compose: str, env_text: str, secrets: Mapping[str, object]
) -> Fingerprint:
    hashed = keyed_hasher(key)
    return Fingerprint(
        sha256(compose),
        {k: hashed(k, v) for k, v in env_assignments(env_text).items()},
        {k: hashed(k, value_text(v)) for k, v in secrets.items()},
    )


# -- differences -------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyChanges:
    """Names only: added, removed, and present in both with another hash."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def describe(self) -> str:
        parts = [
            f"{what} {', '.join(names)}"
            for what, names in (
                ("added", self.added),
                ("removed", self.removed),
                ("changed", self.changed),
            )
            if names
        ]
        return "; ".join(parts)


def key_changes(old: Mapping[str, str], new: Mapping[str, str]) -> KeyChanges:
    """Exactly the symmetric difference of the names, plus the common names whose hash moved."""
    return KeyChanges(
        tuple(sorted(set(new) - set(old))),
        tuple(sorted(set(old) - set(new))),
        tuple(sorted(k for k in set(old) & set(new) if old[k] != new[k])),
    )


@dataclass(frozen=True)
class ImageChange:
    service: str
    before: str  # a digest (sha256:...) or "" when unknown
    after: str

    def describe(self) -> str:
        return f"{self.service}: {_short(self.before)} -> {_short(self.after)}"


def _short(digest: str) -> str:
    d = digest.rsplit("@", 1)[-1]
    return (d[:19] + "...") if len(d) > 19 else (d or "(none)")


def image_changes(old: Mapping[str, str], new: Mapping[str, str]) -> tuple[ImageChange, ...]:
    """Services whose known digest differs (a service new or gone, or with no digest on one
    side, is not an image change: the revision's compose change says it)."""
    return tuple(
        ImageChange(s, _digest(old[s]), _digest(new[s]))
        for s in sorted(set(old) & set(new))
        if old[s] and new[s] and _digest(old[s]) != _digest(new[s])
    )


def _digest(ref: str) -> str:
    return ref.rsplit("@", 1)[-1]


# -- the reasons -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReasonFacts:
    """What is known about an apply. ``before``: the applied (last-known-good) revision's
    fingerprint, None when nothing is applied or the record predates fingerprints."""

    revision: str
    previous_revision: str | None = None
    before: Fingerprint | None = None
    after: Fingerprint | None = None
    images_before: Mapping[str, str] = field(default_factory=dict)  # service -> digest
    images_after: Mapping[str, str] = field(default_factory=dict)
    missing: tuple[str, ...] = ()  # services with no container
    stopped: tuple[str, ...] = ()  # services whose container is not running
    interrupted: str | None = None  # "up of r42": a killed tick's step
    retry_attempt: int = 0  # > 0: attempt N after a failure's backoff
    retry_code: str = ""
    forced: bool = False  # the operator's --retry
    rollback_to: str | None = None


def explain(f: ReasonFacts) -> tuple[Reason, ...]:
    """The reasons of an apply, in a fixed order (most telling first)."""
    out: list[Reason] = []
    if f.rollback_to is not None:
        out.append(Reason(ROLLBACK, f"to {f.rollback_to}"))
    if f.previous_revision != f.revision:
        out.append(Reason(REVISION, f"{f.previous_revision or '(none)'} -> {f.revision}"))
    if f.forced:
        out.append(Reason(FORCED, "apply --once --retry"))
    elif f.retry_attempt > 0:
        after = f" after {f.retry_code}" if f.retry_code else ""
        out.append(Reason(RETRY, f"attempt {f.retry_attempt}{after}"))
    drift = [f"{s} missing" for s in f.missing] + [f"{s} stopped" for s in f.stopped]
    if f.interrupted:
        drift.append(f"a tick was killed during {f.interrupted}")
    if drift:
        out.append(Reason(DRIFT, "; ".join(drift)))
    if f.before is not None and f.after is not None:
        b, a = f.before, f.after
        if b.compose_sha256 and a.compose_sha256 and b.compose_sha256 != a.compose_sha256:
            out.append(Reason(COMPOSE, "compose file changed"))
        env = key_changes(b.env, a.env)
        if env:
            out.append(Reason(ENV_KEYS, env.describe()))
        rotated = key_changes(b.secrets, a.secrets).changed
        if rotated:
            out.append(Reason(SECRET_ROTATED, ", ".join(rotated)))
    images = image_changes(f.images_before, f.images_after)
    if images:
        out.append(Reason(IMAGE_DIGEST, "; ".join(c.describe() for c in images)))
    return tuple(out)


def image_reason(old: Mapping[str, str], new: Mapping[str, str]) -> tuple[Reason, ...]:
    """An IMAGE_DIGEST reason when a service's image digest moved (service -> digest maps)."""
    found = image_changes(old, new)
    if not found:
        return ()
    return (Reason(IMAGE_DIGEST, "; ".join(c.describe() for c in found)),)


def from_wire(rows: Iterable[Mapping[str, str]]) -> tuple[Reason, ...]:
    return tuple(Reason(str(r.get("kind", "")), str(r.get("detail", ""))) for r in rows)


# -- container labels --------------------------------------------------------------------------


def labels_override(
    revision: str,
    deploy_id: str,
    services: Iterable[str],
    kept: Mapping[str, ServiceLabel] | None = None,
) -> str:
    """A compose override giving every service the revision and deploy-id labels, so
    ``docker ps --filter label=monky-deployd.revision=r42`` answers which revision runs. A
    service in ``kept`` carries the revision and deploy that last changed it instead."""
    lines = ["# written by monky-deployd: which revision and deploy made each container", ""]
    lines.append("services:")
    for name in sorted(set(services)):
        own = (kept or {}).get(name)
        rev, dep = (own.revision, own.deploy_id) if own is not None else (revision, deploy_id)
        lines += [
            f"  {json.dumps(name)}:",
            "    labels:",
            f"      {json.dumps(LABEL_REVISION)}: {json.dumps(rev)}",
            f"      {json.dumps(LABEL_DEPLOY_ID)}: {json.dumps(dep)}",
        ]
    return "\n".join(lines) + "\n"


# What ``service_digests`` gives starts with this; compose's own hashes (``config --hash``, what
# an agent before it kept in applied.json) are bare hex.
DIGEST_PREFIX = "hmac-sha256:"
# What compose leaves out of its own config hash (``ServiceHash``): no reason to recreate.
_NOT_HASHED = ("build", "pull_policy", "scale", "depends_on", "profiles")


def service_digests(key: bytes, config: Mapping[str, object], env_text: str) -> dict[str, str]:
    """Each service's config digest from compose's effective configuration of the release
    (``docker compose config --format json --no-env-resolution``, the local policy's reading,
    without the labels override): keyed (HMAC-SHA256, ``key``: the values are secrets) over
    the service's definition less what compose's own hash leaves out, plus the rendered
    ``.env`` for a service that reads it as ``env_file`` (compose reads it in at ``up``; the
    only env_file the policy lets through). It moves when compose's ``config --hash`` moves,
    and for an env_file service on any change of ``.env``."""
    services = config.get("services")
    out: dict[str, str] = {}
    for name, body in sorted(services.items()) if isinstance(services, dict) else ():
        if not isinstance(body, dict):
            continue
        kept = {k: v for k, v in body.items() if k not in _NOT_HASHED and k != "env_file"}
        if isinstance(deploy := kept.get("deploy"), dict):
            kept["deploy"] = {k: v for k, v in deploy.items() if k != "replicas"}
        if body.get("env_file"):
            kept["env_file"] = env_text
        text = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str)
        out[str(name)] = DIGEST_PREFIX + hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
    return out


def digested(before: Mapping[str, ServiceLabel]) -> bool:
    """Whether ``before``'s config hashes are ``service_digests``' (comparable with them), not
    compose's own that an older agent recorded."""
    return all(lb.config_hash.startswith(DIGEST_PREFIX) for lb in before.values())


def service_labels(
    hashes: Mapping[str, str],
    before: Mapping[str, ServiceLabel],
    revision: str,
    deploy_id: str,
    moved: Collection[str] = (),
    record: Mapping[str, str] | None = None,
) -> dict[str, ServiceLabel]:
    """Each service's labels for this apply: a service whose config hash (without the labels)
    is the one ``before`` recorded and whose image did not move (``moved``) keeps the revision
    and deploy that last changed it (its container is not recreated for a label); a new or
    changed service gets this apply's. ``record``: the hash each label keeps from now on when
    it is not the one compared (an older agent's record, compared by compose's own hash, gets
    ``service_digests``')."""
    out: dict[str, ServiceLabel] = {}
    for name, digest in hashes.items():
        old = before.get(name)
        keep = (record or {}).get(name, digest)
        if old is not None and old.config_hash == digest and old.revision and name not in moved:
            out[name] = ServiceLabel(keep, old.revision, old.deploy_id)
        else:
            out[name] = ServiceLabel(keep, revision, deploy_id)
    return out
