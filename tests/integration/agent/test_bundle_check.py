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
from monky_deployd.core.signing import trust
from monky_deployd.core.signing.trustcfg import keyid

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
    binds = [ln for ln in body if ln.startswith("  BUNDLE_RELATIVE_BIND (bundle) ")]
    assert len(binds) == 2, body
    assert "./nginx.conf is not an absolute host path" in binds[0] and "content:" in binds[0]
    assert "~/uploads starts with ~" in binds[1]
    # the policy stage judged the rest in the same run (issue 47), each line its stage
    assert [ln.split()[:2] for ln in body[2:]] == [
        ["POLICY_PROTECTED_PATH", "(policy)"],
        ["POLICY_SOURCE", "(policy)"],
        ["BUNDLE_BUILD_ONLY", "(policy)"],
    ], body
    rc, out, _ = check(capsys, "--policy", str(POLICY), "--format", "json", bundle)
    found = json.loads(out)
    assert rc == 5
    assert (found["verdict"], found["code"], found["stage"], found["stages"]) == (
        "refused",
        "BUNDLE_RELATIVE_BIND",
        "bundle",
        ["bundle", "policy"],
    )
    assert [(v["stage"], v["key"]) for v in found["violations"]] == [
        ("bundle", "services.web.volumes[0]"),
        ("bundle", "services.web.volumes[1]"),
        ("policy", "secrets"),
        ("policy", "env_file"),
        ("policy", "build"),
    ]
    assert all(v["rewrite"] and v["line"].endswith(f"{v['rewrite']})") for v in found["violations"])


def write_bundle(tmp: Path, compose: dict[str, Any], **more: Any) -> Path:
    raw = {"project": "shop", "compose": yaml.safe_dump(compose), "manifest": [], **more}
    path = tmp / "bundle.json"
    path.write_text(json.dumps(raw))
    return path


def test_compose_s_warnings_on_an_admitted_bundle_are_notes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`$uri` in a config's content (an nginx config, written without `$$`) is read blank by
    compose: admitted, as every box reads it, and said (before: nothing said at all)."""
    compose = {
        "services": {"web": {"image": "busybox", "configs": [{"source": "site"}]}},
        "configs": {"site": {"content": "try_files $uri /index.html;"}},
    }
    rc, out, _ = check(capsys, "--policy", str(POLICY), str(write_bundle(tmp_path, compose)))
    assert rc == 0, out
    said = 'The "uri" variable is not set. Defaulting to a blank string.'
    assert f"note: compose warns (admitted as it reads): {said}" in out.splitlines(), out
    rc, out, _ = check(
        capsys, "--policy", str(POLICY), "--format", "json", str(tmp_path / "bundle.json")
    )
    assert rc == 0 and f"compose warns (admitted as it reads): {said}" in json.loads(out)["notes"]


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
    # a build with no image: BUNDLE_BUILD_ONLY alone (no allowance could let a box build it,
    # so POLICY_BUILD's `build: true` would be advice that cannot work)
    assert {c for s, k, c in codes if (s, k) == ("worker", "build")} == {"BUNDLE_BUILD_ONLY"}
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


def verdict_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    try:
        rc = cli.main(["bundle", "check", "--format", "json", *args])
    except SystemExit as exc:  # the parser's own refusal
        rc = int(str(exc.code))
    found: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert found["exit"] == rc, found
    return rc, found


def test_every_exit_prints_its_json_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 47: a pipeline step that reads stdout as JSON gets JSON for every exit, and every
    usage fault exits 2 (a bad --revision, an empty policy:, the parser's own)."""
    admitted = str(DOCS / "bundle-admitted.json")
    (tmp_path / "empty.yaml").write_text("policy:\n")
    usage = [
        ("--policy", str(POLICY), str(tmp_path / "absent.json")),
        ("--policy", str(POLICY), "--revision", "a/b", admitted),
        ("--policy", str(tmp_path / "empty.yaml"), admitted),
        ("--policy", str(POLICY), "--no-such-flag", admitted),
    ]
    for args in usage:
        rc, found = verdict_json(capsys, *args)
        assert (rc, found["verdict"]) == (2, "usage"), (args, found)
        assert found["message"] and found["violations"] == [], found
    assert "not a revision" in verdict_json(capsys, *usage[1])[1]["message"]
    assert "policy: {}" in verdict_json(capsys, *usage[2])[1]["message"]
    cfg = config(tmp_path, binary=str(tmp_path / "no-docker"))
    rc, found = verdict_json(capsys, "-c", cfg, admitted)
    assert (rc, found["verdict"]) == (1, "unchecked") and "COMMAND_NOT_FOUND" in found["message"]
    rc, found = verdict_json(capsys, "--policy", str(POLICY), admitted)
    assert (rc, found["verdict"], found["stages"]) == (0, "admitted", [])


