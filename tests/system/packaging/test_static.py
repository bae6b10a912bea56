"""Packaging checks that need no container: shell gates, unit files, the example config, flags."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from monky_deployd.config import TENANCY_INTERCEPT_PORT, parse
from tests.system.debian import REPO

PACKAGING = REPO / "packaging"
SYSTEMD = PACKAGING / "systemd"
UNITS = [SYSTEMD / "monky-deployd.service", SYSTEMD / "monky-deployd.timer"]
DROPIN = SYSTEMD / "ziti-edge-tunnel.service.d" / "10-monky-run-host.conf"
INSTALL_SH = PACKAGING / "install.sh"
# The exposure score recorded in docs/packaging.md; a change that loosens the unit fails here.
MAX_EXPOSURE = 1.5

# The packaged ziti-edge-tunnel unit as OpenZiti ships it (ExecStartPre= runs a helper script).
ZITI_UNIT = """[Unit]
Description=Ziti Edge Tunnel
After=network-online.target

[Service]
Type=simple
Environment="ZITI_IDENTITY_DIR=/opt/openziti/etc/identities" "ZITI_VERBOSE=info"
EnvironmentFile=-/opt/openziti/etc/ziti-edge-tunnel.env
User=ziti
UMask=0007
AmbientCapabilities=CAP_NET_ADMIN
ExecStartPre=/opt/openziti/bin/ziti-edge-tunnel.sh
ExecStart=/opt/openziti/bin/ziti-edge-tunnel run --identity-dir=${ZITI_IDENTITY_DIR}
Restart=always

[Install]
WantedBy=multi-user.target
"""


def shell_scripts() -> list[Path]:
    found = set(PACKAGING.rglob("*.sh")) | set((REPO / "scripts").glob("*.sh"))
    found |= {PACKAGING / "debian" / n for n in ("postinst", "prerm", "postrm")}
    return sorted(found)


def _tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is not installed (scripts/docker-up.sh installs it)"
    return path


@pytest.mark.parametrize("script", shell_scripts(), ids=lambda p: str(p.relative_to(REPO)))
def test_shell_script_parses_and_is_shellcheck_clean(script: Path) -> None:
    first = script.read_text().splitlines()[0]
    shell = "bash" if "bash" in first else "sh"
    syntax = subprocess.run([shell, "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    check = subprocess.run(
        [_tool("shellcheck"), "-S", "warning", str(script)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout


def _unit_root(tmp_path: Path) -> Path:
    """A root with the host's systemd units, a stub agent binary and our units installed."""
    root = tmp_path / "root"
    shutil.copytree("/lib/systemd/system", root / "lib/systemd/system", symlinks=True)
    (root / "usr/bin").mkdir(parents=True)
    stub = root / "usr/bin/monky-deployd"
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    for unit in UNITS:
        shutil.copy(unit, root / "lib/systemd/system" / unit.name)
    return root


