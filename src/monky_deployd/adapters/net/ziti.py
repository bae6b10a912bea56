"""The Ziti transport: httpx over an httpcore pool whose network backend dials through the SDK.

``open_transport(cfg)`` pre-checks the identity (``identity.check``), loads it with the OpenZiti
SDK and returns an ``httpx.BaseTransport`` that carries tenancy and OpenBao traffic over
``ctx.connect((host, port))``: the SDK dials by intercept address. ``openziti.monkeypatch()`` is
never used (it replaces ``socket.socket`` process-wide, breaks httpx and falls back silently to
plain TCP).

Both SDK shapes are supported: 0.6 (``load(path)`` raises a bare ``TypeError``/``ValueError``)
and >= 1.3 (``load(path[, timeout])`` returns ``(ctx, err)``, checked with ``strerror(err)``).

What the caller sees: every fault of this module is a ``DeployError`` (family ziti) raised straight
out of ``open_transport`` or out of ``httpx.Client.send()``/``.request()`` (httpx does not wrap
exceptions that are not httpcore's). Codes (see docs/ziti-faults.md):

- ``ZITI_SDK_MISSING``             the ``openziti`` package or its libziti cannot be loaded;
- ``ZITI_CONTROLLER_UNREACHABLE``  the SDK could not load the identity and the controller named in
                                   it does not accept a TCP connection from this box;
- ``ZITI_LOAD_FAILED``             the SDK refused the identity although the controller answers;
- ``ZITI_LOAD_TIMEOUT``            the SDK did not finish loading in time (controller answers TCP);
- ``ZITI_NO_SERVICE``              no Ziti service intercepts host:port for this identity;
- ``ZITI_DIAL_TIMEOUT``            the dial did not complete within the connect timeout;
- ``ZITI_DIAL_FAILED``             any other dial failure, with the SDK's words;

and, when the SDK fails and the controller can be asked how it sees the identity
(``zitiview``: a failed or hanging load after ``LOAD_PATIENCE_S``, a failed dial), what that view
names instead: ``ZITI_CONTROLLER_CERT``, ``ZITI_IDENTITY_UNKNOWN``, ``ZITI_ROLE_MISSING`` (with the
one command), ``ZITI_ROUTER_OFFLINE``, ``ZITI_NO_SERVICE`` naming the intercept's real port.

A read or write failure on an established connection is httpx's own ``ReadError``/``WriteError``/
``ReadTimeout``..., as with any httpx transport.

The SDK's own log lines (libziti writes them to fd 2) are held while the identity loads and while a
dial runs (``sdk_stderr``): on success they are passed on, on failure the ``DeployError``'s
``detail`` carries them (``its log: ...``) so that the agent's error line is the first in the
journal and the SDK's words are still there.
"""

from __future__ import annotations

import errno
import inspect
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from monky_deployd.adapters.net import identity as identity_mod
from monky_deployd.adapters.net.dialhttp import Address, Dial, DialTransport, bounded
from monky_deployd.adapters.net.identity import Identity
from monky_deployd.adapters.net.sdk_stderr import SDK_STDERR
from monky_deployd.config import TENANCY_INTERCEPT_PORT, Config
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

TENANCY_SERVICE = "monky.tenancy.deploy"
TENANCY_ROLE = "#monky-deploy-agent"
OPENBAO_ROLE = "#openbao-client"
LOAD_MARGIN_S = 2.0
LOAD_PATIENCE_S = 3.0  # a load slower than this asks the controller why (zitiview)


@dataclass(frozen=True)
class ZitiService:
    """What the agent expects behind an intercept address."""

    label: str  # e.g. "tenancy's deploy API (Ziti service monky.tenancy.deploy)"
    config_key: str  # the config.yaml section holding host/port: "tenancy" or "openbao"
    role_attribute: str  # the identity role attribute a dial policy needs


