"""Ask the Ziti controller how it sees the box's identity: its edge client API, over mutual TLS
with the identity's own certificate and key, checked against the identity's own CA.

``ask(ident, deadline_s=...)`` authenticates (``POST /edge/client/v1/authenticate?method=cert``),
reads ``/current-identity`` (name, role attributes), ``/services?configTypes=intercept.v1`` (what
it may dial and at which intercept), ``/current-identity/edge-routers`` and each dialable
service's ``/services/{id}/edge-routers`` (online or not), then ends its API session. It runs only
when it is needed: a load that fails or does not finish, a dial that fails, and ``doctor``; the
steady tick never imports this module. Every answer is read with ``httpio.read_capped`` and the
whole exchange ends within ``deadline_s`` (and the tick's deadline: ``PoolTransport``).

What it raises:

- ``DeployError`` ``ZITI_CONTROLLER_CERT``: the controller's certificate does not name the host
  of the identity's ``ztAPI`` (the names it does carry are given), or the identity's CA does not
  trust it;
- ``DeployError`` ``ZITI_IDENTITY_UNKNOWN``: the controller refuses the identity's certificate
  (401): the identity was deleted on the controller, or re-enrolled elsewhere;
- ``Unasked``: no usable answer (no connection, a timeout, a shape it cannot read): the caller
  keeps its own naming of the fault.

Key material never leaves memory: the certificate and key reach ``ssl`` through a memfd.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import ssl
import time
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from monky_deployd.adapters import deadline
from monky_deployd.adapters.httpio import PoolTransport, read_capped
from monky_deployd.adapters.net.identity import Identity
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.wire import zitictl
from monky_deployd.core.wire.zitictl import Address, Expect, View

API = "/edge/client/v1"
ASK_DEADLINE_S = 10.0
PROBE_TIMEOUT_S = 5.0
MAX_ANSWER_BYTES = 4 << 20
HOSTNAME_MISMATCH = 62  # X509_V_ERR_HOSTNAME_MISMATCH


class Unasked(Exception):
    """The controller could not be asked (the reason is the message)."""


class _TooLarge(DeployError):
    pass


def ask(ident: Identity, *, deadline_s: float = ASK_DEADLINE_S) -> View:
    """The identity as the first of its controllers that answers sees it (module doc)."""
    if not ident.cert_pem or not ident.key_pem:
        raise Unasked("the identity's certificate and key were not kept")
    end = time.monotonic() + deadline_s
    reasons: list[str] = []
    for url in ident.controllers:
        try:
            return _ask_one(ident, url, end)
        except Unasked as exc:
            reasons.append(f"{url}: {exc}")
    raise Unasked("; ".join(reasons) or "the identity names no controller")


def named_for_load(ident: Identity, expected: Mapping[Address, Expect]) -> DeployError | None:
    """The fault behind a load that does not finish, as the controller names it (its
    certificate, an unknown identity: raised; an identity that may dial nothing); None."""
    try:
        view = ask(ident)
    except Unasked:
        return None
    return zitictl.judge_load(view, expected)


def named_for_refusal(ident: Identity) -> DeployError | None:
    """What the controller's answer names when the SDK refused the identity (its certificate,
    an unknown identity); None when it cannot be asked or the identity is fine there."""
    try:
        ask(ident)
    except Unasked:
        return None
    except DeployError as err:
        return err
    return None


def named_for_dial(ident: Identity, addr: Address, expect: Expect | None) -> DeployError | None:
    """What the controller's view names about a failed dial to ``addr`` (``judge_dial``)."""
    try:
        view = ask(ident)
    except Unasked:
        return None
    except DeployError as err:  # the controller's certificate, an unknown identity
        return err
    return zitictl.judge_dial(view, addr, expect)


def _context(ident: Identity) -> ssl.SSLContext:
    try:
        ctx = ssl.create_default_context(cadata=ident.ca_pem.decode("utf-8"))
        with _memfile(ident.cert_pem + b"\n" + ident.key_pem) as path:
            ctx.load_cert_chain(path)
    except (ssl.SSLError, ValueError, OSError) as exc:
        raise Unasked(f"its certificate, key or CA cannot be used for TLS ({exc})") from exc
    return ctx


