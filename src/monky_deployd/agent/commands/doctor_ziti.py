"""``monky-deployd doctor``'s Ziti checks: the identity (the R2 pre-check, and whether the
agent's user reads it through its group or only through an ACL the tunneler drops), the
controller, each service's intercept; and the HTTP client the service checks share (over the
SDK context loaded here, or plain)."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING

import httpx

from monky_deployd.adapters import accounts
from monky_deployd.adapters.net import identity, transport
from monky_deployd.agent.commands import doctor_box
from monky_deployd.core.commands import checks
from monky_deployd.core.commands.checks import Check
from monky_deployd.core.errors import Code

if TYPE_CHECKING:
    from monky_deployd.adapters.net import ziti
    from monky_deployd.agent.commands.doctorrun import Run


def check_identity(run: Run) -> Check:
    cfg = run.config
    if cfg.transport == "plain":
        return Check("identity", "OK", "transport plain: no Ziti identity is used")
    run.ident = identity.check(cfg.identity_path, user=cfg.service_user)
    ident = run.ident
    left = ident.not_after.timestamp() - run.clock()
    fact = (
        f"{ident.path} is a well-formed identity ({ident.subject}), certificate valid for "
        f"{checks.duration(left)}"
    )
    via = doctor_box.reader_of(ident.path, service_user=cfg.service_user)
    if via is None:  # not through owner, group or other
        user = doctor_box.agent_user(cfg.service_user)
        if not doctor_box.has_acl(ident.path, "access"):
            return Check(
                "identity",
                "FAIL",
                f"{fact}, but {user} cannot read it ({doctor_box.describe(ident.path)}: "
                f"{accounts.why_not(user, ident.path) or 'closed to it'})",
                identity.group_hint(ident.path, cfg.service_user),
                str(Code.IDENTITY_UNREADABLE),
            )
        if not doctor_box.has_acl(ident.path.parent, "default"):
            return Check(
                "identity",
                "WARN",
                f"{fact}; {user} reads it only through a per-file ACL, which ziti-edge-tunnel's "
                "rewrite of the file drops (no default ACL on its directory renews it)",
                identity.group_hint(ident.path, cfg.service_user),
                str(Code.IDENTITY_UNREADABLE),
            )
        fact += f"; {user} reads it through an ACL the directory's default ACL renews"
    return Check("identity", "OK", fact)


def check_controller(run: Run) -> Check:
    cfg = run.config
    if cfg.transport == "plain":
        return Check("controller", "OK", "transport plain: no Ziti controller is dialled")
    from monky_deployd.adapters.net import ziti, zitiview

    assert run.ident is not None
    url = zitiview.check_controllers(run.ident)
    services = ziti.expected_services(cfg)
    seen = _controller_view(run, services)
    run.ziti_ctx = ziti.load_context(run.ident, timeout_s=cfg.tenancy.timeout_s, services=services)
    return Check(
        "controller",
        "OK",
        f"the controller {url} answers and the SDK loaded the identity; {seen}",
    )


def _controller_view(run: Run, services: Mapping[tuple[str, int], ziti.ZitiService]) -> str:
    """Ask the controller how it sees the identity (``zitiview``): its name, role attributes,
    the services it may dial through which edge routers; raise what the view names before the
    SDK would hang on it (an identity that may dial nothing). The sentence for the line."""
    from monky_deployd.adapters.net import ziti, zitiview
    from monky_deployd.core.wire import zitictl

    assert run.ident is not None
    try:
        view = zitiview.ask(run.ident)
    except zitiview.Unasked as exc:
        return f"its client API could not be asked how it sees the identity ({exc})"
    run.ziti_view = view
    fault = zitictl.judge_load(view, ziti.expects(services))
    if fault is not None:
        raise fault
    return zitictl.describe(view)


def check_tenancy_intercept(run: Run) -> Check:
    cfg = run.config
    c = checks.intercept_check(
        "tenancy-intercept", cfg.transport, cfg.tenancy.host, cfg.tenancy.port
    )
    if c.status != "OK":
        return c
    if cfg.transport == "plain":
        addr = (cfg.tenancy.host, cfg.tenancy.port)
        return _resolves("tenancy-intercept", "tenancy", addr, Code.TENANCY_UNREACHABLE) or c
    return _dial(run, (cfg.tenancy.host, cfg.tenancy.port), "tenancy-intercept")


def check_openbao_intercept(run: Run) -> Check:
    cfg = run.config
    addr = (cfg.openbao.host, cfg.openbao.port)
    if cfg.transport == "plain":
        return _resolves("openbao-intercept", "OpenBao", addr, Code.OPENBAO_UNREACHABLE) or Check(
            "openbao-intercept", "OK", f"OpenBao is dialled at {addr[0]}:{addr[1]}"
        )
    return _dial(run, addr, "openbao-intercept")


def _resolves(name: str, what: str, addr: tuple[str, int], code: Code) -> Check | None:
    """transport plain: a FAIL when the service's name does not resolve here (a tunneler in
    run mode answers the intercept names); its cause first in the hint: the run-host drop-in
    that turned the intercepts off, else the tunneler not running. None when it resolves."""
    host, port = addr
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        words = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        from monky_deployd.adapters.net import httperrors

        hint = httperrors.unresolved_fix()  # the tick's hint for the same fault
        return Check(
            name,
            "FAIL",
            f"{what}'s name {host} does not resolve on this box ({words}): with transport "
            "plain it is dialled through an intercept, whose name the tunneler in run mode "
            "answers",
            hint,
            str(code),
        )
    return None


def _dial(run: Run, addr: tuple[str, int], name: str) -> Check:
    from monky_deployd.adapters.net import ziti

    cfg = run.config
    services = ziti.expected_services(cfg)
    if run.ziti_view is not None:  # what the controller said names the fault without a dial
        from monky_deployd.core.wire import zitictl

        fault = zitictl.judge_dial(run.ziti_view, addr, ziti.expects(services).get(addr))
        if fault is not None:
            raise fault
    try:
        sock = ziti.sdk_dial(run.ziti_ctx)(addr)
    except Exception as exc:
        timeout = max(cfg.tenancy.timeout_s, cfg.openbao.timeout_s)
        raise ziti.dial_failure(
            addr, exc, timeout_s=timeout, services=services, identity=run.ident
        ) from exc
    sock.close()
    label = services[addr].label if addr in services else "?"
    return Check(name, "OK", f"{addr[0]}:{addr[1]} is intercepted for this identity ({label})")


def client(run: Run) -> httpx.Client:
    if run.client is None:
        cfg = run.config
        if cfg.transport == "ziti":
            from monky_deployd.adapters.net import ziti

            assert run.ident is not None
            wire_t: httpx.BaseTransport = ziti.ZitiTransport(
                ziti.sdk_dial(run.ziti_ctx),
                services=ziti.expected_services(cfg),
                identity=run.ident,
                connect_timeout_s=max(cfg.tenancy.timeout_s, cfg.openbao.timeout_s),
            )
            run.client = httpx.Client(transport=wire_t, trust_env=False)
        else:
            run.client = transport.open_client(cfg)
    return run.client
