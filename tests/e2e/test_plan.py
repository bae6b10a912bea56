"""End to end: ``monky-deployd plan`` and the reasons of every apply. The real CLI, the loopback
estate, a real registry and the real Docker engine.

plan changes nothing: the state dir is byte-identical (every file, its bytes and mode), tenancy
sees no lease request and no report, the registry sees no blob request and no manifest GET (the
digest is a HEAD), the engine's image list is the same. Its exit status: 0 no change, 1
changes, 2 an error. Each apply's reasons reach the report, applied.json and the containers'
labels; no secret value appears in any of them."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab
from monky_deployd_testkit.realbao import RealBao

pytestmark = pytest.mark.docker

SECRET = "s3cr3t-plan-one"
ROTATED = "s3cr3t-plan-two"
TEMPLATE = "DB_PASSWORD=${DB_PASSWORD}\nLOG_LEVEL=info\n"


@pytest.fixture
def repo(registry: Registry, busybox_image: str) -> str:
    """A repository of its own: the test pushes a new image under the same tag."""
    return registry.push(busybox_image, f"env-e2e-01/plan{uuid.uuid4().hex[:8]}", "1.0")


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, repo: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, repo, db_password=SECRET) as lab:
        yield lab


def plan(lab: Lab, *extra: str) -> tuple[int, dict[str, Any], str]:
    proc = lab.cli("plan", "--json", *extra)
    return proc.returncode, json.loads(proc.stdout), proc.stdout + proc.stderr


def snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry under ``root``: its mode and, for a file, its bytes."""
    found: dict[str, tuple[int, bytes | None]] = {}
    if not root.exists():
        return found
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        found[str(path.relative_to(root))] = (
            st.st_mode,
            path.read_bytes() if path.is_file() and not path.is_symlink() else None,
        )
    return found


