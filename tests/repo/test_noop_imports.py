"""What a no-op tick imports (issue 15): a box runs one every minute for years, so the steady
path loads only what it uses. A tick is run as the timer runs it, a new process
(``monky_deployd_testkit.steady``: loopback tenancy answering 304, a loopback Engine API), and
the modules it loaded are read at its exit. New code keeps heavy or apply-only imports inside
the function that needs them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from monky_deployd_testkit.steady import CLI_DUMPING_MODULES, SteadyBox

# Libraries a steady tick never uses: OpenBao's client (a steady tick's one OpenBao call,
# lookup-self, goes straight over httpx) and everything under it, metrics, and subprocesses.
FORBIDDEN_TOP_LEVEL = {
    "hvac",
    "requests",
    "urllib3",
    "charset_normalizer",
    "prometheus_client",
    "subprocess",
}
# The apply's checks, the apply path (agent.apply.act, one import) and the box steps with their
# adapters.
FORBIDDEN_OWN = {
    "monky_deployd.agent.apply.act",
    "monky_deployd.agent.apply.prepare",
    "monky_deployd.agent.apply.steps",
    "monky_deployd.core.lifecycle.boxsteps",
    "monky_deployd.core.render.registry_cred",
    "monky_deployd.adapters.box.docker.compose",
    "monky_deployd.adapters.box.docker.preflight",
    "monky_deployd.adapters.box.runner",
    "monky_deployd.adapters.box.docker.docker_config",
    "monky_deployd.adapters.net.hvac_httpx",
    "monky_deployd.adapters.net.zitiview",  # the controller's view: only when the SDK fails
    "monky_deployd.core.wire.zitictl",
    "monky_deployd.core.admission.bundle",
    "monky_deployd.core.render.dotenv",
    "monky_deployd.core.render.envfile",
    "monky_deployd.core.admission.prepare",
    "monky_deployd.core.lifecycle.prune",
    "monky_deployd.core.render.pullerrors",
    "monky_deployd.core.admission.policy",
    "monky_deployd.agent.policy",
    "monky_deployd.adapters.box.docker.composeconfig",
}
# Issue 29: what only a bake, a wait (update windows, a rollout spread), verify or a failure reads.
FORBIDDEN_OWN |= {
    "monky_deployd.core.lifecycle.bake",
    "monky_deployd.core.lifecycle.verify",
    "monky_deployd.core.lifecycle.schedule",
    "monky_deployd.core.records.held",  # held.json's kinds: only when the file exists
    "monky_deployd.core.lifecycle.plans",  # the plan kinds other than Noop
    "monky_deployd.core.wire.answers",  # the 200 answer, the lease, the error body
    "monky_deployd.core.wire.report",  # the report body
    "monky_deployd.agent.observe.recorded",  # status's and the metrics' view
    "monky_deployd.core.records.release",  # release.json, projects.json
    "monky_deployd.core.records.suspend",  # suspend.json
    "monky_deployd.core.records.journal",  # journal.json
    "monky_deployd.adapters.box.docker.watch",  # verify's and the bake's inspections, events
}
# Issue 42: `bundle check` (the parser's arguments live in bundlecmd, which the parser loads).
FORBIDDEN_OWN |= {"monky_deployd.agent.commands.bundlecheck"}


def _tick(box: SteadyBox, out: Path) -> tuple[dict[str, object], set[str]]:
    proc = subprocess.run(
        (*CLI_DUMPING_MODULES, *box.argv[3:]),
        env=box.env(MONKY_MODULES_OUT=str(out)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout.splitlines()[-1])
    return summary, set(out.read_text().split())


@pytest.fixture(scope="module")
def steady_modules(tmp_path_factory: pytest.TempPathFactory) -> tuple[SteadyBox, set[str]]:
    tmp = tmp_path_factory.mktemp("steady")
    with SteadyBox(tmp) as box:
        first, _ = _tick(box, tmp / "first.txt")  # logs in and spends the lease
        assert first["outcome"] == "noop"
        leases = len(box.estate.tenancy.leases)
        summary, modules = _tick(box, tmp / "second.txt")
        assert summary["outcome"] == "noop"
        assert len(box.estate.tenancy.leases) == leases  # a steady tick spends nothing
        assert box.estate.tenancy.checkin_if_none_match[-1] == '"r1"'
        return box, modules


def test_a_noop_tick_loads_no_openbao_client_metrics_or_subprocess(
    steady_modules: tuple[SteadyBox, set[str]],
) -> None:
    _, modules = steady_modules
    top = {m.split(".")[0] for m in modules}
    assert top & FORBIDDEN_TOP_LEVEL == set()
    box, _ = steady_modules
    assert (box.textfile_dir / "monky-deployd.prom").is_file()  # metrics on: only touched
    assert "monky_deployd.agent.tick.tick" in modules  # the dump saw a real tick


def test_a_noop_tick_loads_no_box_step_or_apply_check_module(
    steady_modules: tuple[SteadyBox, set[str]],
) -> None:
    _, modules = steady_modules
    assert modules & FORBIDDEN_OWN == set()