def test_units_verify_clean(tmp_path: Path) -> None:
    root = _unit_root(tmp_path)
    proc = subprocess.run(
        [_tool("systemd-analyze"), "verify", "--man=no", f"--root={root}"]
        + [f"/lib/systemd/system/{u.name}" for u in UNITS],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and proc.stderr.strip() == "", proc.stderr


def test_service_exposure_score_is_recorded_and_held(tmp_path: Path) -> None:
    root = _unit_root(tmp_path)
    proc = subprocess.run(
        [
            _tool("systemd-analyze"),
            "security",
            "--offline=true",
            f"--root={root}",
            "monky-deployd.service",
        ],
        capture_output=True,
        text=True,
    )
    match = re.search(r"Overall exposure level for monky-deployd\.service: ([0-9.]+)", proc.stdout)
    assert match, proc.stdout + proc.stderr
    score = float(match.group(1))
    assert score <= MAX_EXPOSURE
    doc = (REPO / "docs/packaging.md").read_text()
    assert f"exposure {match.group(1)}" in doc, "docs/packaging.md must state the measured score"


def test_run_host_dropin_clears_the_failing_exec_start_pre(tmp_path: Path) -> None:
    """R15: the packaged ExecStartPre helper not executable by the unit (203/EXEC on env-qa-02)
    makes the unit fail; the drop-in removes it and runs run-host."""
    root = tmp_path / "root"
    shutil.copytree("/lib/systemd/system", root / "lib/systemd/system", symlinks=True)
    (root / "lib/systemd/system/ziti-edge-tunnel.service").write_text(ZITI_UNIT)
    bindir = root / "opt/openziti/bin"
    bindir.mkdir(parents=True)
    (bindir / "ziti-edge-tunnel").write_text("#!/bin/sh\n")
    (bindir / "ziti-edge-tunnel").chmod(0o755)
    (bindir / "ziti-edge-tunnel.sh").write_text("#!/bin/sh\n")
    (bindir / "ziti-edge-tunnel.sh").chmod(0o644)  # the env-qa-02 state
    verify = [_tool("systemd-analyze"), "verify", "--man=no", f"--root={root}"]
    before = subprocess.run([*verify, "ziti-edge-tunnel.service"], capture_output=True, text=True)
    assert before.returncode != 0 and "ziti-edge-tunnel.sh" in before.stderr
    dropins = root / "etc/systemd/system/ziti-edge-tunnel.service.d"
    dropins.mkdir(parents=True)
    shutil.copy(DROPIN, dropins)
    after = subprocess.run([*verify, "ziti-edge-tunnel.service"], capture_output=True, text=True)
    assert after.returncode == 0 and after.stderr.strip() == "", after.stderr
    lines = [ln for ln in DROPIN.read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines == [
        "[Service]",
        "ExecStartPre=",
        "ExecStart=",
        "ExecStart=/opt/openziti/bin/ziti-edge-tunnel run-host --verbose=${ZITI_VERBOSE} "
        "--identity-dir=${ZITI_IDENTITY_DIR}",
    ]


@pytest.mark.parametrize("unit", [*UNITS, DROPIN], ids=lambda p: p.name)
def test_every_unit_directive_is_commented(unit: Path) -> None:
    """Each directive sits in a block of consecutive lines that starts with a comment."""
    block_has_comment = False
    for lineno, line in enumerate(unit.read_text().splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("["):
            block_has_comment = False
        elif stripped.startswith("#"):
            block_has_comment = True
        else:
            assert block_has_comment, f"{unit.name}:{lineno} `{stripped}` has no comment saying why"


def test_timer_cadence_is_sixty_seconds_after_the_previous_run() -> None:
    timer = (SYSTEMD / "monky-deployd.timer").read_text()
    for directive in ("OnUnitInactiveSec=60s", "OnBootSec=60s"):
        assert re.search(rf"^{re.escape(directive)}$", timer, re.M), directive
    # Re-armed by every daemon-reload (an extra tick), or ticking < 60 s after the previous
    # tick / blocking the first tick through the stamp file (tests/system/test_systemd.py).
    for directive in ("OnActiveSec=", "OnCalendar=", "Persistent="):
        assert not re.search(rf"^{re.escape(directive)}", timer, re.M), directive
    assert re.search(r"^RandomizedDelaySec=\d+s$", timer, re.M)
    service = (SYSTEMD / "monky-deployd.service").read_text()
    for directive in (
        "Type=oneshot",
        "User=monky-deployd",
        "ExecStart=/usr/bin/monky-deployd apply --once",
    ):
        assert re.search(rf"^{re.escape(directive)}$", service, re.M), directive


def test_example_config_is_valid_and_uses_the_intercept_port() -> None:
    data = yaml.safe_load((PACKAGING / "config.example.yaml").read_text())
    cfg = parse(data, "config.example.yaml")
    assert cfg.tenancy.port == TENANCY_INTERCEPT_PORT == 443
    assert re.search(r"^DEPLOYD_TENANCY_PORT=443$", INSTALL_SH.read_text(), re.M)


def test_install_sh_own_variables_are_deployd_prefixed() -> None:
    """R16: the script's globals are DEPLOYD_*; os-release is only read inside a subshell."""
    text = INSTALL_SH.read_text()
    globals_ = re.findall(r"^([A-Za-z_][A-Za-z0-9_]*)=", text, re.M)
    assert globals_ and all(name.startswith("DEPLOYD_") for name in globals_), globals_
    func = re.search(r"^os_release_value\(\) \{.*?^\}", text, re.M | re.S)
    assert func, "os_release_value() missing"
    body = func.group(0).splitlines()[1:-1]
    assert next(ln.strip() for ln in body if not ln.strip().startswith("#")) == "("
    outside = text.replace(func.group(0), "")
    assert not re.search(r"(^|[;&|]\s*)(\.|source)\s+/etc/os-release", outside, re.M)


def test_install_sh_help_names_every_flag() -> None:
    proc = subprocess.run(["bash", str(INSTALL_SH), "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for flag in (
        "--token",
        "--source",
        "--base-url",
        "--version",
        "--env",
        "--identity-jwt",
        "--identity-file",
        "--bootstrap-file",
        "--docker-data-root",
        "--help",
        "--insecure-http",
        "SHA256SUMS",
        "MONKY_DEPLOYD_TOKEN",
        "MONKY_DEPLOYD_SOURCE",
        "MONKY_DEPLOYD_BASE_URL",
    ):
        assert flag in proc.stdout, flag


def test_install_sh_token_reaches_only_the_curl_config_file() -> None:
    """R18 as text: no header on a curl command line; the token variable is read only where it is
    checked and where printf (a builtin) writes it into the 0600 config file."""
    text = INSTALL_SH.read_text()
    code = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    curl_lines = [ln for ln in code if re.search(r"\bcurl\s", ln)]
    assert curl_lines
    assert not [ln for ln in curl_lines if re.search(r"\s(-H|--header)\b", ln)], curl_lines
    uses = [ln.strip() for ln in code if "$DEPLOYD_TOKEN" in ln or "${DEPLOYD_TOKEN" in ln]
    allowed = (
        "DEPLOYD_TOKEN=",
        "--token)",
        'case "$DEPLOYD_TOKEN"',
        'if [[ -n "$DEPLOYD_TOKEN"',
        'local escaped="${DEPLOYD_TOKEN',
    )
    assert all(u.startswith(allowed) for u in uses), uses
    assert re.search(r"^unset MONKY_DEPLOYD_TOKEN$", text, re.M)


def test_install_sh_package_downloads_are_https_only_without_the_flag() -> None:
    text = INSTALL_SH.read_text()
    assert "proto='=https'" in text and '--proto "$proto"' in text
    assert "'=https,http'" in text.split("((DEPLOYD_INSECURE_HTTP)) && proto=", 1)[1][:20]
    for name in (
        "--base-url",
        *(f"MONKY_DEPLOYD_{v}_URL" for v in ("DOCKER_APT", "ZITI_APT", "ZITI_KEY")),
    ):
        assert re.search(rf"^  require_https {re.escape(name)} ", text, re.M), name
