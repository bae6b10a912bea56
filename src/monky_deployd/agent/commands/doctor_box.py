"""``monky-deployd doctor``'s checks of the box itself: the registry credential, disk on every
filesystem a pull writes to, the Docker socket for the agent's user, compose, the systemd timer
and the run-host drop-in (``agent.commands.doctor`` runs them in order; ``core.commands.checks``
decides)."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from monky_deployd.adapters import accounts
from monky_deployd.adapters.box import runner
from monky_deployd.adapters.box import unit as unit_adapter
from monky_deployd.adapters.box.docker import docker_api, preflight
from monky_deployd.adapters.box.docker.compose import docker_env
from monky_deployd.adapters.box.state import owner
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.adapters.fsutil import user_name
from monky_deployd.adapters.net.registry import Registry
from monky_deployd.core.commands import checks, fixes, unit
from monky_deployd.core.commands.checks import Check
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.records.tickrecord import rfc3339
from monky_deployd.core.render import registry_cred

if TYPE_CHECKING:
    from monky_deployd.agent.commands.doctorrun import Run

AGENT_USER = "monky-deployd"
TIMER_UNIT = "monky-deployd.timer"
DROPIN = Path(fixes.RUN_HOST_DROPIN)


def agent_user(service_user: str = AGENT_USER) -> str:
    """The user the checks speak for: this process's, or the unit's account (config.yaml's
    ``service_user``) when root runs doctor and that account exists."""
    me = user_name(os.geteuid())
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(service_user)
            return service_user
        except KeyError:
            return me
    return me


def _ids(user: str) -> tuple[int, set[int]]:
    """(uid, group ids) of ``user`` as /etc/passwd and /etc/group say; this process's own
    when it is that user (its groups are what it carries, not what /etc/group says now)."""
    if user == user_name(os.geteuid()):
        return os.geteuid(), {os.getegid(), *os.getgroups()}
    pw = pwd.getpwnam(user)
    return pw.pw_uid, {pw.pw_gid} | {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}


def reader_of(
    path: Path, want: int = 4, service_user: str = AGENT_USER
) -> Literal["owner", "group", "other", "root"] | None:
    """How the agent's user reaches ``path`` by its mode bits (None: only through an ACL)."""
    uid, gids = _ids(agent_user(service_user))
    st = path.stat()
    return checks.access_via(uid, gids, st.st_uid, st.st_gid, st.st_mode, want)


def describe(path: Path) -> str:
    """``owner:group mode 0640`` of ``path``."""
    st = path.stat()
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = f"gid {st.st_gid}"
    return f"{user_name(st.st_uid)}:{group} mode {st.st_mode & 0o7777:04o}"


def has_acl(path: Path, kind: Literal["access", "default"] = "access") -> bool:
    """``path`` carries a POSIX ACL: its access ACL, or (a directory) its default ACL."""
    try:
        os.getxattr(path, f"system.posix_acl_{kind}")
    except OSError:
        return False
    return True


def closed_to_agent(
    name: str, path: Path, code: str, what: str, service_user: str = AGENT_USER
) -> Check | None:
    """A FAIL when root runs doctor and the agent's user could not read ``path`` (mode bits,
    no ACL): root reads anything, the unit's user does not. None when it can."""
    user = agent_user(service_user)
    readable = reader_of(path, service_user=service_user) is not None
    if user == user_name(os.geteuid()) or readable or has_acl(path):
        return None
    return Check(
        name,
        "FAIL",
        f"{path} is {describe(path)}: root reads it, but {user} (the unit's user) cannot "
        f"({accounts.why_not(user, path) or 'closed to it'})",
        f"{accounts.fix_for(user, path) or 'its owner and mode'} (the package sets {what})",
        code,
    )


def _info(run: Run) -> dict[str, object]:
    if run.docker_info is None:
        cfg = run.config
        env = docker_env(cfg.docker, StateDir(cfg.state_dir).docker_dir)
        run.docker_info = preflight.docker_info(cfg.docker, env)
    return run.docker_info


def check_registry(run: Run) -> Check:
    bundle = run.bundle
    if bundle is None:
        return Check("registry", "OK", "no desired bundle: no registry credential to try")
    if not bundle.registry_entries:
        return Check(
            "registry",
            "OK",
            f"revision {bundle.revision} has no registry credential (anonymous pulls)",
        )
    cred = registry_cred.parse_credential(run.registry_value, bundle.registry_host)
    run.secrets.extend((cred.password, cred.basic_auth()))
    host = registry_cred.check_registry_host(bundle.registry_host)
    try:
        info: dict[str, object] | None = _info(run)
    except DeployError:
        info = None
    # https with the system's CA store (as dockerd), http when loopback or insecure per the engine
    with Registry(run.config.docker.command_timeout_s, info=info) as reg:
        return Check("registry", "OK", reg.check_login(host, cred))