def images(host: str) -> list[str]:
    """The engine's images from the test registry (other tests share the engine)."""
    out = subprocess.run(
        ("docker", "image", "ls", "--no-trunc", "--format", "{{.Repository}} {{.Tag}} {{.ID}}"),
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(ln for ln in out.stdout.splitlines() if ln.startswith(host + "/"))


class Counters:
    """What plan must not cause: leases, reports, pulls."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.before = self.now()

    def now(self) -> dict[str, object]:
        t = self.lab.estate.tenancy
        reg = self.lab.registry
        return {
            "leases": t.lease_requests,
            "reports": t.report_count,
            "blobs": reg.request_count("/blobs/"),
            "manifest_gets": reg.request_count("/manifests/", ("GET",)),
            "images": images(reg.host),
            "state": snapshot(self.lab.state_dir),
        }

    def unchanged(self) -> None:
        after = self.now()
        for key, value in self.before.items():
            assert after[key] == value, f"plan changed {key}"


def bundle(lab: Lab, *, template: str = TEMPLATE, web: dict[str, Any] | None = None) -> Any:
    b = lab.bundle(env_template=template)
    doc = yaml.safe_load(b["compose"])
    doc["services"]["web"].update(web or {})
    b["compose"] = yaml.safe_dump(doc)
    return b


def test_plan_on_a_fresh_box_needs_a_token_or_login_and_changes_nothing(lab: Lab) -> None:
    lab.estate.tenancy.set_desired("r1", bundle(lab))
    counters = Counters(lab)
    rc, body, text = plan(lab)
    assert rc == 2, text
    assert body["error"]["code"] == "PLAN_NO_TOKEN"
    assert "spend a lease" in body["error"]["message"]
    counters.unchanged()
    assert not lab.state_dir.exists(), "plan made the state dir"

    rc, body, text = plan(lab, "--login")
    assert rc == 1, text
    assert body["plan"] == "apply" and body["desired"] == "r1" and body["applied"] is None
    assert [r["kind"] for r in body["reasons"]] == ["REVISION"]
    assert body["env"]["added"] == ["DB_PASSWORD", "LOG_LEVEL"]
    assert [s["action"] for s in body["services"]] == ["create"]
    assert body["images"][0]["after"].startswith("sha256:")
    assert body["token"].startswith("bootstrap")
    counters.unchanged()
    assert SECRET not in text
    assert lab.estate.tenancy.checkin_if_none_match[-1] is None


def test_plan_diffs_a_new_revision_and_the_apply_carries_its_reasons(
    lab: Lab, registry: Registry, busybox_image: str, repo: str
) -> None:
    lab.estate.tenancy.set_desired("r1", bundle(lab))
    first = lab.tick()
    assert first.rc == 0, first.stdout + first.stderr
    assert lab.estate.tenancy.reports[-1]["reasons"] == [
        {"kind": "REVISION", "detail": "(none) -> r1"}
    ]
    assert list(lab.labelled("r1")) == ["web"]
    applied = json.loads((lab.state_dir / "applied.json").read_text())
    assert applied["reasons"] == [{"kind": "REVISION", "detail": "(none) -> r1"}]
    assert set(applied["env_hashes"]) == {"DB_PASSWORD", "LOG_LEVEL"}
    assert lab.labelled("r1") == {"web": applied["deploy_id"]}
    assert SECRET not in (lab.state_dir / "applied.json").read_text()

    # applied and desired agree: no change
    counters = Counters(lab)
    rc, body, text = plan(lab)
    assert rc == 0, text
    assert body["plan"] == "noop" and body["changes"] is False
    counters.unchanged()

    # r2: compose, .env, a rotated secret and a new image under the same tag
    lab.estate.bao.set_secret("envs/env-e2e-01/app", {"db_password": ROTATED})
    registry.push_new_image(repo, busybox_image)
    r2 = bundle(
        lab,
        template=TEMPLATE.replace("info", "debug") + "NEW_KEY=1\n",
        web={"stop_grace_period": "2s"},
    )
    lab.estate.tenancy.set_desired("r2", r2)
    counters = Counters(lab)
    rc, body, text = plan(lab)
    assert rc == 1, text
    kinds = [r["kind"] for r in body["reasons"]]
    assert kinds == ["REVISION", "COMPOSE", "ENV_KEYS", "SECRET_ROTATED", "IMAGE_DIGEST"]
    assert body["env"] == {
        "added": ["NEW_KEY"],
        "removed": [],
        "changed": ["DB_PASSWORD", "LOG_LEVEL"],
    }
    assert body["secrets"]["rotated"] == ["DB_PASSWORD"]
    assert "-    stop_grace_period: 1s" in body["compose"]["diff"]
    assert "+    stop_grace_period: 2s" in body["compose"]["diff"]
    # the judged model: what compose runs, interpolated (the secrets masked, old and new)
    model = body["model"]["diff"]
    assert '-   "stop_grace_period": "1s"' in model and '+   "stop_grace_period": "2s"' in model
    assert "applied/r1/compose.judged.json" in model  # (SECRET, ROTATED: never, below)
    assert body["images"][0]["changed"] is True
    web = body["services"][0]
    assert web["action"] == "recreate" and "image digest changed" in web["why"]
    assert SECRET not in text and ROTATED not in text
    counters.unchanged()

    # the apply reports the same reasons (and keeps them), labels the containers r2
    second = lab.tick()
    assert second.rc == 0, second.stdout + second.stderr
    reported = [r["kind"] for r in lab.estate.tenancy.reports[-1]["reasons"]]
    assert reported == kinds
    assert second.events("apply.reasons")[0]["reasons"] == kinds[:4]  # the digest: at commit
    applied = json.loads((lab.state_dir / "applied.json").read_text())
    assert [r["kind"] for r in applied["reasons"]] == kinds
    assert lab.labelled("r2") == {"web": applied["deploy_id"]} and lab.labelled("r1") == {}
    for where in (second.stdout, json.dumps(lab.estate.tenancy.reports), json.dumps(applied)):
        assert ROTATED not in where and SECRET not in where


def test_plan_exits_2_when_tenancy_is_down(lab: Lab) -> None:
    lab.estate.tenancy.set_desired("r1", bundle(lab))
    run = lab.tick()
    assert run.rc == 0, run.stdout + run.stderr
    lab.estate.tenancy.stop()
    counters = Counters(lab)
    rc, body, text = plan(lab)
    assert rc == 2, text
    assert body["error"]["code"].startswith("TENANCY_"), body["error"]
    counters.unchanged()
    # the held lease revoked: plan asks for no new one (the next tick would)
    lab.estate.tenancy.revoke_lease(lab.estate.tenancy.leases[-1].id)
    rc, body, text = plan(lab)
    assert rc == 2, text
    assert body["error"]["code"] == "PLAN_NO_TOKEN"
    assert "expired or revoked" in body["error"]["message"]
    counters.unchanged()


def test_plan_of_a_new_project_takes_the_old_one_down(lab: Lab) -> None:
    lab.estate.tenancy.set_desired("r1", bundle(lab))
    assert lab.tick().rc == 0
    other = "e2e" + uuid.uuid4().hex[:8]
    lab.extra_projects = (other,)
    moved = bundle(lab)
    moved["project"] = other
    lab.estate.tenancy.set_desired("r2", moved)
    rc, body, text = plan(lab)
    assert rc == 1, text
    assert body["project"] == other
    assert body["services"] == [
        {"name": "web", "action": "remove", "why": [f"project {lab.project} is taken down"]},
        {"name": "web", "action": "create", "why": [f"new project {other}"]},
    ]


def kinds_of(report: dict[str, Any]) -> list[str]:
    return [r["kind"] for r in report.get("reasons", [])]


def test_rollback_hold_forced_retry_and_drift_each_say_why(lab: Lab) -> None:
    lab.estate.tenancy.set_desired("r1", bundle(lab))
    assert lab.tick().rc == 0
    first_id = json.loads((lab.state_dir / "applied.json").read_text())["deploy_id"]
    crash = {"command": ["sh", "-c", "sleep 1; exit 1"]}
    lab.estate.tenancy.set_desired("r2", bundle(lab, web=crash))
    run = lab.tick()
    assert run.rc == 1, run.stdout + run.stderr
    rep = lab.estate.tenancy.reports[-1]
    assert kinds_of(rep) == ["REVISION", "COMPOSE", "ROLLBACK"]
    assert rep["reasons"][-1] == {"kind": "ROLLBACK", "detail": "to r1"}
    # the last-known-good's containers are back with their own labels
    assert lab.labelled("r1") == {"web": first_id} and lab.labelled("r2") == {}

    # held: the next tick applies nothing; plan says so and what --retry would change
    counters = Counters(lab)
    rc, body, text = plan(lab)
    assert rc == 1, text
    assert body["plan"] == "hold" and any("hold" in n for n in body["notes"])
    assert [r["kind"] for r in body["reasons"]] == ["REVISION", "COMPOSE"]
    counters.unchanged()

    forced = lab.tick("--retry")
    assert forced.rc == 1, forced.stdout
    assert kinds_of(lab.estate.tenancy.reports[-1]) == ["REVISION", "FORCED", "COMPOSE", "ROLLBACK"]

    # drift: the last-known-good's container vanishes; plan names it, the restore reports it
    subprocess.run(("docker", "rm", "-f", lab.containers()["web"]), capture_output=True, check=True)
    counters = Counters(lab)
    rc, body, text = plan(lab)
    assert rc == 1, text
    assert body["plan"] == "restore"
    assert body["services"] == [{"name": "web", "action": "start", "why": ["missing"]}]
    assert body["reasons"] == [{"kind": "DRIFT", "detail": "web missing"}]
    counters.unchanged()
    restore = lab.tick()
    assert restore.rc == 0, restore.stdout  # the last-known-good restored (r2 stays held)
    assert lab.estate.tenancy.reports[-1]["reasons"] == [{"kind": "DRIFT", "detail": "web missing"}]
    assert lab.labelled("r1") == {"web": first_id}


def test_a_record_from_before_fingerprints_is_compared_from_the_files_on_disk(lab: Lab) -> None:
    lab.estate.tenancy.set_desired("r1", bundle(lab))
    assert lab.tick().rc == 0
    path = lab.state_dir / "applied.json"
    old = json.loads(path.read_text())
    for key in ("reasons", "deploy_id", "compose_sha256", "env_hashes", "secret_hashes"):
        del old[key]
    path.write_text(json.dumps(old, indent=2, sort_keys=True))  # as the older writer wrote it
    (lab.state_dir / "hash.key").unlink()
    lab.estate.bao.set_secret("envs/env-e2e-01/app", {"db_password": ROTATED})
    lab.estate.tenancy.set_desired("r2", bundle(lab, template=TEMPLATE + "NEW_KEY=1\n"))
    counters = Counters(lab)
    rc, body, text = plan(lab)
    assert rc == 1, text
    assert body["env"] == {"added": ["NEW_KEY"], "removed": [], "changed": ["DB_PASSWORD"]}
    assert body["secrets"] == {"added": [], "removed": [], "rotated": []}  # unknown: not shown
    assert [r["kind"] for r in body["reasons"]] == ["REVISION", "ENV_KEYS"]
    assert ROTATED not in text and SECRET not in text
    counters.unchanged()
    assert not (lab.state_dir / "hash.key").exists()


def test_plan_login_revokes_its_token_at_the_end(
    tmp_path: Path, registry: Registry, repo: str, real_bao: RealBao
) -> None:
    """Against the real OpenBao: each ``plan --login`` logs in with the grant and revokes that
    token at the end, as doctor does (before, three runs left three live tokens)."""
    with Lab(tmp_path, registry, repo, real=real_bao, db_password=SECRET) as lab:
        lab.estate.tenancy.set_desired("r1", bundle(lab))
        real_bao.mark()
        live_before = live_tokens(real_bao)
        for _ in range(3):
            rc, body, text = plan(lab, "--login")
            assert rc == 1 and body["token"].startswith("bootstrap"), text
        assert (real_bao.logins, real_bao.revocations) == (3, 3)
        assert live_tokens(real_bao) == live_before
        assert not lab.state_dir.exists(), "plan made the state dir"


def live_tokens(bao: RealBao) -> int:
    """How many tokens the server holds (root ``LIST auth/token/accessors``)."""
    return len(bao.admin("LIST", "auth/token/accessors")["data"]["keys"])
