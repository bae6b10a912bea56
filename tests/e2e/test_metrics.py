"""The metrics textfile for real: the CLI's ticks (separate processes) write it, Debian's
prometheus-node-exporter serves it (``--collector.textfile.directory``) on a free loopback port,
scraped over HTTP; ``promtool check metrics`` finds nothing to say. Counters come from the tick
ledger, so they survive each tick's process; a quiet tick touches the file and imports no
prometheus_client. No Docker: the ticks are idle, or refused at the bundle check.

Needs ``prometheus-node-exporter`` and ``prometheus`` (promtool) from Debian: scripts/docker-up.sh
installs them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from monky_deployd_testkit.fakes.estate import Estate
from monky_deployd_testkit.lab import CLI

ENV = "env-metrics-01"
BAD = {"project": "shop", "compose": ""}  # refused at the bundle check: no Docker needed
EXPORTER = "prometheus-node-exporter"


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI"):
            pytest.fail(f"{name} is missing: scripts/docker-up.sh installs it")
        pytest.skip(f"{name} is not installed (scripts/docker-up.sh installs it)")
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def textfile_dir(tmp_path: Path) -> Path:
    d = tmp_path / "textfile"
    d.mkdir()
    return d


@pytest.fixture
def exporter(textfile_dir: Path, tmp_path: Path) -> Iterator[str]:
    """node-exporter with only the textfile collector; its /metrics URL."""
    binary = _tool(EXPORTER)
    port = _free_port()
    log = (tmp_path / "node-exporter.log").open("w")
    proc = subprocess.Popen(
        (
            binary,
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={textfile_dir}",
        ),
        stdout=log,
        stderr=log,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=2).close()
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "node-exporter.log").read_text()
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def scrape(url: str) -> dict[str, float]:
    """Every monky_deployd sample and the textfile's mtime, by its full series name."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(("monky_deployd_", "node_textfile_")):
            series, _, value = line.rpartition(" ")
            out[series] = float(value)
    return out


def test_counters_survive_ticks_and_node_exporter_serves_them(
    exporter: str, textfile_dir: Path, tmp_path: Path
) -> None:
    promtool = _tool("promtool")
    with Estate(env=ENV) as est:
        cfg = est.config(
            state_dir=tmp_path / "state",
            grant_file=est.write_grant(tmp_path / "grant.jwt"),
            metrics={"textfile_dir": str(textfile_dir)},
        )
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump(cfg))

        def tick() -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                (
                    *CLI[:1],
                    "-X",
                    "importtime",
                    *CLI[1:],
                    "apply",
                    "--once",
                    "--config",
                    str(config),
                ),
                capture_output=True,
                text=True,
                env={"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")},
                timeout=120,
                check=False,
            )

        first = tick()
        assert first.returncode == 0, first.stdout + first.stderr
        prom = textfile_dir / "monky-deployd.prom"
        assert (prom.stat().st_mode & 0o777) == 0o644
        m = scrape(exporter)
        assert m['monky_deployd_ticks_total{outcome="idle"}'] == 1
        assert m['monky_deployd_last_tick_outcome{outcome="idle"}'] == 1
        assert m["monky_deployd_leases_total"] == 1 and m["monky_deployd_leases_last_hour"] == 1
        assert (
            m[
                'monky_deployd_agent_info{applied_revision="",desired_revision="",version="'
                + _version()
                + '"}'
            ]
            == 1
        )
        assert "node_textfile_scrape_error" in m and m["node_textfile_scrape_error"] == 0

        est.tenancy.set_desired("r1", BAD)
        second = tick()
        assert second.returncode == 5, second.stdout
        m = scrape(exporter)
        assert m['monky_deployd_ticks_total{outcome="idle"}'] == 1, "survived the process"
        assert m['monky_deployd_ticks_total{outcome="refused"}'] == 1
        assert m["monky_deployd_consecutive_failures"] == 1
        assert (
            m["monky_deployd_held"] == 1
            and m["monky_deployd_backoff_next_attempt_timestamp_seconds"] > 0
        )
        assert m["monky_deployd_leases_total"] == 1, "the token was reused: no lease"
        assert "prometheus_client" in second.stderr  # imported to rewrite the file

        check = subprocess.run(
            (promtool, "check", "metrics"),
            input=prom.read_text(),
            capture_output=True,
            text=True,
            check=False,
        )
        assert check.returncode == 0 and check.stdout + check.stderr == "", (
            check.stdout + check.stderr
        )

        # two ticks in backoff: the first changes the outcome (rewrite), the second is quiet
        assert tick().returncode == 6
        content, mtime = prom.read_bytes(), prom.stat().st_mtime_ns
        time.sleep(0.05)
        quiet = tick()
        assert quiet.returncode == 6
        assert prom.read_bytes() == content, "a quiet tick does not rewrite the file"
        assert prom.stat().st_mtime_ns > mtime, "but touches it: node_textfile_mtime_seconds"
        assert "prometheus_client" not in quiet.stderr, "nor imports prometheus_client"
        assert scrape(exporter)[f'node_textfile_mtime_seconds{{file="{prom}"}}'] >= mtime // 10**9


def _version() -> str:
    from monky_deployd import __version__

    return __version__
