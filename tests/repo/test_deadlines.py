"""The tick's deadlines against the systemd unit: the agent, not systemd's SIGKILL, ends a stuck
tick and names the fault (TICK_DEADLINE), and a tick that skipped its apply on purpose (exit 6)
does not fail the unit every minute.

The longest a tick can run, from the config defaults: everything before and during the apply is
inside ``tick_deadline_s`` (the lock wait, every request and child is clamped to the time
left); after it may run only a rollback, on its own deadline (``rollback_budget_s``), and the
report, within ``tenancy.deadline_s``. That sum plus a margin for the interpreter's start and
the children's kill must stay below the unit's ``TimeoutStartSec=``.
"""

from __future__ import annotations

import re
from pathlib import Path

from monky_deployd.config import Config
from monky_deployd.core.errors import EXIT_HELD, EXIT_WAITING

UNIT = Path(__file__).parents[2] / "packaging" / "systemd" / "monky-deployd.service"
MARGIN_S = 120.0  # python's start, config, killing a clamped child's process group
_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(h|min|m|s|)")
_UNITS = {"h": 3600.0, "min": 60.0, "m": 60.0, "s": 1.0, "": 1.0}


def unit_setting(name: str) -> str:
    values = [
        line.split("=", 1)[1].strip()
        for line in UNIT.read_text().splitlines()
        if line.startswith(f"{name}=")
    ]
    assert len(values) == 1, f"{name}= must be set once in {UNIT.name}"
    return values[0]


def seconds(span: str) -> float:
    """A systemd time span (``45min``, ``1h 30min``, ``2700``, ``90s``) in seconds."""
    parts = _SPAN.findall(span)
    assert parts and "".join(n + u for n, u in parts) == span.replace(" ", ""), span
    return sum(float(n) * _UNITS[u] for n, u in parts)


def test_time_spans_parse_as_systemd_reads_them() -> None:
    assert seconds("45min") == 2700 and seconds("1h 30min") == 5400
    assert seconds("2700") == 2700 and seconds("90s") == 90


def test_the_worst_tick_ends_well_before_systemd_kills_it() -> None:
    cfg = Config(env="env-test")
    worst = cfg.tick_deadline_s + cfg.rollback_budget_s + cfg.tenancy.deadline_s
    limit = seconds(unit_setting("TimeoutStartSec"))
    assert worst + MARGIN_S <= limit, (
        f"tick_deadline_s {cfg.tick_deadline_s:g} + rollback {cfg.rollback_budget_s:g} + "
        f"report {cfg.tenancy.deadline_s:g} = {worst:g} s leaves less than {MARGIN_S:g} s "
        f"before TimeoutStartSec ({limit:g} s)"
    )


def test_every_step_fits_the_tick_and_the_rollback_its_budget() -> None:
    cfg = Config(env="env-test")
    docker = cfg.docker
    for name, value in (
        ("docker.pull_timeout_s", docker.pull_timeout_s),
        ("docker.up_timeout_s", docker.up_timeout_s),
        ("verify.deadline_s", cfg.verify.deadline_s),
        ("rollback_budget_s", cfg.rollback_budget_s),
    ):
        assert value < cfg.tick_deadline_s, f"{name} alone outlasts tick_deadline_s"
    # a rollback whose verify reaches its deadline still ends inside its own budget
    assert cfg.rollback_budget_s >= 2 * docker.up_timeout_s + cfg.verify.deadline_s


def test_a_skipped_apply_does_not_fail_the_unit() -> None:
    # 6: held, backing off, locked, suspended; 7: a new revision waits (window, rollout)
    assert unit_setting("SuccessExitStatus").split() == [str(EXIT_HELD), str(EXIT_WAITING)]


EXAMPLE = Path(__file__).parents[2] / "packaging" / "config.example.yaml"


def test_the_example_config_says_the_defaults_and_its_worst_tick_fits_the_unit() -> None:
    """config.example.yaml "lists the keys with their defaults": each value it shows is the
    code's default (but the box's own env), so a copied example never moves the tick's budget
    past what the unit allows."""
    import yaml

    shown = yaml.safe_load(EXAMPLE.read_text())
    example = Config(**shown)
    default = Config(env=shown["env"]).model_dump(mode="json")

    def differ(value: object, want: object, path: str) -> list[str]:
        if isinstance(value, dict):
            sub = want if isinstance(want, dict) else {}
            return [d for k, v in value.items() for d in differ(v, sub.get(k), f"{path}.{k}")]
        return [] if value == want else [f"{path}: example {value!r}, default {want!r}"]

    assert differ(shown, default, "") == []
    worst = example.tick_deadline_s + example.rollback_budget_s + example.tenancy.deadline_s
    assert worst + MARGIN_S <= seconds(unit_setting("TimeoutStartSec"))
