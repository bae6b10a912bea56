"""Faults of the services and of the bundle, through a whole in-process tick against the loopback
fakes: each is named in the first error line, and nothing on the box changes. The OpenBao faults a
real server can show run against the session's real OpenBao as well (``@BOTH``)."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monky_deployd import config as config_mod
from monky_deployd.agent.tick.tick import run_tick
from monky_deployd.cli import exit_code
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd_testkit.fakes.estate import Estate
from monky_deployd_testkit.realbao import RealBao

ENV = "env-int-01"
BOTH = pytest.mark.parametrize("estate", ["fake", "real"], indirect=True)
GOOD = {
    "project": "shop",
    "compose": "services:\n  web:\n    image: 127.0.0.1:1/web:1\n",
    "env_template": "",
    "manifest": [],
}


@pytest.fixture
def estate(request: pytest.FixtureRequest) -> Iterator[Estate[Any]]:
    if getattr(request, "param", "fake") == "real":
        real: RealBao = request.getfixturevalue("real_bao")
        with Estate(env=ENV, real=real) as est:
            yield est
    else:
        with Estate(env=ENV) as fake:
            yield fake


def tick(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture, **overrides: Any
) -> tuple[TickRecord, list[logging.LogRecord]]:
    raw = estate.config(
        state_dir=tmp_path / "state",
        grant_file=estate.write_grant(tmp_path / "grant.jwt"),
        **overrides,
    )
    cfg = config_mod.parse(raw, "test")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        rec = run_tick(cfg, clock=estate.clock.now)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    return rec, errors


def test_no_desired_state_is_idle_and_reports_nothing(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rec, errors = tick(estate, tmp_path, caplog)
    assert (rec.outcome, exit_code(rec)) == ("idle", 0)
    assert errors == [] and estate.tenancy.reports == []


def test_tenancy_5xx_is_named_with_its_address(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    estate.tenancy.fail_next(503, b"upstream down", path_contains="checkin")
    rec, errors = tick(estate, tmp_path, caplog)
    assert rec.code == "TENANCY_UNAVAILABLE" and exit_code(rec) == 1
    first = errors[0].getMessage()
    assert first.startswith("TENANCY_UNAVAILABLE: tenancy at 127.0.0.1:")
    assert "HTTP 503" in first


def test_checkin_body_that_is_not_json(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    estate.tenancy.set_raw_checkin(200, b"<html>proxy error</html>")
    rec, errors = tick(estate, tmp_path, caplog)
    assert rec.code == "TENANCY_BAD_RESPONSE"
    assert "not JSON" in errors[0].getMessage()


def test_checkin_of_the_wrong_shape(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    estate.tenancy.set_raw_checkin(200, json.dumps({"rev": "r1"}).encode())
    rec, _ = tick(estate, tmp_path, caplog)
    assert rec.code == "TENANCY_BAD_RESPONSE"


def test_oversized_bundle_is_refused_unread(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    huge = dict(GOOD, env_template="# " + "x" * (5 * 1024 * 1024))
    estate.tenancy.set_desired("r1", huge)
    rec, errors = tick(estate, tmp_path, caplog)
    assert (rec.code, rec.outcome, exit_code(rec)) == ("TENANCY_RESPONSE_TOO_LARGE", "refused", 5)
    assert "max_bundle_bytes" in errors[0].getMessage()
    assert not list((tmp_path / "state" / "revisions").iterdir())


def test_stalled_tenancy_is_bounded_by_the_timeout(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    estate.tenancy.slow_s = 5
    rec, errors = tick(
        estate,
        tmp_path,
        caplog,
        tenancy={"host": estate.tenancy.host, "port": estate.tenancy.port, "timeout_s": 0.5},
    )
    assert rec.code == "TENANCY_TIMEOUT"
    assert "did not answer" in errors[0].getMessage()


def test_unreachable_tenancy(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    estate.tenancy.stop()
    rec, errors = tick(estate, tmp_path, caplog)
    assert rec.code in ("TENANCY_UNREACHABLE",)
    assert f"{estate.tenancy.host}:{estate.tenancy.port}" in errors[0].getMessage()


@pytest.mark.parametrize(
    ("bundle", "needle"),
    [
        (dict(GOOD, compose=""), "'compose'"),
        (dict(GOOD, compose="[1, 2]"), "YAML mapping"),
        (dict(GOOD, project="../etc"), "'project'"),
        (dict(GOOD, manifest=[{"name": "A B", "path": "envs/x/a", "key": "k"}]), "variable name"),
        (
            dict(GOOD, manifest=[{"name": "A", "path": "envs/../a", "key": "k"}]),
            "'manifest[0].path'",
        ),
        ({"project": "shop"}, "'compose'"),
    ],
)
def test_malformed_bundle_refused_reported_nothing_written(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture, bundle: Any, needle: str
) -> None:
    estate.tenancy.set_desired("r1", bundle)
    rec, errors = tick(estate, tmp_path, caplog)
    assert (rec.outcome, rec.code, exit_code(rec)) == ("refused", "BUNDLE_INVALID", 5)
    assert needle in errors[0].getMessage()
    assert not list((tmp_path / "state" / "revisions").iterdir())
    assert not (tmp_path / "state" / "applied.json").exists()
    assert estate.tenancy.reports[-1]["code"] == "BUNDLE_INVALID"
    assert estate.tenancy.reports[-1]["outcome"] == "refused"


def test_undeliverable_report_changes_nothing(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    estate.tenancy.set_desired("r1", dict(GOOD, compose=""))
    estate.tenancy.fail_next(500, b"", path_contains="reports")
    rec, errors = tick(estate, tmp_path, caplog)
    assert (rec.outcome, rec.code) == ("refused", "BUNDLE_INVALID")
    warnings = [r for r in caplog.records if getattr(r, "event", "") == "report.failed"]
    assert len(warnings) == 1
    assert [r.getMessage().split(":")[0] for r in errors[:1]] == ["BUNDLE_INVALID"]
    assert estate.tenancy.reports == []


def test_superseded_grant_is_never_called_a_network_fault(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    estate.tenancy.set_desired("r1", GOOD)
    jti = json.loads(__import__("base64").urlsafe_b64decode(estate.grant.split(".")[1] + "=="))[
        "jti"
    ]
    estate.tenancy.supersede(jti)
    rec, errors = tick(estate, tmp_path, caplog)
    assert rec.code == "GRANT_SUPERSEDED" and exit_code(rec) == 5
    first = errors[0].getMessage()
    assert first.startswith("GRANT_SUPERSEDED: grant superseded: a newer kit was revealed")
    for wrong in ("network", "intercept", "policy", "unreachable"):
        assert wrong not in first.split("Check:")[0]


# -- OpenBao faults, against the fake and the real server -------------------------------------


def _openbao(estate: Estate[Any], **changes: str) -> dict[str, Any]:
    cfg: dict[str, Any] = estate.config(state_dir=Path("/"), grant_file=Path("/"))["openbao"]
    return {**cfg, **changes}


def _with_secret(estate: Estate[Any], path: str) -> dict[str, Any]:
    return dict(
        GOOD,
        env_template="A=${A}\n",
        manifest=[{"name": "A", "path": f"envs/{ENV}/{path}", "key": "a"}],
    )


@BOTH
def test_a_misnamed_jwt_mount_is_named_not_the_grant(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rec, errors = tick(estate, tmp_path, caplog, openbao=_openbao(estate, jwt_mount="jwt-tenancyy"))
    assert (rec.code, rec.outcome, exit_code(rec)) == ("OPENBAO_JWT_MOUNT_MISSING", "refused", 5)
    first = errors[0].getMessage()
    assert first.startswith(
        f"OPENBAO_JWT_MOUNT_MISSING: OpenBao at {estate.bao.host}:{estate.bao.port} has no auth "
        "mount 'jwt-tenancyy'"
    )
    assert "rejected" not in first and "openbao.jwt_mount" in first
    assert estate.tenancy.lease_requests == 0


@BOTH
def test_a_misnamed_kv_mount_is_named_with_the_one_the_token_sees(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    estate.bao.set_secret(f"envs/{ENV}/mounted", {"a": "x"})
    estate.tenancy.set_desired("r1", _with_secret(estate, "mounted"))
    rec, errors = tick(estate, tmp_path, caplog, openbao=_openbao(estate, kv_mount="secrets"))
    assert (rec.code, rec.outcome) == ("OPENBAO_KV_MOUNT_MISSING", "refused")
    first = errors[0].getMessage()
    assert first.startswith("OPENBAO_KV_MOUNT_MISSING: OpenBao at ")
    assert "no KV mount 'secrets'" in first and "sees are: kv" in first
    assert "polic" not in first.split("Check:")[0]
    assert not (tmp_path / "state" / "applied.json").exists()


@BOTH
def test_a_deleted_then_destroyed_secret_is_named_with_the_time(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = f"deleted-{uuid.uuid4().hex[:6]}"
    estate.bao.set_secret(f"envs/{ENV}/{path}", {"a": "x"})
    estate.bao.soft_delete(f"envs/{ENV}/{path}")
    estate.tenancy.set_desired("r1", _with_secret(estate, path))
    rec, errors = tick(estate, tmp_path, caplog)
    assert (rec.code, rec.outcome, exit_code(rec)) == ("SECRET_DELETED", "refused", 5)
    first = errors[0].getMessage()
    assert first.startswith(f"SECRET_DELETED: secret kv/envs/{ENV}/{path} (key 'a')")
    assert "current version 1 was deleted at 20" in first and "not found" not in first
    estate.bao.destroy(f"envs/{ENV}/{path}", [1])
    # r1 is now in backoff; the author republishes, which pre-empts it on the next tick
    estate.tenancy.set_desired("r2", _with_secret(estate, path))
    rec, errors = tick(estate, tmp_path, caplog)
    assert rec.code == "SECRET_DESTROYED"
    assert "current version 1 was destroyed" in errors[0].getMessage()


@BOTH
def test_a_sealed_openbao_is_named_and_costs_no_lease(
    estate: Estate[Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rec, _ = tick(estate, tmp_path, caplog)
    assert rec.outcome == "idle"
    estate.bao.sealed = True
    rec, errors = tick(estate, tmp_path, caplog)
    assert (rec.code, exit_code(rec)) == ("OPENBAO_SEALED", 1)
    assert (
        errors[0]
        .getMessage()
        .startswith(f"OPENBAO_SEALED: OpenBao at {estate.bao.host}:{estate.bao.port} is sealed")
    )
    estate.bao.sealed = False
    rec, _ = tick(estate, tmp_path, caplog)
    assert rec.outcome == "idle" and len(estate.tenancy.leases) == 1