@contextlib.contextmanager
def _memfile(data: bytes) -> Iterator[str]:
    fd = os.memfd_create("ziti-identity", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        yield f"/proc/self/fd/{fd}"
    finally:
        os.close(fd)


def _ask_one(ident: Identity, url: str, end: float) -> View:
    parts = urlsplit(url)
    if not parts.hostname:
        raise Unasked("names no host")
    base = f"{parts.scheme}://{parts.netloc}"
    ctx = _context(ident)
    left = max(0.5, end - time.monotonic())
    with httpx.Client(
        transport=PoolTransport(ssl_context=ctx),
        base_url=base,
        timeout=httpx.Timeout(left),
        trust_env=False,
    ) as client:
        resp = _call(client, "POST", f"{API}/authenticate?method=cert", end, json={})
        if resp.status_code == 401:
            raise _unknown(ident, url, resp)
        token = _token(_json(resp, "authenticate"))
        try:
            return _view(client, url, token, end)
        finally:
            with contextlib.suppress(Exception):  # end the API session it made
                _call(client, "DELETE", f"{API}/current-api-session", end, token=token)


def _view(client: httpx.Client, url: str, token: str, end: float) -> View:
    def get(path: str) -> object:
        return _json(_call(client, "GET", f"{API}/{path}", end, token=token), path)

    try:
        name, ident_id, roles = zitictl.identity_of(get("current-identity"))
        services = zitictl.services_of(get("services?configTypes=intercept.v1&limit=500"))
        routers = zitictl.routers_of(get("current-identity/edge-routers"))
        seen = []
        for svc in services:
            if svc.dial:
                # an older controller answers no such path: the identity's routers stand in
                with contextlib.suppress(Unasked):
                    routers_of = zitictl.routers_of(get(f"services/{svc.id}/edge-routers"))
                    svc = dataclasses.replace(svc, routers=routers_of)
            seen.append(svc)
    except ValueError as exc:
        raise Unasked(f"an answer it cannot read ({exc})") from exc
    return View(url, name, ident_id, roles, tuple(seen), routers)


def _call(
    client: httpx.Client, method: str, path: str, end: float, *, token: str = "", **kwargs: object
) -> httpx.Response:
    left = end - time.monotonic()
    if left <= 0:
        raise Unasked(f"no answer within {ASK_DEADLINE_S:g} s")
    headers = {"zt-session": token} if token else {}
    try:
        return read_capped(
            client,
            method,
            path,
            max_bytes=MAX_ANSWER_BYTES,
            deadline_s=left,
            too_large=lambda: _TooLarge("too large", code=Code.ZITI_LOAD_FAILED),
            headers=headers,
            **kwargs,
        )
    except _TooLarge as exc:
        raise Unasked(f"{method} {path}: an answer over {MAX_ANSWER_BYTES} bytes") from exc
    except httpx.HTTPError as exc:
        verify = _verify_error(exc)
        if verify is not None:
            raise _untrusted(client, verify) from exc
        raise Unasked(f"{method} {path}: {type(exc).__name__}: {exc}") from exc


def _json(resp: httpx.Response, what: str) -> object:
    if resp.status_code != 200:
        raise Unasked(f"{what} answered HTTP {resp.status_code}")
    try:
        return resp.json()
    except ValueError as exc:
        raise Unasked(f"{what} answered no JSON") from exc


def _token(doc: object) -> str:
    data = doc.get("data") if isinstance(doc, dict) else None
    token = data.get("token") if isinstance(data, dict) else None
    if not isinstance(token, str) or not token:
        raise Unasked("authenticate answered no session token")
    return token


def _error_code(resp: httpx.Response) -> str:
    with contextlib.suppress(ValueError):
        doc = resp.json()
        err = doc.get("error") if isinstance(doc, dict) else None
        code = err.get("code") if isinstance(err, dict) else None
        if isinstance(code, str):
            return code
    return "no error code"


def _cn(ident: Identity) -> str:
    with contextlib.suppress(ValueError):
        cert = x509.load_pem_x509_certificates(ident.cert_pem)[0]
        names = cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)
        if names:
            return str(names[0].value)
    return "<the certificate's CN>"


def _fingerprint(ident: Identity) -> str:
    with contextlib.suppress(ValueError):
        cert = x509.load_pem_x509_certificates(ident.cert_pem)[0]
        return cert.fingerprint(hashes.SHA1()).hex()  # noqa: S303 (ziti lists SHA-1)
    return "?"


def _unknown(ident: Identity, url: str, resp: httpx.Response) -> DeployError:
    cn = _cn(ident)
    return DeployError(
        f"the Ziti controller {url} refuses the certificate of the identity {ident.path} "
        f"({ident.subject}) with HTTP {resp.status_code} {_error_code(resp)}: the identity was "
        "deleted on the controller, re-enrolled elsewhere (this box holds its old certificate) "
        "or disabled",
        code=Code.ZITI_IDENTITY_UNKNOWN,
        hint=f"on the controller, `ziti edge list identities 'id=\"{cn}\"'` (the certificate's "
        "CN is the identity's id): none listed, it was deleted: create the box's identity again "
        "and enrol this box from its token; listed, `ziti edge list authenticators "
        f"'identity=\"{cn}\"'`: no certificate with this box's fingerprint {_fingerprint(ident)}, "
        f"it was re-enrolled elsewhere: enrol this box from a new token (`ziti edge create "
        f"enrollment ott {cn}`); else it is disabled (its `disabled` field): enable it",
    )