def check_disk(run: Run) -> Check:
    cfg = run.config
    need = run.bundle.disk_need_bytes if run.bundle is not None else None
    found = preflight.run(_info(run), cfg.docker, cfg.disk, need)
    shown = "; ".join(
        f"{', '.join(str(p) for p in m.all_paths)} on {m.mount_point} ({m.fs_type}): "
        f"{preflight.human(m.free_bytes)} free"
        for m in found
    )
    need_s = preflight.human(found[0].required_bytes) if found else "?"
    return Check("disk", "OK", f"{shown}; a pull needs {need_s}")


def check_socket(run: Run) -> Check:
    cfg = run.config
    version, api, where = docker_api.engine_version(cfg.docker)
    fact = f"Docker Engine {version} (API {api}) answers at {where}"
    user = agent_user(cfg.service_user)
    if where.startswith("/") and user != user_name(os.geteuid()):
        via = reader_of(Path(where), want=6, service_user=cfg.service_user)
        if via is None:
            sock = Path(where)
            return Check(
                "docker-socket",
                "FAIL",
                f"{fact} for {user_name(os.geteuid())}, but {user} cannot use it: the socket "
                f"is {describe(sock)} ({accounts.why_not(user, sock, 6) or 'closed to it'})",
                f"{accounts.fix_for(user, sock, 6) or 'the socket group'} (install.sh adds "
                f"{user} to the docker group)",
                str(Code.DOCKER_UNAVAILABLE),
            )
    return Check("docker-socket", "OK", f"{fact} for {user}")


def check_compose(run: Run) -> Check:
    cfg = run.config
    env = docker_env(cfg.docker, StateDir(cfg.state_dir).docker_dir)
    result = runner.run(
        (cfg.docker.binary, "compose", "version", "--short"),
        env=env,
        timeout=cfg.docker.command_timeout_s,
    )
    return Check("compose", "OK", f"docker compose {result.stdout.strip()}")


def check_timer(run: Run) -> Check:
    found = _timer()
    run.timer_status = found.status  # last-tick follows it where systemd does not run
    return found


def _timer() -> Check:
    units = unit_adapter.read()
    if isinstance(units, unit.NoBus):  # systemd runs, this user cannot ask it
        return units.check("timer", user_name(os.geteuid()), TIMER_UNIT)
    if units is not None:  # systemd runs: the timer's own state (enabled, waiting or not)
        return unit.timer_check("timer", units)
    try:
        result = runner.run(
            ("systemctl", "is-enabled", TIMER_UNIT),
            env=runner.base_env(),
            timeout=30,
            check=False,
        )
    except DeployError as err:
        if err.code is not Code.COMMAND_NOT_FOUND:
            raise
        return Check(
            "timer",
            "WARN",
            f"systemctl is not installed, so {TIMER_UNIT} cannot be asked about",
            "that this box runs systemd; without it nothing starts the agent's ticks",
        )
    words = f"{result.stdout}\n{result.stderr}".strip()
    return checks.timer_check("timer", TIMER_UNIT, result.returncode, words)


def check_last_tick(run: Run) -> Check:
    """The unit's last tick as systemd saw it (a failed one fails doctor, whoever runs it)."""
    units = unit_adapter.read()
    if isinstance(units, unit.NoBus):
        return units.check("last-tick", user_name(os.geteuid()), f"{unit.SERVICE}'s last tick")
    if units is None and run.timer_status not in (None, "OK"):  # not an OK beside FAIL timer
        return checks.skipped("last-tick", "timer", run.timer_status)
    if units is None:
        return Check("last-tick", "OK", "systemd does not run here: no unit to ask")
    when = rfc3339(units.service.exited_at, "seconds") if units.service.exited_at else ""
    return unit.service_check("last-tick", units, when)


def check_state_dir(run: Run) -> Check:
    """Entries in the state dir the service user does not own (a command run as root)."""
    state_dir, user = run.config.state_dir, run.config.service_user
    poisoned = owner.poisoned_error(state_dir, user)
    if poisoned is not None:
        return checks.from_error("state-dir", poisoned)
    return Check(
        "state-dir",
        "OK",
        f"{state_dir}: every entry belongs to {owner.owner_name(state_dir, user)}",
    )


def check_dropin(run: Run) -> Check:
    if run.config.transport == "plain":
        if DROPIN.is_file():  # install.sh --transport ziti once put it there
            return Check(
                "run-host-dropin",
                "FAIL",
                f"{DROPIN} is present with transport plain: it runs ziti-edge-tunnel in "
                "run-host mode (no intercepts, no DNS for them), and transport plain dials "
                "tenancy and OpenBao through the tunneler's intercepts",
                fixes.remove_run_host_dropin(),
            )
        return Check(
            "run-host-dropin",
            "OK",
            f"transport plain: no run-host drop-in at {DROPIN} (the tunneler's intercepts "
            "need its run mode)",
        )
    if DROPIN.is_file():
        return Check("run-host-dropin", "OK", f"{DROPIN} is present")
    return Check(
        "run-host-dropin",
        "WARN",
        f"{DROPIN} is missing: the packaged ziti-edge-tunnel unit's ExecStartPre may fail "
        "with 203/EXEC and the tunneler never start",
        fixes.install_run_host_dropin(),
    )
