"""The one command that mends a fault the same way on every box the package installed, for the
codes whose fix is a command: the hint the agent prints for that code, and the command
OPERATIONS.md's "what to check" cell for that code starts with (with the package's paths;
tests/repo/test_fixes.py holds the two together, tests/system/test_seats.py compares the hint
printed on a real box with the cell). PURE.
"""

from __future__ import annotations

from monky_deployd.core.errors import Code

SERVICE_USER = "monky-deployd"
STATE_DIR = "/var/lib/monky-deployd"
IDENTITY_DIR = "/opt/openziti/etc/identities"
# the package's R1 helper: ACLs for group ziti and the agent's user on the identity directory
# (its default ACL: a rewritten file inherits them) and on the files in it; owner, group and
# mode bits stay the tunneler's (ziti:ziti 0640)
IDENTITY_ACCESS = "/usr/lib/monky-deployd/identity-access"
TUNNELER = "ziti-edge-tunnel.service"
RUN_HOST_DROPIN = "/etc/systemd/system/ziti-edge-tunnel.service.d/10-monky-run-host.conf"


def state_chown(user: str, group: str, state_dir: str) -> str:
    """STATE_UNWRITABLE (entries another account owns): the state dir back to its account."""
    return f"`chown -R {user}:{group} {state_dir}`"


def identity_access(directory: str) -> str:
    """IDENTITY_UNREADABLE on a box with the package: its helper on the identity's directory."""
    return f"`{IDENTITY_ACCESS} {directory}`"


def remove_run_host_dropin() -> str:
    """transport plain with install.sh's run-host drop-in (for ziti) still in place: the
    tunneler back to its packaged run mode, whose intercepts and DNS plain transport dials."""
    return f"`rm {RUN_HOST_DROPIN} && systemctl daemon-reload && systemctl restart {TUNNELER}`"


RUN_HOST_DROPIN_SRC = "/usr/share/monky-deployd/ziti-edge-tunnel.service.d/10-monky-run-host.conf"


def install_run_host_dropin() -> str:
    """transport ziti without the run-host drop-in: the package's copy put in place (what
    install.sh does), the tunneler restarted with it."""
    return (
        f"`install -D -m 0644 {RUN_HOST_DROPIN_SRC} {RUN_HOST_DROPIN} && systemctl daemon-reload "
        f"&& systemctl restart {TUNNELER}`"
    )


def start_tunneler(installed: bool) -> str:
    """transport plain and an intercept name that does not resolve: the tunneler whose DNS
    answers it, started (``installed``: its unit file is there) or installed (OpenZiti's apt
    repository, which install.sh adds; its package enables the unit)."""
    if installed:
        return f"`systemctl enable --now {TUNNELER}`"
    return "`apt-get install ziti-edge-tunnel`"


def unresolved(dropin_present: bool, tunneler_installed: bool) -> str:
    """A service's name that does not resolve (transport plain: the tunneler's DNS answers the
    intercept names): its cause first, the run-host drop-in that turned the intercepts off;
    else the tunneler started, or installed."""
    return remove_run_host_dropin() if dropin_present else start_tunneler(tunneler_installed)


# code -> the hint printed on a box where everything is where the package puts it
DOCUMENTED: dict[Code, str] = {
    Code.STATE_UNWRITABLE: state_chown(SERVICE_USER, SERVICE_USER, STATE_DIR),
    Code.IDENTITY_UNREADABLE: identity_access(IDENTITY_DIR),
}
