"""The role says what install.sh says: the same config.yaml (keys and defaults, port 443), the same
package and SHA256SUMS URLs for both sources, and the version the code carries. The role side is
rendered by a real ansible-playbook run on localhost; the install.sh side by install.sh's own
functions (the script is sourced without its final `main "$@"` line, then `validate`,
`package_url`, `release_url` and `render_config` run in bash)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from monky_deployd import __version__
from monky_deployd.config import TENANCY_INTERCEPT_PORT, Config, parse
from tests.system.debian import REPO

ROLE = REPO / "ansible" / "roles" / "monky_deployd"
INSTALL_SH = REPO / "packaging" / "install.sh"
VENV_BIN = REPO / ".venv" / "bin"
GITEA_BASE = "https://gitea.cbs.tikali.net/monky/monky-deployd/releases/download"
ENV_ID = "env-qa-02"


def _role_render(tmp_path: Path, extra: dict[str, object]) -> tuple[dict[str, object], str]:
    """Template the role's config.yaml and evaluate its package URL with ansible-playbook."""
    out = tmp_path / "out"
    out.mkdir()
    playbook = tmp_path / "render.yml"
    playbook.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Render the role's config and URL",
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "vars_files": [str(ROLE / "defaults" / "main.yml")],
                    "tasks": [
                        {
                            "name": "Template config.yaml",
                            "ansible.builtin.template": {
                                "src": str(ROLE / "templates" / "config.yaml.j2"),
                                "dest": str(out / "config.yaml"),
                                "mode": "0600",
                            },
                        },
                        {
                            "name": "Write the package and checksum URLs",
                            "ansible.builtin.copy": {
                                "content": "{{ monky_deployd_deb_url }}\n"
                                "{{ monky_deployd_sha256sums_url }}",
                                "dest": str(out / "url"),
                                "mode": "0600",
                            },
                        },
                    ],
                }
            ]
        )
    )
    extra_file = tmp_path / "extra.json"
    extra_file.write_text(
        json.dumps(
            {"ansible_python_interpreter": sys.executable, "monky_deployd_env": ENV_ID, **extra}
        )
    )
    env = dict(
        os.environ,
        PATH=f"{VENV_BIN}:{os.environ.get('PATH', '')}",
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_LOCALHOST_WARNING="0",
        ANSIBLE_NOCOLOR="1",
    )
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            *("-i", "localhost,", "-e", f"@{extra_file}", str(playbook)),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return yaml.safe_load((out / "config.yaml").read_text()), (out / "url").read_text()


def _install_sh_render(source: str, version: str, arch: str) -> tuple[dict[str, object], str]:
    text = INSTALL_SH.read_text(encoding="utf-8")
    assert re.search(r'^main "\$@"$', text, re.M), 'install.sh no longer ends with main "$@"'
    script = (
        'source <(sed \'/^main "\\$@"$/d\' "$1")\n'
        f"DEPLOYD_ENV={ENV_ID}; DEPLOYD_VERSION={version}; DEPLOYD_SOURCE={source}\n"
        'DEPLOYD_BOOTSTRAP_FILE="$2"\n'
        "validate >&2\n"
        f"package_url {arch}; echo\n"
        "release_url SHA256SUMS; echo\n"
        "render_config\n"
    )
    grant = Path(os.environ.get("TMPDIR", "/tmp")) / f"monky-agree-grant-{os.getpid()}"
    grant.write_text("x\n")
    try:
        proc = subprocess.run(
            ["bash", "-c", script, "render", str(INSTALL_SH), str(grant)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        grant.unlink()
    assert proc.returncode == 0, proc.stderr
    url, sums, config = proc.stdout.split("\n", 2)
    return yaml.safe_load(config), f"{url}\n{sums}"


@pytest.mark.parametrize(
    ("source", "role_extra"),
    [
        ("gitlab", {}),
        ("gitea", {"monky_deployd_source": "gitea", "monky_deployd_base_url": GITEA_BASE}),
    ],
)
def test_role_and_install_sh_write_the_same_config_and_download_the_same_url(
    tmp_path: Path, source: str, role_extra: dict[str, object]
) -> None:
    role_cfg, role_url = _role_render(tmp_path, {"monky_deployd_deb_arch": "amd64", **role_extra})
    sh_cfg, sh_url = _install_sh_render(source, __version__, "amd64")
    assert role_cfg == sh_cfg
    assert role_url == sh_url
    deb_url, sums_url = role_url.split("\n")
    assert deb_url.endswith(f"/monky-deployd_{__version__}_amd64.deb")
    assert sums_url == deb_url.rsplit("/", 1)[0] + "/SHA256SUMS"  # beside it, as CI publishes
    # Both are accepted by the agent's own schema, with the tenancy intercept port.
    cfg = parse(role_cfg, "role config.yaml")
    assert cfg.tenancy.port == TENANCY_INTERCEPT_PORT == 443


def test_role_config_spells_out_every_default_the_schema_has_for_those_keys(
    tmp_path: Path,
) -> None:
    role_cfg, _ = _role_render(tmp_path, {"monky_deployd_deb_arch": "amd64"})
    written = parse(role_cfg, "role config.yaml")
    defaults = Config(env=ENV_ID)
    assert written == defaults


def test_role_defaults_agree_with_the_code() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["monky_deployd_tenancy_port"] == 443
    assert defaults["monky_deployd_version"] == __version__, (
        "bump monky_deployd_version in the role's defaults with __version__"
    )
    text = (ROLE / "defaults" / "main.yml").read_text()
    assert f'monky_deployd_base_url: "{GITEA_BASE}"' in text, "the documented gitea alternative"


def test_role_writes_the_trust_settings_the_agent_loads(tmp_path: Path) -> None:
    """Signed bundles (contract v1.3): the role's keys, threshold and accept_unsigned reach
    config.yaml's ``trust`` as the agent reads them (two keys: a rotation)."""
    keys = ["W2P//Jh+GuN0XRZ/8YNWJeqq98wn1V/wAnhutKXEogA=", "A" * 43 + "="]
    extra = {
        "monky_deployd_deb_arch": "amd64",
        "monky_deployd_trust_keys": keys,
        "monky_deployd_trust_accept_unsigned": True,
    }
    role_cfg, _ = _role_render(tmp_path, extra)
    trust = parse(role_cfg, "role config.yaml").trust
    assert trust.keys == keys and trust.threshold == 1 and trust.unsigned_ok
    assert len(trust.trusted) == 2
