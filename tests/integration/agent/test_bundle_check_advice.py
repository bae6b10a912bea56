"""``bundle check``'s advice works (issue 47), in process with the real parser and compose CLI:
over generated bundles mixing the classes of refusal the check knows, the author's loop (apply
every printed allowance to the policy, every printed rewrite to the bundle, check again) makes
each violation go away and adds no new one of the same kind; what no allowance permits says how
to write it instead. A path through a link (a root that is a link, ``/lib`` -> ``/usr/lib``) is
allowed by what is printed."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from monky_deployd import cli
from monky_deployd_testkit.lab import bind_root

pytestmark = pytest.mark.skipif(shutil.which("docker") is None, reason="needs the docker CLI")

# each class of refusal: the web service's keys, and the top-level keys it needs
CLASSES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "cap_add": ({"cap_add": ["NET_ADMIN"]}, {}),
    "pid": ({"pid": "host"}, {}),
    "ipc": ({"ipc": "host"}, {}),
    "privileged": ({"privileged": True}, {}),
    "security_opt": ({"security_opt": ["apparmor:unconfined"]}, {}),
    "devices": ({"devices": ["/dev/fuse:/dev/fuse"]}, {}),
    "sysctls": ({"sysctls": {"net.core.somaxconn": "1024"}}, {}),
    "cgroup_parent": ({"cgroup_parent": "x.slice"}, {}),
    "oom": ({"oom_score_adj": -500}, {}),
    "log": ({"logging": {"driver": "syslog"}}, {}),
    "bind": ({"volumes": ["{root}/data/a:/a"]}, {}),
    "link": ({"volumes": ["{root}/link/b:/b"]}, {}),
    "file": ({"volumes": ["/etc/hosts:/h:ro"]}, {}),
    "ext_volume": ({"volumes": ["ext:/e"]}, {"volumes": {"ext": {"external": True}}}),
    "ext_network": ({"networks": ["extnet"]}, {"networks": {"extnet": {"external": True}}}),
    "code": ({"volumes": ["./:/app"]}, {}),
    "one_file": ({"volumes": ["./nginx.conf:/etc/nginx/nginx.conf:ro"]}, {}),
    "conf_folder": ({"volumes": ["./conf.d:/etc/nginx/conf.d"]}, {}),
    "data": ({"volumes": ["./data:/var/lib/app"]}, {}),
    "etc_folder": ({"volumes": ["/etc/myapp-47:/etc/myapp"]}, {}),
    "two_folders": ({"volumes": ["./ha/config:/ha", "./mqtt/config:/mqtt"]}, {}),
    "dotdot": ({"volumes": ["../shared:/shared"]}, {}),
    "dev_bind": ({"volumes": ["/dev/serial/by-id:/dev/serial/by-id"]}, {}),
    "default": ({"volumes": ["${DATA_47:-{root}/data}/d:/d"]}, {}),
    "secret_file": ({"secrets": ["db"]}, {"secrets": {"db": {"file": "./db.txt"}}}),
    "env_file": ({"env_file": ["web.env"]}, {}),
}


def merged(shapes: list[str], root: Path) -> dict[str, Any]:
    web: dict[str, Any] = {"image": "busybox"}
    top: dict[str, Any] = {}
    for name in shapes:
        keys, more = CLASSES[name]
        text = json.dumps(keys).replace("{root}", str(root))
        for key, value in json.loads(text).items():
            web[key] = [*web[key], *value] if isinstance(value, list) and key in web else value
        for key, value in more.items():
            top.setdefault(key, {}).update(value)
    return {"services": {"web": web}, **top}


def check(capsys: pytest.CaptureFixture[str], policy: Path, compose: dict[str, Any], tmp: Path,
          env_template: str = "") -> dict[str, Any]:  # fmt: skip
    bundle = tmp / "bundle.json"
    raw = {"project": "shop", "compose": yaml.safe_dump(compose), "env_template": env_template,
           "manifest": []}  # fmt: skip
    bundle.write_text(json.dumps(raw))
    cli.main(["bundle", "check", "--policy", str(policy), "--format", "json", str(bundle)])
    found: dict[str, Any] = json.loads(capsys.readouterr().out)
    return found


def allow(policy: dict[str, Any], line: str) -> None:
    """``policy.services.web.cap_add: [NET_ADMIN]`` applied to ``policy`` (lists extended)."""
    path, _, value = line.partition(": ")
    words = path.split(".")
    assert words[0] == "policy", line
    where = policy
    for word in words[1:-1]:
        where = where.setdefault(word, {})
    given_value = yaml.safe_load(value)
    if isinstance(given_value, list):
        where[words[-1]] = [*where.get(words[-1], []), *given_value]
    else:
        where[words[-1]] = given_value


def rewrite(compose: dict[str, Any], v: dict[str, Any]) -> str:
    """The printed rewrite applied as the author reads it; the template's line it needs."""
    web = compose["services"]["web"]
    said = v["rewrite"]
    if v["key"].endswith(".external"):  # "drop `external:` and `name:`"
        kind, name = v["key"].split(".")[:2]
        assert "drop `external:`" in said
        compose[kind][name].pop("external")
    elif v["key"].startswith("services.web.volumes[") or v["key"] == "volumes":
        source = v["why"].split()[0]
        vol = next(x for x in web["volumes"] if x.split(":")[0] == source)
        web["volumes"].remove(vol)
        target = vol.split(":")[1]
        if said.startswith("the device itself in `devices:`"):
            web.setdefault("devices", []).append("/dev/ttyACM0")
        elif said.startswith("the app's code in its image"):  # the image has it: no bind
            assert f"`COPY {source.rstrip('/') or '.'} {target}`" in said, said
        elif said.startswith("a config with the file's text"):
            name = source.rsplit("/", 1)[-1]
            assert f"`configs: [{{source: {name}, target: {target}}}]`" in said, said
            compose.setdefault("configs", {})[name] = {"content": "user $$HOME\n"}
            web.setdefault("configs", []).append({"source": name, "target": target})
        elif "for config files it only reads, one config per file" in said:
            assert f"`target: {target}/a.conf`" in said, said  # (the app only reads them)
            compose.setdefault("configs", {})["a.conf"] = {"content": "a $$b\n"}
            web.setdefault("configs", []).append({"source": "a.conf", "target": f"{target}/a.conf"})
        else:  # "a named volume (`<name>:<target>` ..." / REWRITE_ETC's "app-data:<target>"
            found = re.search(r"a named volume[^`]*`([a-z0-9_-]+):" + re.escape(target), said)
            named = found.group(1) if found else "app-data"
            assert f"`{named}:" in said, said
            assert named not in compose.get("volumes", {}), f"two binds told one volume: {said}"
            web["volumes"].append(f"{named}:{target}")
            compose.setdefault("volumes", {})[named] = {}
    elif v["key"] == "secrets":  # "`secrets.<name>.environment: VAR`, VAR from the .env"
        assert said.startswith("`secrets.<name>.environment")
        compose["secrets"]["db"] = {"environment": "DB_PASSWORD"}
        return "DB_PASSWORD=x\n"
    elif v["key"] == "env_file":  # "`env_file: [.env]`"
        assert said.startswith("`env_file: [.env]`")
        web["env_file"] = [".env"]
    else:
        raise AssertionError(f"a violation with neither an allowance nor a rewrite: {v}")
    return ""


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(st.sampled_from(sorted(CLASSES)), unique=True, min_size=1, max_size=6))
@example(sorted(CLASSES))
def test_the_authors_loop_makes_each_violation_go_away(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shapes: list[str]
) -> None:
    root = bind_root("advice")
    try:
        (root / "data").mkdir()
        (root / "real").mkdir()
        (root / "link").symlink_to(root / "real")
        compose = merged(shapes, root)
        policy: dict[str, Any] = {"allow": {}}
        path = tmp_path / "policy.yaml"
        template, seen = "", set[tuple[str, str, str, str]]()
        for _ in range(3):  # the author's loop: each round's faults go away, none comes back
            path.write_text(yaml.safe_dump({"policy": policy}))
            found = check(capsys, path, compose, tmp_path, template)
            if found["verdict"] == "admitted":
                return
            assert found["verdict"] == "refused", found
            said = {(v["code"], v["service"], v["key"], v["why"]) for v in found["violations"]}
            assert not said & seen, (shapes, said & seen)  # advice that did not work
            seen |= said
            twice = [
                v
                for v in found["violations"]
                if v["key"] == "volumes" and "/revisions/" in v["why"]
            ]
            assert not twice, twice  # a relative bind named again at policy
            for v in found["violations"]:
                if v["allow_with"]:
                    allow(policy, v["allow_with"])
                else:
                    template += rewrite(compose, v)
        raise AssertionError(f"not admitted in 3 rounds: {shapes}")
    finally:
        shutil.rmtree(root)


