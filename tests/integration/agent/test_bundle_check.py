"""``monky-deployd bundle check`` in process (issue 42): the real parser, the real compose CLI
(``docker compose config``: no engine is asked), real files. The docs' example bundles (admitted,
refused) with text and JSON output; signatures with ``--trust``; usage faults exit 2; no engine
at all still gives the verdict (and says what was not judged); no docker CLI is
COMMAND_NOT_FOUND (exit 1); a ``read_only_files`` entry that is a directory allows nothing."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from monky_deployd import cli
from monky_deployd.adapters import signatures
from monky_deployd.agent import policy as performed
from monky_deployd.core.admission import trust
from monky_deployd.core.admission.trustcfg import keyid

pytestmark = pytest.mark.skipif(shutil.which("docker") is None, reason="needs the docker CLI")

DOCS = Path(__file__).resolve().parents[3] / "docs" / "examples"
POLICY = DOCS / "box-policy.yaml"


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = cli.main(["bundle", "check", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_admitted_example_passes(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = check(capsys, "--policy", str(POLICY), str(DOCS / "bundle-admitted.json"))
    lines = out.splitlines()
    assert rc == 0, out
    assert lines[0] == "ADMITTED: revision bundle-check of project shop passes"
    assert f"note: {performed.OFFLINE}" in lines
    assert "note: signatures not verified (no --trust)" in lines


def test_the_refused_example_names_each_violation_with_its_rewrite(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bundle = str(DOCS / "bundle-refused.json")
    rc, out, _ = check(capsys, "--policy", str(POLICY), "--revision", "r42", bundle)
    assert rc == 5, out
    lines = out.splitlines()
    assert lines[0].startswith("REFUSED BUNDLE_RELATIVE_BIND (bundle): the compose file of ")
    body = [ln for ln in lines if ln.startswith("  ")]
    assert len(body) == 2 and all(ln.startswith("  BUNDLE_RELATIVE_BIND ") for ln in body)
    assert "./nginx.conf is not an absolute host path" in body[0] and "content:" in body[0]
    assert "~/uploads starts with ~" in body[1]
    rc, out, _ = check(capsys, "--policy", str(POLICY), "--format", "json", bundle)
    found = json.loads(out)
    assert rc == 5
    assert (found["verdict"], found["code"], found["stage"]) == (
        "refused",
        "BUNDLE_RELATIVE_BIND",
        "bundle",
    )
    assert [v["key"] for v in found["violations"]] == [
        "services.web.volumes[0]",
        "services.web.volumes[1]",
    ]
    assert all(v["rewrite"] and v["line"].endswith(f"{v['rewrite']})") for v in found["violations"])


def write_bundle(tmp: Path, compose: dict[str, Any], **more: Any) -> Path:
    raw = {"project": "shop", "compose": yaml.safe_dump(compose), "manifest": [], **more}
    path = tmp / "bundle.json"
    path.write_text(json.dumps(raw))
    return path


def test_past_the_bundle_stage_the_policy_judges_compose_s_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    compose = {
        "services": {
            "web": {
                "image": "busybox",
                "env_file": ["web.env"],
                "volumes": ["/etc/localtime:/etc/localtime:ro", "/srv/shop/data:/data"],
                "secrets": ["db"],
                "cap_add": ["NET_ADMIN"],
            },
            "worker": {"build": {"context": ".", "cache_from": ["busybox:cache"]}},
        },
        "secrets": {"db": {"file": "./db.txt"}},
    }
    path = write_bundle(tmp_path, compose)
    rc, out, _ = check(capsys, "--policy", str(POLICY), "--format", "json", str(path))
    found = json.loads(out)
    assert rc == 5 and found["stage"] == "policy", out
    by_key = {(v["service"], v["key"]): v for v in found["violations"]}
    assert set(by_key) == {
        ("web", "env_file"),
        ("web", "secrets"),
        ("web", "cap_add"),
        ("worker", "build"),
    }, by_key  # /etc/localtime is allowed (read_only_files), /srv/shop under bind_roots
    codes = {(v["service"], v["key"], v["code"]) for v in found["violations"]}
    assert {c for s, k, c in codes if (s, k) == ("worker", "build")} == {
        "BUNDLE_BUILD_ONLY",
        "POLICY_BUILD",  # issue 45: a build needs the box's build allowance
    }
    assert by_key[("web", "cap_add")]["allow_with"] == "policy.services.web.cap_add: [NET_ADMIN]"
    assert by_key[("web", "secrets")]["rewrite"].startswith("`secrets.<name>.environment")
    assert found["code"] == "POLICY_PROTECTED_PATH"  # the secret's file: in the state dir


def test_signatures_are_verified_with_trust(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key, other = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    raw: dict[str, Any] = json.loads((DOCS / "bundle-admitted.json").read_text())
    raw["release"] = {"version": 3, "expires": "2099-01-01T00:00:00Z"}
    message = signatures.canonical(trust.payload("env-ci-01", "r7", raw))
    public = signatures.public_raw(key)
    sig = base64.b64encode(signatures.sign(key, message)).decode()
    raw["signatures"] = [{"keyid": keyid(public), "sig": sig}]
    bundle = tmp_path / "signed.json"
    bundle.write_text(json.dumps(raw))

    def trust_file(k: Ed25519PrivateKey) -> str:
        path = tmp_path / "trust.yaml"
        pub = base64.b64encode(signatures.public_raw(k)).decode()
        path.write_text(yaml.safe_dump({"trust": {"keys": [pub]}}))
        return str(path)

    args = ("--policy", str(POLICY), "--env", "env-ci-01", "--revision", "r7", str(bundle))
    rc, out, _ = check(capsys, "--trust", trust_file(key), *args)
    assert rc == 0, out
    assert any(ln.startswith("note: signed by 1 trusted key(s)") for ln in out.splitlines())
    rc, out, _ = check(capsys, "--trust", trust_file(other), *args)
    assert rc == 5 and out.startswith("REFUSED BUNDLE_UNTRUSTED (bundle): "), out


def test_usage_faults_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    admitted = str(DOCS / "bundle-admitted.json")
    rc, _, err = check(capsys, "--policy", str(POLICY), str(tmp_path / "absent.json"))
    assert rc == 2 and "cannot read the bundle" in err
    (tmp_path / "nojson.json").write_text("{")
    rc, _, err = check(capsys, "--policy", str(POLICY), str(tmp_path / "nojson.json"))
    assert rc == 2 and "is not JSON" in err
    (tmp_path / "p.yaml").write_text("allow: {}\n")
    rc, _, err = check(capsys, "--policy", str(tmp_path / "p.yaml"), admitted)
    assert rc == 2 and "holds no policy: section" in err
    (tmp_path / "p.yaml").write_text("policy: {allow: {bind_roots: [/tmp/x]}}\n")
    rc, _, err = check(capsys, "--policy", str(tmp_path / "p.yaml"), admitted)
    assert rc == 2 and "PrivateTmp" in err
    rc, _, err = check(capsys, "-c", str(tmp_path / "missing.yaml"), admitted)
    assert rc == 2 and "missing.yaml" in err


def config(tmp: Path, **docker: str) -> str:
    path = tmp / "config.yaml"
    cfg = {
        "env": "env-ci-01",
        "state_dir": str(tmp / "state"),
        "docker": docker,
        "policy": yaml.safe_load(POLICY.read_text())["policy"],
    }
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_no_engine_still_gives_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config(tmp_path, host=f"unix://{tmp_path}/no-engine.sock")
    rc, out, _ = check(capsys, "-c", cfg, str(DOCS / "bundle-admitted.json"))
    assert rc == 0, out
    assert f"note: {performed.OFFLINE}" in out.splitlines()


def test_no_docker_cli_is_command_not_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config(tmp_path, binary=str(tmp_path / "no-docker"))
    rc, out, err = check(capsys, "-c", cfg, str(DOCS / "bundle-admitted.json"))
    assert (rc, out) == (1, "")
    assert "COMMAND_NOT_FOUND" in err and "no-docker" in err


def test_a_read_only_files_entry_that_is_not_a_file_allows_nothing(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    found = performed._files([tmp_path / "dir", tmp_path / "missing", tmp_path / "link"])
    assert found == {str(tmp_path / "link"), str(tmp_path / "file")}


def test_a_host_string_compose_and_the_judge_read_apart_is_refused_before_publishing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 45: ``$$`` in a bind source (compose's escape: the judge would read ``p$$``, ``up``
    ``p$``) and U+0085 in a volume option; a ``$`` in a container's command passes."""
    compose = {
        "services": {
            "web": {
                "image": "busybox",
                "command": ["sh", "-c", "echo $$HOME"],
                "volumes": ["/srv/shop/p$$/x:/x:ro", "data:/data"],
            }
        },
        "volumes": {"data": {"labels": {"k": "v"}, "name": "shop_d\x85ata"}},
    }
    path = write_bundle(tmp_path, compose)
    rc, out, _ = check(capsys, "--policy", str(POLICY), "--format", "json", str(path))
    found = json.loads(out)
    assert rc == 5 and found["code"] == "POLICY_HOST_STRING", out
    assert {(v["key"], v["code"]) for v in found["violations"]} >= {
        ("services.web.volumes.source", "POLICY_HOST_STRING"),
        ("volumes.data.name", "POLICY_HOST_STRING"),
    }
    compose["services"]["web"]["volumes"] = ["/srv/shop/p/x:/x:ro"]  # type: ignore[index]
    del compose["volumes"]
    rc, out, _ = check(capsys, "--policy", str(POLICY), str(write_bundle(tmp_path, compose)))
    assert rc == 0, out