def expected_services(cfg: Config) -> dict[Address, ZitiService]:
    """The intercept addresses the agent dials, from config.yaml."""
    return {
        (cfg.openbao.host, cfg.openbao.port): ZitiService(
            label=f"OpenBao (the Ziti service for role attribute {OPENBAO_ROLE})",
            config_key="openbao",
            role_attribute=OPENBAO_ROLE,
        ),
        # Inserted last so that it wins when both share an address.
        (cfg.tenancy.host, cfg.tenancy.port): ZitiService(
            label=f"tenancy's deploy API (Ziti service {TENANCY_SERVICE})",
            config_key="tenancy",
            role_attribute=TENANCY_ROLE,
        ),
    }


def open_transport(cfg: Config) -> httpx.BaseTransport:
    """Pre-check the identity, load it with the SDK, return the dialling transport."""
    ident = identity_mod.check(cfg.identity_path)
    services = expected_services(cfg)
    ctx = load_context(ident, timeout_s=cfg.tenancy.timeout_s, services=services)
    return ZitiTransport(
        sdk_dial(ctx),
        services=services,
        identity=ident,
        connect_timeout_s=max(cfg.tenancy.timeout_s, cfg.openbao.timeout_s),
    )


# --- loading the identity into the SDK --------------------------------------------------------


def _import_sdk() -> Any:
    # The SDK loads every identity named in ZITI_IDENTITIES at import, before any pre-check.
    os.environ.pop("ZITI_IDENTITIES", None)
    try:
        import openziti
    except (ImportError, OSError) as exc:
        raise DeployError(
            f"the OpenZiti SDK (python package openziti) cannot be loaded: {exc}",
            code=Code.ZITI_SDK_MISSING,
            hint="that the monky-deployd package installed its dependencies; "
            "`transport: plain` where a tunneler intercepts the addresses",
        ) from exc
    return openziti


def _load_call(sdk: Any, path: str, timeout_s: float) -> Callable[[], Any]:
    load = sdk.load
    try:
        params = inspect.signature(load).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    ms = max(1, int(timeout_s * 1000))
    if "timeout_ms" in params:
        return lambda: load(path, timeout_ms=ms)
    if "timeout" in params:
        return lambda: load(path, timeout=ms)
    return lambda: load(path)


def load_context(
    ident: Identity, *, timeout_s: float, services: Mapping[Address, ZitiService] | None = None
) -> Any:
    """Load the pre-checked identity with the SDK; any failure becomes a DeployError whose detail
    carries what the SDK logged meanwhile (held back from stderr: the agent's line comes first).
    A load that has not answered after ``LOAD_PATIENCE_S`` asks the controller how it sees the
    identity (``zitiview``): one that may dial no service never loads in 0.6, and is named then
    (``ZITI_ROLE_MISSING``) rather than at the timeout."""
    SDK_STDERR.hold()
    try:
        ctx = _load_context(ident, timeout_s=timeout_s, services=services or {})
    except DeployError as err:
        raise with_sdk_log(err) from err.__cause__
    SDK_STDERR.release()
    return ctx


def with_sdk_log(err: DeployError) -> DeployError:
    """``err`` with the SDK's held log lines appended to its detail (nothing when it said none)."""
    words = SDK_STDERR.take()
    if words:
        sep = "; " if err.detail else ""
        err.detail = f"{err.detail}{sep}its log: {words}"
    return err


def _load_context(
    ident: Identity, *, timeout_s: float, services: Mapping[Address, ZitiService]
) -> Any:
    sdk = _import_sdk()
    call = _load_call(sdk, str(ident.path), timeout_s)
    asked: list[bool] = []

    def impatient() -> None:  # the load hangs: ask the controller why, once
        asked.append(True)
        named = _load_hang_named(ident, services)
        if named is not None:
            raise named

    try:  # >= 1.4 also gets timeout_s itself: leave it the margin to answer with its own words
        result = bounded(
            call,
            timeout_s + LOAD_MARGIN_S,
            discard=lambda _ctx: None,
            patience_s=LOAD_PATIENCE_S,
            impatient=impatient,
        )
    except TimeoutError as exc:
        named = None if asked else _load_hang_named(ident, services)
        if named is not None:
            raise named from exc
        raise _load_failure(ident, f"no answer within {timeout_s:g} s", timed_out=True) from exc
    except DeployError:
        raise
    except Exception as exc:  # 0.6: bare TypeError / ValueError
        raise _load_failure(ident, f"{type(exc).__name__}: {exc}") from exc
    return interpret_load_result(result, ident, getattr(sdk, "strerror", None))