def test_a_closed_pipe_ends_the_output_quietly(tmp_path: Path) -> None:
    """``bundle check ... | head -1``: the reader goes, no traceback, the verdict's status."""
    import subprocess

    from monky_deployd_testkit.lab import CLI

    argv = (*CLI, "bundle", "check", "--policy", str(POLICY), str(DOCS / "bundle-refused.json"))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before a byte is read: every write meets a closed pipe
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 5, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_policy_over_config_keeps_the_config_s_box(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``-c`` and ``--policy`` together: the policy is --policy's, the box (its state dir,
    a protected path) is -c's config.yaml's (documented in --help and docs/bundle-check.md)."""
    from monky_deployd_testkit.lab import bind_root

    root = bind_root("bundle-check")
    try:
        state = root / "state"
        compose = {"services": {"web": {"image": "x", "volumes": [f"{state}:/s"]}}}
        path = write_bundle(tmp_path, compose)
        cfg = tmp_path / "config.yaml"
        cfg.write_text(yaml.safe_dump({"env": "env-ci-01", "state_dir": str(state)}))
        policy = tmp_path / "open.yaml"
        policy.write_text(yaml.safe_dump({"policy": {"allow": {"bind_roots": [str(root)]}}}))
        rc, found = verdict_json(capsys, "-c", str(cfg), "--policy", str(policy), str(path))
        assert rc == 5 and [v["code"] for v in found["violations"]] == ["POLICY_PROTECTED_PATH"]
        assert str(state) in found["violations"][0]["why"]
        rc, found = verdict_json(capsys, "--policy", str(policy), str(path))
        assert rc == 0, found  # without -c: the default box, whose state dir is elsewhere
    finally:
        shutil.rmtree(root)


def test_every_stage_that_can_run_reports_and_the_box_s_limits_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bundle over max_bundle_bytes (a box refuses it unread), a relative bind and a policy
    fault: all three in one run, each at its stage; a render refusal names the template and
    how to fix it, and says the policy was not judged."""
    compose = {"services": {"web": {"image": "x", "volumes": ["./d:/d"], "cap_add": ["NET_ADMIN"]}}}
    path = write_bundle(tmp_path, compose, env_template="# " + "x" * 2000 + "\n")
    cfg = tmp_path / "small.yaml"
    cfg.write_text(yaml.safe_dump({"env": "env-ci-01", "max_bundle_bytes": 1024}))
    rc, found = verdict_json(capsys, "-c", str(cfg), str(path))
    assert rc == 5 and found["stages"] == ["bundle", "bundle", "policy"], found
    assert [v["code"] for v in found["violations"]] == [
        "TENANCY_RESPONSE_TOO_LARGE",
        "BUNDLE_RELATIVE_BIND",
        "POLICY_REFUSED",
    ], found
    # just under the cap: admitted by size, and said to be close
    small = json.dumps({"project": "shop", "compose": yaml.safe_dump(compose), "manifest": []})
    pad = "# " + "x" * (1000 - len(small) - len(json.dumps("")) - len(',"env_template":') - 4)
    path = write_bundle(tmp_path, compose, env_template=pad + "\n")
    rc, found = verdict_json(capsys, "-c", str(cfg), str(path))
    assert "TENANCY_RESPONSE_TOO_LARGE" not in [v["code"] for v in found["violations"]], found
    assert any(n.startswith("the bundle is ") and "within 5%" in n for n in found["notes"]), found
    path = write_bundle(tmp_path, compose, env_template="DOCKER_SOCK=/x\n")
    rc, found = verdict_json(capsys, "--policy", str(POLICY), str(path))
    render = [v for v in found["violations"] if v["stage"] == "render"]
    assert [(v["code"], v["key"]) for v in render] == [("ENV_COMPOSE_SETTING", "env_template")]
    assert "rename the variable" in render[0]["rewrite"] and "prefix" in render[0]["why"]
    # a name alone refused: the policy judges the rest of the template in the same run
    note = "policy: judged without the template's lines of DOCKER_SOCK (render refused them)"
    assert note in found["notes"] and "policy" in found["stages"], found
    # a variable with no value: the policy judges with a stand-in, as it will once the
    # manifest has the entry (before: "not judged", one more round to learn the policy's faults)
    path = write_bundle(tmp_path, compose, env_template="A=${NOT_IN_THE_MANIFEST}\n")
    rc, found = verdict_json(capsys, "--policy", str(POLICY), str(path))
    assert [v["code"] for v in found["violations"] if v["stage"] == "render"] == ["ENV_INCOMPLETE"]
    note = "policy: judged with a stand-in for NOT_IN_THE_MANIFEST (no value: render refused them)"
    assert note in found["notes"] and "policy" in found["stages"], found
    # both: each render fault is named, and the policy still judges
    both = "DOCKER_SOCK=/x\nA=${NOT_IN_THE_MANIFEST}\n"
    rc, found = verdict_json(
        capsys, "--policy", str(POLICY), str(write_bundle(tmp_path, compose, env_template=both))
    )
    render = [v["code"] for v in found["violations"] if v["stage"] == "render"]
    assert render == ["ENV_COMPOSE_SETTING", "ENV_INCOMPLETE"], found
    note = (
        "policy: judged without the template's lines of DOCKER_SOCK (render refused them) and "
        "with a stand-in for NOT_IN_THE_MANIFEST (no value: render refused them)"
    )
    assert note in found["notes"] and "policy" in found["stages"], found
    # a template compose cannot read: nothing to judge with
    path = write_bundle(tmp_path, compose, env_template="A='unterminated\n")
    rc, found = verdict_json(capsys, "--policy", str(POLICY), str(path))
    assert [v["code"] for v in found["violations"] if v["stage"] == "render"] == [
        "ENV_TEMPLATE_INVALID"
    ], found
    assert "policy: not judged (the .env could not be rendered)" in found["notes"], found


def test_compose_s_own_error_is_shown_whole_naming_the_bundle_s_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Compose cannot read the file: its own message whole (not the user's line alone), the
    file named as the bundle's (not /dev/fd/N), its warnings not shown as violations."""
    svc = {"image": "x", "command": "echo $(date)${", "environment": {"A": "${UNSET_47}"}}
    path = write_bundle(tmp_path, {"services": {"web": svc}})
    rc, found = verdict_json(capsys, "--policy", str(POLICY), str(path))
    assert rc == 5 and [v["code"] for v in found["violations"]] == ["POLICY_UNJUDGED"], found
    why = found["violations"][0]["why"]
    assert "invalid interpolation format" in why and "escape any $ with another $" in why, why
    assert "UNSET_47" not in why and "level=warning" not in found["message"]
    path = write_bundle(tmp_path, {"services": {"web": {"image": "x", "bogus_key_47": 1}}})
    rc, found = verdict_json(capsys, "--policy", str(POLICY), str(path))
    assert rc == 5 and "/dev/fd/" not in json.dumps(found), found
    assert "the bundle's compose file" in found["violations"][0]["why"], found
