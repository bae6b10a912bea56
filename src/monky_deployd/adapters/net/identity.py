"""Ziti identity pre-check: read and parse the identity file before the SDK sees it.

``openziti.load()`` accepts an unreadable or malformed identity, logs "Configuration is invalid"
and fails later as a bare ``TypeError``; an identity of ``{}`` makes the 0.6 SDK segfault. So the
transport calls ``check(path)`` first, and every fault gets its own ``DeployError`` code:

- ``IDENTITY_MISSING``        the file (or a ``file://`` it refers to) does not exist;
- ``IDENTITY_UNREADABLE``     this user cannot read it: names the user, the file's owner, group and
                              mode, and whether the user is in the file's group (R1);
- ``IDENTITY_NOT_JSON``       not UTF-8 JSON;
- ``IDENTITY_INCOMPLETE``     JSON but not an identity: no ``ztAPI``/``ztAPIs``, no ``id.cert``/
                              ``id.key``/``id.ca``;
- ``IDENTITY_BAD_PEM``        cert/key/ca neither ``pem:``, ``file://`` nor PEM, or PEM that
                              does not parse;
- ``IDENTITY_KEY_MISMATCH``   ``id.key`` is not the key of ``id.cert``;
- ``IDENTITY_CERT_EXPIRED``   the identity's certificate is past its ``notAfter``;
- ``IDENTITY_CERT_NOT_YET_VALID`` its ``notBefore`` is in the future (the box's clock).

No message ever carries key material: only field names, paths, modes and certificate subjects.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import grp
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from monky_deployd.adapters.fsutil import user_name
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

AGENT_USER = "monky-deployd"
PEM_FIELDS = ("cert", "key", "ca")


@dataclass(frozen=True)
class Identity:
    """What the pre-check learned from a well-formed identity file."""

    path: Path
    controllers: tuple[str, ...]  # ztAPI first, then ztAPIs, without duplicates
    subject: str  # the leaf certificate's subject, e.g. "CN=env-dev-08"
    not_after: dt.datetime  # UTC
    # The PEMs as checked (the controller's client API is asked with them: zitiview), never shown.
    cert_pem: bytes = field(default=b"", repr=False, compare=False)
    key_pem: bytes = field(default=b"", repr=False, compare=False)
    ca_pem: bytes = field(default=b"", repr=False, compare=False)


def check(path: Path, *, now: dt.datetime | None = None, user: str = AGENT_USER) -> Identity:
    """Read and parse ``path`` as a Ziti identity, or raise ``DeployError`` naming the fault;
    ``user``: the unit's account (config.yaml's ``service_user``) a hint speaks for."""
    raw = _read(path, what=f"the Ziti identity file {path}", user=user)
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise DeployError(
            f"the Ziti identity file {path} is not JSON: byte {exc.start} is not UTF-8",
            code=Code.IDENTITY_NOT_JSON,
            hint=_REENROL_HINT,
        ) from exc
    except json.JSONDecodeError as exc:
        what = "is empty" if not raw.strip() else f"at line {exc.lineno} column {exc.colno}"
        raise DeployError(
            f"the Ziti identity file {path} is not JSON: {what}: {exc.msg}",
            code=Code.IDENTITY_NOT_JSON,
            hint=_REENROL_HINT,
        ) from exc
    controllers, pems = _fields(path, data)
    cert_text = _pem_text(path, "cert", pems["cert"], user)
    key_text = _pem_text(path, "key", pems["key"], user)
    ca_text = _pem_text(path, "ca", pems["ca"], user)
    leaf = _certificates(path, "cert", cert_text)[0]
    _certificates(path, "ca", ca_text)
    _key_matches(path, key_text, leaf)
    checked = _validity(path, controllers, leaf, now or dt.datetime.now(dt.UTC))
    return dataclasses.replace(checked, cert_pem=cert_text, key_pem=key_text, ca_pem=ca_text)


_REENROL_HINT = (
    "the identity is the file ziti-edge-tunnel enrolled for this box; "
    "re-enrol it from the kit's enrolment token if it was damaged"
)


def _read(path: Path, *, what: str, user: str = AGENT_USER) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise DeployError(
            f"{what} does not exist",
            code=Code.IDENTITY_MISSING,
            hint="the `identity:` path in config.yaml, and that ziti-edge-tunnel enrolled "
            "the box's identity (its identity directory holds <env>.json)",
        ) from exc
    except IsADirectoryError as exc:
        raise DeployError(
            f"{what} is a directory, not an identity file",
            code=Code.IDENTITY_MISSING,
            hint="the `identity:` path in config.yaml names the identity's .json file",
        ) from exc
    except PermissionError as exc:
        raise DeployError(
            f"{what} is not readable by {unreadable_reason(path)}",
            code=Code.IDENTITY_UNREADABLE,
            hint=_group_hint(path, user),
        ) from exc
    except OSError as exc:
        raise DeployError(
            f"cannot read {what}: {exc.strerror or exc}",
            code=Code.IDENTITY_UNREADABLE,
            hint=_group_hint(path, user),
        ) from exc


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return f"gid {gid}"


def _describe(st: os.stat_result) -> str:
    return f"{user_name(st.st_uid)}:{_group_name(st.st_gid)} mode {stat.S_IMODE(st.st_mode):04o}"


def _membership(user: str, gid: int) -> str:
    """Say whether this process, and /etc/group, put ``user`` in group ``gid``."""
    group = _group_name(gid)
    in_process = gid == os.getegid() or gid in os.getgroups()
    try:
        listed = user in grp.getgrgid(gid).gr_mem
    except KeyError:
        listed = False
    if in_process:
        return f"{user} is in group {group}"
    if listed:
        return (
            f"{user} is listed in group {group} in /etc/group but this process does not carry "
            "the membership (it started before the user was added: start a new session or tick)"
        )
    return f"{user} is not in group {group}"


def unreadable_reason(path: Path) -> str:
    """The running user, then why ``path`` is closed to it: owner:group, mode, group membership."""
    user = user_name(os.geteuid())
    who = f"user {user} (uid {os.geteuid()})"
    # A directory on the way that this user cannot search hides the file itself.
    for parent in reversed(path.absolute().parents):
        try:
            st = parent.stat()
        except OSError:
            break
        if not os.access(parent, os.X_OK, effective_ids=True):
            return (
                f"{who}: directory {parent} ({_describe(st)}) is not searchable, "
                f"and {_membership(user, st.st_gid)}"
            )
    try:
        st = path.stat()
    except OSError as exc:
        return f"{who}: cannot stat it ({exc.strerror or exc})"
    mode = stat.S_IMODE(st.st_mode)
    text = f"{who}: the file is {_describe(st)} and {_membership(user, st.st_gid)}"
    if not mode & stat.S_IRGRP:
        text += f"; mode {mode:04o} gives its group no read either"
    return text


def group_hint(path: Path, user: str = AGENT_USER) -> str:
    """What to do when the agent's user (``user``, the unit's account when root asks) reads
    ``path`` badly: the group, the default ACL."""
    return _group_hint(path, user)


def _group_hint(path: Path, service_user: str = AGENT_USER) -> str:
    """The package's helper where it is installed (``core.commands.fixes``: ACLs, the tunneler's
    owner, group and mode kept; a ``usermod`` did nothing for a user already in the group, a
    ``chgrp`` moved the file off ziti:ziti); else the ``usermod``/``chmod`` that lets the user read
    it."""
    from monky_deployd.adapters import accounts
    from monky_deployd.core.commands import fixes

    if Path(fixes.IDENTITY_ACCESS).is_file():
        return fixes.identity_access(str(path.absolute().parent))
    user = user_name(os.geteuid())
    user = service_user if user in ("root", f"uid {os.geteuid()}") else user
    fix = accounts.fix_for(user, path)
    if fix is None:  # the file cannot be looked at: a directory on the way is closed
        return f"that {user} can search every directory on the way to {path}"
    return (
        f"{fix} (group and mode survive ziti-edge-tunnel's rewrite of the file; "
        "a per-file ACL does not)"
    )


def _fields(path: Path, data: object) -> tuple[tuple[str, ...], dict[str, str]]:
    """The controller URLs and the raw cert/key/ca values, or IDENTITY_INCOMPLETE."""
    if not isinstance(data, dict):
        raise DeployError(
            f"the Ziti identity file {path} holds a JSON {type(data).__name__}, "
            "not an identity object",
            code=Code.IDENTITY_INCOMPLETE,
            hint=_REENROL_HINT,
        )
    missing: list[str] = []
    controllers: list[str] = []
    zt_api = data.get("ztAPI")
    if isinstance(zt_api, str) and zt_api.strip():
        controllers.append(zt_api.strip())
    zt_apis = data.get("ztAPIs")
    if isinstance(zt_apis, list):
        for url in zt_apis:
            if isinstance(url, str) and url.strip() and url.strip() not in controllers:
                controllers.append(url.strip())
    if not controllers:
        missing.append("ztAPI/ztAPIs (the controller URL)")
    ident = data.get("id")
    pems: dict[str, str] = {}
    if not isinstance(ident, dict):
        missing.append("id (cert, key, ca)")
    else:
        for field in PEM_FIELDS:
            value = ident.get(field)
            if isinstance(value, str) and value.strip():
                pems[field] = value
            else:
                missing.append(f"id.{field}")
    if missing:
        raise DeployError(
            f"the Ziti identity file {path} is JSON but not a Ziti identity: "
            f"missing {', '.join(missing)}",
            code=Code.IDENTITY_INCOMPLETE,
            hint="that the file is the enrolled identity (ztAPI, id.cert, id.key, id.ca), not "
            "the enrolment token or another JSON file; " + _REENROL_HINT,
        )
    return tuple(controllers), pems


def _pem_text(path: Path, field: str, value: str, user: str = AGENT_USER) -> bytes:
    """Resolve ``pem:``, ``file://`` or bare PEM into PEM bytes."""
    value = value.strip()
    if value.startswith("pem:"):
        return value[len("pem:") :].encode("utf-8")
    if value.startswith("file://"):
        target = Path(value[len("file://") :])
        return _read(target, what=f"{target} (id.{field} of the Ziti identity {path})", user=user)
    if value.startswith("-----BEGIN"):
        return value.encode("utf-8")
    raise DeployError(
        f"id.{field} of the Ziti identity file {path} is neither `pem:`, `file://` nor PEM text",
        code=Code.IDENTITY_BAD_PEM,
        hint=_REENROL_HINT,
    )