def expects(services: Mapping[Address, ZitiService]) -> dict[Address, Any]:
    from monky_deployd.core.wire import zitictl

    return {
        addr: zitictl.Expect(s.label, s.config_key, s.role_attribute)
        for addr, s in services.items()
    }


def _load_hang_named(
    ident: Identity, services: Mapping[Address, ZitiService]
) -> DeployError | None:
    from monky_deployd.adapters.net import zitiview

    return zitiview.named_for_load(ident, expects(services))


def interpret_load_result(
    result: Any, ident: Identity, strerror: Callable[[int], str] | None
) -> Any:
    """0.6 returns the context; >= 1.3 returns ``(ctx, err)`` and never raises on a bad identity."""
    if isinstance(result, tuple) and len(result) == 2:
        ctx, err = result
        if err:
            words = strerror(err) if strerror is not None else "unknown"
            raise _load_failure(ident, f"error {err} ({words})")
        return ctx
    return result


# --- dialling ---------------------------------------------------------------------------------


def sdk_dial(ctx: Any) -> Dial:
    """The SDK's dial by intercept address, refusing the >= 1.7 silent plain-TCP fallback."""

    def dial(addr: Address) -> socket.socket:
        SDK_STDERR.hold(start=False)  # a failure's log lines go into dial_failure's detail
        for left in range(_STALE_FD_TRIES - 1, -1, -1):
            try:
                sock: socket.socket = ctx.connect(addr)
                break
            except Exception as exc:
                if not (left and _stale_fd(exc)):
                    raise
        if getattr(sock, "_zitifd", 0) is None:  # openziti >= 1.7 fell back to plain TCP
            sock.close()
            raise ConnectionRefusedError(
                errno.ECONNREFUSED, "no service for target address (the SDK fell back to plain TCP)"
            )
        SDK_STDERR.release()
        return sock

    return dial


# libziti 0.29.3 (the 0.6.0 wheel) keys its sockets by fd number and learns of a close only on
# its own loop: a dial right after a close can get the number back while the SDK still holds it
# and fail with EALREADY ("socket N already connecting/connected"; seen on a real network when
# doctor dials tenancy, then OpenBao). The failed connect leaves its fd open (the wheel does not
# close it), so the next try gets a fresh number.
_STALE_FD_TRIES = 3


def _stale_fd(exc: BaseException) -> bool:
    return type(exc) is Exception and exc.args[:1] == (errno.EALREADY,)


def _sdk_words(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} (errno {exc.errno})" if exc.errno else exc.strerror
    if type(exc) is Exception and len(exc.args) == 2:  # 0.6: Exception(err, msg)
        return f"{exc.args[1]} (error {exc.args[0]})"
    return f"{type(exc).__name__}: {exc}"


def _refused(exc: BaseException) -> bool:
    if isinstance(exc, ConnectionRefusedError | socket.gaierror):
        return True
    if isinstance(exc, OSError):
        return exc.errno == errno.ECONNREFUSED
    code = exc.args[0] if exc.args else None
    text = str(exc).lower()
    return (
        code in (errno.ECONNREFUSED, -errno.ECONNREFUSED)
        or "no service" in text
        or ("service not available" in text)
    )


def _port_hint(service: ZitiService | None, addr: Address) -> str:
    host, port = addr
    if service is None:
        return (
            f"the URL being dialled: {host}:{port} is neither the configured tenancy nor the "
            "OpenBao address (tenancy.host/port, openbao.host/port in config.yaml)"
        )
    if service.config_key == "tenancy" and port != TENANCY_INTERCEPT_PORT:
        return (
            f"tenancy.port in config.yaml is {port} but the {TENANCY_SERVICE} intercept is "
            f"{TENANCY_INTERCEPT_PORT} (8081 is the tenancy pod's in-pod listener, never dialled)"
        )
    if service.config_key == "tenancy":
        return (
            f"that {host}:{port} is the intercept of {TENANCY_SERVICE} in its intercept.v1 "
            "config on the controller (port 443, never the in-pod listener's port)"
        )
    return (
        f"that openbao.host/port ({host}:{port}) match the intercept.v1 config of the "
        "OpenBao service on the controller"
    )


