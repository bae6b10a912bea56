"""What the agent's systemd unit hides from the agent, held to config_policy.HIDDEN_BY_UNIT (the
directories a ``bind_roots`` entry may not lie in: the agent would judge another directory than
the one the engine mounts).

The hidden directories are derived from the unit's own directives, as systemd.exec(5) defines
them: ``PrivateTmp=`` (/tmp, /var/tmp), ``ProtectHome=`` (/home, /root, /run/user),
``InaccessiblePaths=`` and ``TemporaryFileSystem=`` (their paths), ``PrivateDevices=`` (/dev, a
protected path already). A directive that hides a path and that this test does not know fails
it, so a new one is read here before it ships."""

from __future__ import annotations

from pathlib import Path

from monky_deployd.agent.policy import ALWAYS_PROTECTED
from monky_deployd.config_policy import HIDDEN_BY_UNIT

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "packaging" / "systemd" / "monky-deployd.service"
# directives of systemd.exec(5) that change what the service sees of the file system and that
# hide nothing the engine mounts from (read-only, or the service's own directories)
NOT_HIDING = {
    "ProtectSystem",  # read-only, not hidden
    "ReadWritePaths",
    "ReadOnlyPaths",
    "StateDirectory",
    "StateDirectoryMode",
    "PrivateMounts",  # mounts made inside the service stay inside it
    "ProtectKernelTunables",  # /proc/sys, /sys read-only (protected paths anyway)
    "ProtectKernelModules",
    "ProtectKernelLogs",
    "ProtectControlGroups",
    "ProtectClock",
    "ProtectHostname",
    "ProtectProc",  # /proc (a protected path)
    "ProcSubset",
}
FILE_SYSTEM_WORDS = ("Private", "Protect", "Paths", "FileSystem", "Directory", "ProcSubset")


def directives() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        found.setdefault(key.strip(), []).append(value.strip())
    return found


def yes(value: str) -> bool:
    return value.lower() not in ("no", "false", "0", "off", "")


def hidden_by_the_unit() -> dict[str, str]:
    hidden: dict[str, str] = {}
    for key, values in directives().items():
        for value in values:
            if key == "PrivateTmp" and yes(value):
                hidden |= {"/tmp": f"{key}={value}", "/var/tmp": f"{key}={value}"}
            elif key == "ProtectHome" and yes(value):  # yes, read-only, tmpfs: not the host's
                hidden |= {d: f"{key}={value}" for d in ("/home", "/root", "/run/user")}
            elif key in ("InaccessiblePaths", "TemporaryFileSystem"):
                for path in value.split():
                    hidden[path.lstrip("-+").split(":")[0]] = f"{key}={value}"
            elif key == "PrivateDevices" and yes(value):
                hidden["/dev"] = f"{key}={value}"
            else:
                assert key in NOT_HIDING or not any(w in key for w in FILE_SYSTEM_WORDS), (
                    f"{key}= in the unit may hide a directory from the agent: read it in "
                    "tests/repo/test_unit_hidden.py and config_policy.HIDDEN_BY_UNIT"
                )
    return hidden


def test_the_unit_hides_exactly_the_directories_config_refuses_as_bind_roots() -> None:
    hidden = hidden_by_the_unit()
    assert {"/tmp", "/var/tmp", "/home", "/root", "/run/user"} <= set(hidden)  # the unit today
    # what no bind mount may reach anyway (ALWAYS_PROTECTED: /dev) need not be listed twice
    wanted = {d: how for d, how in hidden.items() if d not in ALWAYS_PROTECTED}
    assert wanted == HIDDEN_BY_UNIT, (
        "config_policy.HIDDEN_BY_UNIT differs from what packaging/systemd/monky-deployd.service "
        f"hides from the agent: {wanted}"
    )