def test_the_printed_flatten_command_keeps_binds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``extends.file`` is POLICY_SOURCE and the printed command flattens it: run as printed
    (and its one written step: `type: bind` for a bind led by a variable), the flattened file
    keeps every bind a bind, as written (no CI checkout's path baked in, no undefined volume):
    the check then judges each bind as it would have judged it in one file."""
    import subprocess

    root = bind_root("flatten")
    try:
        vols = [f"{root}/data:/data", "./conf.d:/etc/app/conf.d", "${MEDIA}:/media"]
        base = {"image": "busybox", "command": "echo $$HOME", "volumes": vols}
        (tmp_path / "common.yml").write_text(yaml.safe_dump({"services": {"base": base}}))
        compose = {"services": {"web": {"extends": {"file": "common.yml", "service": "base"}}}}
        (tmp_path / "compose.yaml").write_text(yaml.safe_dump(compose))
        policy = tmp_path / "policy.yaml"
        policy.write_text(yaml.safe_dump({"policy": {"allow": {"bind_roots": [str(root)]}}}))
        first = check(capsys, policy, compose, tmp_path)
        said = next(v["rewrite"] for v in first["violations"] if v["key"].startswith("extends"))
        command = re.search(r"`(docker compose [^`]*)`", said)
        assert command is not None, said
        proc = subprocess.run(
            command.group(1).split(), cwd=tmp_path, capture_output=True, text=True, check=True
        )
        flat: dict[str, Any] = yaml.safe_load(proc.stdout)
        assert "`type: bind`" in said
        for vol in flat["services"]["web"]["volumes"]:
            if vol["source"].startswith("$"):  # compose printed it `type: volume`
                vol["type"] = "bind"
                vol.pop("volume", None)
        assert str(tmp_path) not in json.dumps(flat)  # the checkout's path is not baked in
        template = "MEDIA=/srv/media-47\n"
        roots = {"bind_roots": [str(root), "/srv"]}
        policy.write_text(yaml.safe_dump({"policy": {"allow": roots}}))
        second = check(capsys, policy, flat, tmp_path, template)
        assert [(v["code"], v["why"].split()[0]) for v in second["violations"]] == [
            ("BUNDLE_RELATIVE_BIND", "conf.d")
        ], second
        assert "one config per file" in second["violations"][0]["rewrite"]
    finally:
        shutil.rmtree(root)