def dial_failure(
    addr: Address,
    exc: BaseException,
    *,
    timeout_s: float,
    services: Mapping[Address, ZitiService],
    identity: Identity | None,
) -> DeployError:
    """Name a failed dial (``_dial_failure``), or what the controller's view of the identity
    says about it (``zitictl.judge_dial``: the missing role attribute, the intercept port, the
    edge router offline); its detail also carries the SDK's words and held log."""
    err = _dial_failure(addr, exc, timeout_s=timeout_s, services=services, identity=identity)
    named = _dial_named(addr, services, identity)
    if named is not None:
        named.detail = err.detail
        err = named
    return with_sdk_log(err)


def _load_failure(ident: Identity, words: str, *, timed_out: bool = False) -> DeployError:
    from monky_deployd.adapters.net import zitiview

    return zitiview.load_failure(ident, words, timed_out=timed_out)


def _dial_named(
    addr: Address, services: Mapping[Address, ZitiService], identity: Identity | None
) -> DeployError | None:
    if identity is None or not identity.key_pem:
        return None
    from monky_deployd.adapters.net import zitiview

    return zitiview.named_for_dial(identity, addr, expects(services).get(addr))


def _dial_failure(
    addr: Address,
    exc: BaseException,
    *,
    timeout_s: float,
    services: Mapping[Address, ZitiService],
    identity: Identity | None,
) -> DeployError:
    """Name a failed dial: host:port, the service expected there, and what to check."""
    where = f"{addr[0]}:{addr[1]}"
    service = services.get(addr)
    expected = service.label if service else "no service the agent knows"
    words = _sdk_words(exc)
    who = f"the identity {identity.path} ({identity.subject})" if identity else "the identity"
    role = service.role_attribute if service else f"{TENANCY_ROLE} / {OPENBAO_ROLE}"
    controller = identity.controllers[0] if identity else "named in the identity's ztAPI"
    hint = (
        f"{_port_hint(service, addr)}; that {who} carries the role attribute {role} (an operator "
        "adds it on the controller, nothing automates it yet) so that a dial policy grants the "
        f"service; that the controller {controller} and an edge router are reachable"
    )
    detail = f"the SDK said: {words}"
    if isinstance(exc, TimeoutError):
        return DeployError(
            f"the Ziti dial to {where} ({expected}) did not complete within {timeout_s:g} s",
            code=Code.ZITI_DIAL_TIMEOUT,
            hint=hint,
            detail=detail,
        )
    if _refused(exc):
        return DeployError(
            f"no Ziti service intercepts {where} for this identity (expected there: {expected})",
            code=Code.ZITI_NO_SERVICE,
            hint=hint,
            detail=detail,
        )
    return DeployError(
        f"the Ziti dial to {where} ({expected}) failed: {words}",
        code=Code.ZITI_DIAL_FAILED,
        hint=hint,
        detail=detail,
    )


class ZitiTransport(DialTransport):
    """The dialling httpx transport whose failures name host:port, service and what to check.

    ``dial`` is the SDK's ``ctx.connect`` in production (``sdk_dial``) and any function returning
    a connected socket in tests. A failed dial raises a ``DeployError`` (``dial_failure``)
    straight out of ``httpx.Client.send``.
    """

    def __init__(
        self,
        dial: Dial,
        *,
        services: Mapping[Address, ZitiService] | None = None,
        identity: Identity | None = None,
        connect_timeout_s: float = 15.0,
    ) -> None:
        known = dict(services or {})

        def name_failure(addr: Address, exc: BaseException, timeout_s: float) -> Exception:
            return dial_failure(addr, exc, timeout_s=timeout_s, services=known, identity=identity)

        super().__init__(dial, name_failure=name_failure, connect_timeout_s=connect_timeout_s)