def _bad_pem(path: Path, field: str, what: str, exc: Exception | None = None) -> DeployError:
    words = f": {exc}" if exc is not None and field != "key" else ""
    return DeployError(
        f"id.{field} of the Ziti identity file {path} is not a valid PEM {what}{words}",
        code=Code.IDENTITY_BAD_PEM,
        hint=_REENROL_HINT,
    )


def _certificates(path: Path, field: str, text: bytes) -> list[x509.Certificate]:
    try:
        certs = x509.load_pem_x509_certificates(text)
    except ValueError as exc:
        raise _bad_pem(path, field, "certificate", exc) from exc
    if not certs:
        raise _bad_pem(path, field, "certificate")
    return certs


def _key_matches(path: Path, text: bytes, leaf: x509.Certificate) -> None:
    try:
        key = serialization.load_pem_private_key(text, password=None)
    except TypeError as exc:  # encrypted without a password
        raise DeployError(
            f"id.key of the Ziti identity file {path} is an encrypted private key",
            code=Code.IDENTITY_BAD_PEM,
            hint="the SDK needs an unencrypted key; " + _REENROL_HINT,
        ) from exc
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise _bad_pem(path, "key", "private key", exc) from exc
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != leaf.public_key().public_bytes(*spki):
        raise DeployError(
            f"id.key of the Ziti identity file {path} is not the private key of its id.cert "
            f"({leaf.subject.rfc4514_string()})",
            code=Code.IDENTITY_KEY_MISMATCH,
            hint=_REENROL_HINT,
        )


def _validity(
    path: Path, controllers: tuple[str, ...], leaf: x509.Certificate, now: dt.datetime
) -> Identity:
    subject = leaf.subject.rfc4514_string()
    not_after = leaf.not_valid_after_utc
    if now > not_after:
        raise DeployError(
            f"the certificate of the Ziti identity {path} ({subject}) expired at "
            f"{not_after.isoformat()}",
            code=Code.IDENTITY_CERT_EXPIRED,
            hint="re-enrol the box's identity (a new kit's enrolment token); the agent dials "
            "nothing with an expired certificate (a controller's default authentication policy "
            "may still accept one: allowExpiredCerts)",
        )
    if now < leaf.not_valid_before_utc:
        raise DeployError(
            f"the certificate of the Ziti identity {path} ({subject}) is not valid before "
            f"{leaf.not_valid_before_utc.isoformat()}; this box's clock says {now.isoformat()}",
            code=Code.IDENTITY_CERT_NOT_YET_VALID,
            hint="the box's clock (timedatectl, NTP)",
        )
    return Identity(path=path, controllers=controllers, subject=subject, not_after=not_after)
