"""End to end (issue 33): the policy is an allow-list over compose's effective model, judged on
the real ``docker compose config`` of the rendered release through the real CLI, engine and
registry (on both engines: scripts/test.sh runs this file again on the second).

The five roads to the host that passed issue 28's policy, each refused with nothing changed and
the report ``refused``; a refused revision held (no backoff, no secret read again) until the
policy changes; root's apply refusing a state dir that is a link; and a bundle with the keys
estates use still applied."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from monky_deployd_testkit.dockerlab import Registry
from monky_deployd_testkit.lab import Lab, Run

pytestmark = pytest.mark.docker


@pytest.fixture
def lab(tmp_path: Path, registry: Registry, web_image: str) -> Iterator[Lab]:
    with Lab(tmp_path, registry, web_image, db_password="pw-allowlist-1") as lab:
        lab.estate.tenancy.set_desired("r1", lab.bundle())
        first = lab.tick()
        assert first.rc == 0, first.stdout + first.stderr
        yield lab


def refused(lab: Lab, bundle: dict[str, Any], revision: str = "r2") -> Run:
    """Publish ``bundle`` as ``revision`` and tick: refused, and nothing on the box changed."""
    before, pulls = lab.containers(), lab.pulls()
    revisions = sorted(p.name for p in (lab.state_dir / "revisions").iterdir())
    docker_cfg = (lab.state_dir / "docker" / "config.json").read_bytes()
    lab.estate.tenancy.set_desired(revision, bundle)
    run = lab.tick()
    assert run.rc == 5, run.stdout + run.stderr
    assert run.summary["outcome"] == "refused"
    report = lab.estate.tenancy.reports[-1]
    assert (report["outcome"], report["revision"]) == ("refused", revision)
    assert report["code"] == run.summary["code"]
    assert run.errors[0]["phase"] == "policy", run.errors[0]["message"]
    assert lab.containers() == before
    assert lab.pulls() == pulls
    assert sorted(p.name for p in (lab.state_dir / "revisions").iterdir()) == revisions
    assert (lab.state_dir / "docker" / "config.json").read_bytes() == docker_cfg
    return run


def lines(run: Run) -> list[str]:
    detail: str = run.errors[0]["detail"]
    return detail.splitlines()


def test_an_overlay_volume_over_etc_and_the_state_dir_is_refused(lab: Lab) -> None:
    state = str(lab.state_dir)
    top = {
        "volumes": {
            "peek": {
                "driver_opts": {
                    "type": "overlay",
                    "device": "overlay",
                    "o": f"lowerdir=/etc:{state}",
                }
            },
            "plant": {
                "driver_opts": {
                    "type": "overlay",
                    "device": "overlay",
                    "o": f"lowerdir={lab.binds},upperdir={state},workdir={lab.binds}/w",
                }
            },
        }
    }
    run = refused(lab, lab.bundle(web={"volumes": ["peek:/peek", "plant:/plant"]}, top=top))
    assert run.summary["code"] == "POLICY_PROTECTED_PATH"
    got = lines(run)
    assert any("volumes.peek.driver_opts.o.lowerdir /etc reaches /etc" in ln for ln in got), got
    assert any(f"volumes.plant.driver_opts.o.upperdir {state}" in ln for ln in got), got
    assert any("(allow with policy.keys: [volumes.peek.driver_opts])" in ln for ln in got), got


def test_a_provider_service_is_refused_unless_its_program_is_allowed(lab: Lab) -> None:
    program = lab.tmp / "provider-ran"
    run = refused(lab, lab.bundle(web={"provider": {"type": str(program)}}))
    assert run.summary["code"] == "POLICY_REFUSED"
    assert any(f"policy.services.web.providers: [{program}]" in ln for ln in lines(run))
    assert not program.exists()


def test_a_build_from_the_state_dir_or_etc_is_refused(lab: Lab) -> None:
    for context in (str(lab.state_dir), "/etc"):
        build = {"context": context, "dockerfile_inline": "FROM scratch\nCOPY . /stolen\n"}
        bundle = lab.bundle(web={"build": build, "pull_policy": "build"})
        run = refused(lab, bundle, f"r-{len(context)}")
        assert run.summary["code"] == "POLICY_PROTECTED_PATH"
        assert any(f"build.context {context}" in ln for ln in lines(run)), lines(run)


def test_the_hosts_network_by_name_and_a_privileged_hook_are_refused(lab: Lab) -> None:
    web = {
        "network_mode": None,
        "networks": ["hostnet"],
        "post_start": [{"command": ["id"], "privileged": True}],
    }
    top = {"networks": {"hostnet": {"name": "host", "external": True}}}
    run = refused(lab, lab.bundle(web=web, top=top))
    got = lines(run)
    assert any(
        ln.startswith("service web: networks.hostnet the host's network")
        and "policy.services.web.host_namespaces: [network]" in ln
        for ln in got
    ), got
    assert any(
        "post_start.privileged true (allow with policy.services.web.privileged: true)" in ln
        for ln in got
    ), got


def test_a_refusal_is_held_without_reading_a_secret_until_the_policy_changes(lab: Lab) -> None:
    run = refused(lab, lab.bundle(web={"cap_add": ["NET_ADMIN"]}))
    assert run.summary["code"] == "POLICY_REFUSED"
    reads = lab.estate.bao.kv_reads
    for _ in range(2):  # the same revision under the same policy: held, nothing read or run
        again = lab.tick()
        assert again.rc == 6, again.stdout + again.stderr
        assert "this box's policy refused it (POLICY_REFUSED)" in again.stdout
    assert lab.estate.bao.kv_reads == reads
    held = json.loads((lab.state_dir / "held.json").read_text())
    assert (held["revision"], held["code"]) == ("r2", "POLICY_REFUSED") and held["policy"]
    # the box's policy changes: the revision is judged again, and now applies
    lab.write_config(
        policy={
            "allow": {"bind_roots": [str(lab.binds)]},
            "services": {"web": {"cap_add": ["NET_ADMIN"]}},
        }
    )
    applied = lab.tick()
    assert applied.rc == 0, applied.stdout + applied.stderr
    assert applied.summary["outcome"] == "applied"
    assert not (lab.state_dir / "held.json").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="root's apply")
def test_roots_apply_refuses_a_state_dir_that_is_a_link_and_runs_nothing(lab: Lab) -> None:
    theirs = lab.tmp / "nobodys"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    moved = lab.tmp / "state-real"
    lab.state_dir.rename(moved)
    lab.state_dir.symlink_to(theirs)
    reports = len(lab.estate.tenancy.reports)
    run = lab.tick()
    assert run.rc == 5, run.stdout + run.stderr
    assert run.errors[0]["code"] == "STATE_DIR_UNSAFE"
    assert f"{lab.state_dir} is a symbolic link (to {theirs})" in run.errors[0]["message"]
    assert run.errors[0]["hint"].startswith(f"`rm {lab.state_dir}`")
    assert list(theirs.iterdir()) == []  # nothing written, nothing run as nobody
    assert len(lab.estate.tenancy.reports) == reports
    lab.state_dir.unlink()
    moved.rename(lab.state_dir)


def test_a_bundle_with_the_keys_estates_use_still_applies(lab: Lab) -> None:
    data = lab.binds / "app-data"
    data.mkdir()
    web = {
        "network_mode": None,
        "healthcheck": {"test": ["CMD", "true"], "interval": "1s", "retries": 3},
        "restart": "unless-stopped",
        "depends_on": {"db": {"condition": "service_started", "required": True}},
        "ports": ["127.0.0.1::8080"],
        "environment": {"LOG_LEVEL": "info"},
        "labels": {"estate.team": "core"},
        "logging": {"driver": "json-file", "options": {"max-size": "1m", "max-file": "2"}},
        "deploy": {"resources": {"limits": {"memory": "64m", "cpus": "0.5"}}},
        "ulimits": {"nofile": {"soft": 1024, "hard": 2048}},
        "init": True,
        "user": "1000:1000",
        "working_dir": "/tmp",
        "stop_grace_period": "2s",
        "volumes": ["cache:/cache", f"{data}:/data:ro"],
        "tmpfs": ["/run/app"],
        "x-estate": {"owner": "core"},
    }
    bundle = lab.bundle(services=("web", "db"), web=web, top={"volumes": {"cache": {}}})
    lab.estate.tenancy.set_desired("r2", bundle)
    run = lab.tick()
    assert run.rc == 0, run.stdout + run.stderr
    assert run.summary["outcome"] == "applied"
    web_id = lab.containers()["web"]
    out = subprocess.run(
        ("docker", "inspect", web_id), capture_output=True, text=True, check=True
    ).stdout
    host = json.loads(out)[0]["HostConfig"]
    assert host["Init"] is True and host["Memory"] == 64 * 1024 * 1024


def test_a_syslog_driver_aimed_at_the_hosts_loopback_is_refused_and_nothing_delivered(
    lab: Lab,
) -> None:
    """syslog runs in the engine, in the host's network namespace: a container with
    ``network_mode: none`` would still reach 127.0.0.1 (and a host unix socket) through it."""
    import socket

    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    logging = {
        "driver": "syslog",
        "options": {"syslog-address": f"udp://127.0.0.1:{port}", "tag": "leak"},
    }
    web = {"logging": logging, "command": ["sh", "-c", "echo leaked; exec sleep 3600"]}
    run = refused(lab, lab.bundle(web=web))
    assert run.summary["code"] == "POLICY_REFUSED"
    got = lines(run)
    assert any(
        ln.startswith("service web: logging.driver syslog (a log driver runs in the engine")
        and ln.endswith("(allow with policy.services.web.log_drivers: [syslog])")
        for ln in got
    ), got
    with pytest.raises(TimeoutError):
        listener.recvfrom(4096)
    listener.close()
    # a local driver with an option of another driver is refused too (fail closed)
    sneaky = {"driver": "json-file", "options": {"syslog-address": f"udp://127.0.0.1:{port}"}}
    run = refused(lab, lab.bundle(web={"logging": sneaky}), "r3")
    assert any("logging.options.syslog-address is not an option" in ln for ln in lines(run))


def test_a_negative_oom_score_adj_is_refused_until_its_floor_is_allowed(lab: Lab) -> None:
    run = refused(lab, lab.bundle(web={"oom_score_adj": -900}))
    assert run.summary["code"] == "POLICY_REFUSED"
    assert any(
        "oom_score_adj -900 (the host's OOM killer spares the container over host processes) "
        "(allow with policy.services.web.oom_score_adj: -900)" in ln
        for ln in lines(run)
    ), lines(run)
    lab.write_config(
        policy={
            "allow": {"bind_roots": [str(lab.binds)]},
            "services": {"web": {"oom_score_adj": -900}},
        }
    )
    applied = lab.tick()
    policy_ends = [e for e in applied.events("phase.end") if e["phase"] == "policy"]
    assert [e["ok"] for e in policy_ends] == [True], applied.stdout  # the policy let it through
    # the engine lowers a score with CAP_SYS_RESOURCE: a sandbox without it (this suite's
    # machine may be one) makes the runtime refuse, which is the engine's word, not the policy's
    lower = subprocess.run(("sh", "-c", "echo -1 > /proc/self/oom_score_adj"), check=False)
    if lower.returncode != 0:
        assert applied.summary["code"] == "UP_FAILED", applied.stdout
        return
    assert applied.rc == 0, applied.stdout + applied.stderr
    out = subprocess.run(
        ("docker", "inspect", lab.containers()["web"]), capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out)[0]["HostConfig"]["OomScoreAdj"] == -900


def test_a_relative_path_in_driver_opts_is_refused_even_with_driver_opts_allowed(
    lab: Lab,
) -> None:
    """Resolved by the engine from its own working directory (/: ``etc`` is /etc). The bundle's
    own check refuses a relative ``device`` of an ``o: bind`` volume before compose runs; these
    are the forms it does not read: ``type: bind`` and overlay's ``lowerdir``."""
    top = {
        "volumes": {
            "relx": {"driver_opts": {"type": "bind", "device": "etc"}},
            "rely": {
                "driver_opts": {"type": "overlay", "device": "overlay", "o": "lowerdir=etc:usr"}
            },
        }
    }
    lab.write_config(
        policy={
            "allow": {"bind_roots": [str(lab.binds)]},
            "keys": ["volumes.relx.driver_opts", "volumes.rely.driver_opts"],
        }
    )
    # (names of more than one letter: compose reads "x:/x" as a Windows drive, and a volume no
    # service mounts is not in compose's model)
    bundle = lab.bundle(web={"volumes": ["relx:/x", "rely:/y"]}, top=top)
    run = refused(lab, bundle)
    assert run.summary["code"] == "POLICY_REFUSED"
    sentence = "is a relative path, resolved by the engine from its own working directory"
    assert sorted(lines(run)) == sorted(
        [
            f"the compose file: volumes.relx.driver_opts.device etc {sentence} "
            "(no allowance permits it)",
            f"the compose file: volumes.rely.driver_opts.o.lowerdir etc {sentence} "
            "(no allowance permits it)",
            f"the compose file: volumes.rely.driver_opts.o.lowerdir usr {sentence} "
            "(no allowance permits it)",
        ]
    ), lines(run)