def _verify_error(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ssl.SSLCertVerificationError):
            return cur
        for arg in cur.args:
            if isinstance(arg, ssl.SSLCertVerificationError):
                return arg
        cur = cur.__cause__ or cur.__context__
    return None


def _untrusted(client: httpx.Client, err: ssl.SSLCertVerificationError) -> DeployError:
    url = client.base_url
    host, port = url.host, url.port or 443
    if err.verify_code == HOSTNAME_MISMATCH:
        names = _names_presented(host, port)
        return DeployError(
            f"the Ziti controller at {host}:{port} presents a certificate for {names}, not for "
            f"{host}, the name in the identity's ztAPI",
            code=Code.ZITI_CONTROLLER_CERT,
            hint="the controller's server certificate (its web identity's server_cert and its "
            "advertised address) against the ztAPI the identity was enrolled with: one of them "
            "changed; a certificate naming the host, or an identity enrolled for the name the "
            "certificate carries",
        )
    return DeployError(
        f"the Ziti controller at {host}:{port} presents a certificate the identity's CA does not "
        f"accept ({err.verify_message})",
        code=Code.ZITI_CONTROLLER_CERT,
        hint="that the identity was enrolled with this controller (its id.ca is the controller's "
        "CA bundle) and the controller's certificate is current",
    )


def _names_presented(host: str, port: int) -> str:
    """The DNS names and addresses of the certificate the controller presents (not verified:
    only to say what it is for)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((host, port), timeout=deadline.clamp(5.0)) as raw,
            ctx.wrap_socket(raw, server_hostname=host) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
    except (OSError, deadline.Expired):
        return "another name"
    if not der:
        return "another name"
    cert = x509.load_der_x509_certificate(der)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return cert.subject.rfc4514_string()
    names: list[str] = list(san.get_values_for_type(x509.DNSName))
    names += [str(a) for a in san.get_values_for_type(x509.IPAddress)]
    return ", ".join(names) or cert.subject.rfc4514_string()


# -- the controller, when the SDK could not load the identity --------------------------------


def probe(url: str) -> str | None:
    """None when the controller at ``url`` accepts a TCP connection, else the reason."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return f"{url!r} names no host"
    try:
        port = parts.port or (80 if parts.scheme == "http" else 443)
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return None
    except ValueError as exc:
        return f"{url!r}: {exc}"
    except TimeoutError:
        return f"no TCP answer within {PROBE_TIMEOUT_S:g} s"
    except socket.gaierror as exc:
        return f"its name does not resolve ({exc.strerror})"
    except OSError as exc:
        return exc.strerror or str(exc)


def check_controllers(ident: Identity) -> str:
    """The first controller of ``ident`` that accepts a TCP connection (doctor), or
    ZITI_CONTROLLER_UNREACHABLE naming each one's reason."""
    reasons = {url: probe(url) for url in ident.controllers}
    for url, reason in reasons.items():
        if reason is None:
            return url
    raise _no_controller(ident, reasons, "")


def _no_controller(ident: Identity, reasons: Mapping[str, str | None], detail: str) -> DeployError:
    where = "; ".join(f"{url}: {reason}" for url, reason in reasons.items())
    return DeployError(
        f"cannot reach the Ziti controller named by the identity {ident.path} ({where})",
        code=Code.ZITI_CONTROLLER_UNREACHABLE,
        hint="the identity's ztAPI address and port, DNS and the firewall from this box to "
        "the controller, and that the controller is up",
        detail=detail,
    )


def load_failure(ident: Identity, words: str, *, timed_out: bool = False) -> DeployError:
    """Name why the SDK could not load ``ident``: probe the controllers it names."""
    reasons = {url: probe(url) for url in ident.controllers}
    answering = [url for url, reason in reasons.items() if reason is None]
    sdk_said = f"the OpenZiti SDK said: {words}"
    if not answering:
        return _no_controller(ident, reasons, sdk_said)
    named = None if timed_out else named_for_refusal(ident)
    if named is not None:
        named.detail = sdk_said
        return named
    if timed_out:
        return DeployError(
            f"the OpenZiti SDK did not finish loading the identity {ident.path} ({ident.subject}) "
            f"within the timeout, although the controller {answering[0]} accepts TCP connections",
            code=Code.ZITI_LOAD_TIMEOUT,
            hint="the controller's health and TLS answer (the SDK's own log lines are in detail)",
            detail=sdk_said,
        )
    return DeployError(
        f"the OpenZiti SDK refused the identity {ident.path} ({ident.subject}) although the "
        f"controller {answering[0]} answers: {words}",
        code=Code.ZITI_LOAD_FAILED,
        hint="the SDK's own log lines (in detail); that the identity still exists on the "
        "controller (not deleted or re-enrolled elsewhere) and its certificate comes from the "
        "controller's CA; re-enrol the box's identity if not",
        detail=sdk_said,
    )
