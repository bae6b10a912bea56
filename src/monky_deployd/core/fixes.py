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


def state_chown(user: str, group: str, state_dir: str) -> str:
    """STATE_UNWRITABLE (entries another account owns): the state dir back to its account."""
    return f"`chown -R {user}:{group} {state_dir}`"


def identity_access(directory: str) -> str:
    """IDENTITY_UNREADABLE on a box with the package: its helper on the identity's directory."""
    return f"`{IDENTITY_ACCESS} {directory}`"


# code -> the hint printed on a box where everything is where the package puts it
DOCUMENTED: dict[Code, str] = {
    Code.STATE_UNWRITABLE: state_chown(SERVICE_USER, SERVICE_USER, STATE_DIR),
    Code.IDENTITY_UNREADABLE: identity_access(IDENTITY_DIR),
}
