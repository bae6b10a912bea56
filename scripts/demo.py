"""The main job, shown end to end: real ticks against loopback reference services.

Starts the reference tenancy and OpenBao fakes (monky_deployd_testkit.fakes) on 127.0.0.1, a real
registry with htpasswd auth holding a real busybox image, publishes a desired bundle, then runs
`monky-deployd apply --once` twice: the first tick applies the bundle to real containers, the
second is a no-op. Then `status`, a new revision r2 and `plan` (when this version has it), and
`doctor`. Without a reachable Docker engine it says so and prints what would have run
(scripts/demo.sh starts the engine first when it can).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from monky_deployd_testkit import dockerlab
from monky_deployd_testkit.fakes.estate import Estate

ROOT = Path(__file__).resolve().parents[1]

ENV = "env-demo-01"


def say(text: str) -> None:
    print(f"\n### {text}", flush=True)


def cli(*args: str, show: bool = True) -> int:
    """``monky-deployd <args>`` as the operator types it; its exit status."""
    if show:
        print("$ monky-deployd", " ".join(args), flush=True)
    argv = (sys.executable, "-m", "monky_deployd.cli", *args)
    quiet = {} if show else {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    return subprocess.run(argv, check=False, **quiet).returncode  # type: ignore[call-overload]


def tick(config: Path) -> int:
    return cli("apply", "--once", "--config", str(config), "--log-format", "text")


def has_plan() -> bool:
    """``plan`` is newer than this demo: show it only where this version has it."""
    return cli("plan", "--help", show=False) == 0


def bundle(image: str, registry_host: str, project: str, level: str = "info") -> dict[str, object]:
    compose = {
        "services": {
            "web": {
                "image": image,
                "command": ["sleep", "3600"],
                "env_file": [".env"],
                "network_mode": "none",
                "stop_grace_period": "1s",
            }
        }
    }
    return {
        "project": project,
        "compose": yaml.safe_dump(compose),
        "env_template": "# rendered by the agent: substitutes every ${VAR}\n"
        f"DB_PASSWORD=${{DB_PASSWORD}}\nLOG_LEVEL={level}\n",
        "manifest": [
            {"name": "DB_PASSWORD", "path": f"envs/{ENV}/app", "key": "db_password"},
            {
                "name": "registry",
                "path": f"envs/{ENV}/registry",
                "key": "robot",
                "use": "registry-auth",
            },
        ],
        "registry_host": registry_host,
    }


def main() -> int:
    try:
        dockerlab.docker_available()
    except dockerlab.DockerUnavailable as exc:
        say("no Docker engine is reachable, so no containers can be started")
        print(f"    {exc}")
        print(
            "    Start one with `scripts/docker-up.sh` (as root) and run this again. With an\n"
            "    engine, the demo would: start the tenancy and OpenBao reference fakes on\n"
            "    127.0.0.1, start a registry with htpasswd auth and push a busybox image to it,\n"
            "    publish revision r1, then run `monky-deployd apply --once` twice:\n"
            "      tick 1: token (grant login, lease) -> check-in (r1) -> secrets -> render .env\n"
            "              -> registry credential -> disk pre-flight -> docker compose pull\n"
            "              -> docker compose up -d -> report            (exit 0, outcome applied)\n"
            "      tick 2: token (reused) -> check-in (304)  -> containers up (exit 0, noop)"
        )
        return 1
    with tempfile.TemporaryDirectory(prefix="monky-demo-") as tmp_s, Estate(env=ENV) as estate:
        tmp = Path(tmp_s)
        say("building a busybox image and starting a registry with htpasswd auth")
        image = dockerlab.ensure_busybox_image()
        with dockerlab.Registry() as reg:
            ref = reg.push(image, f"{ENV}/web", "1.0")
            estate.bao.set_secret(f"envs/{ENV}/app", {"db_password": "demo-$ecret 'x' #1"})
            estate.bao.set_secret(
                f"envs/{ENV}/registry", {"robot": f"{reg.username}:{reg.password}"}
            )
            project = "monkydemo"
            estate.tenancy.set_desired("r1", bundle(ref, reg.host, project))
            cfg = estate.config(
                state_dir=tmp / "state", grant_file=estate.write_grant(tmp / "grant.jwt")
            )
            # verify for 5 s, not the default 30 s: the demo shows the step, not its patience
            cfg["verify"] = {"stable_s": 5, "deadline_s": 60}
            config = tmp / "config.yaml"
            config.write_text(yaml.safe_dump(cfg))
            say(
                f"tenancy at {estate.tenancy.url}, OpenBao at {estate.bao.url}, registry {reg.host}"
            )
            try:
                say("tick 1: applies revision r1 to real containers and verifies them (5 s)")
                rc1 = tick(config)
                subprocess.run(
                    ("docker", "ps", "--filter", f"label=com.docker.compose.project={project}"),
                    check=False,
                )
                say("tick 2: steady state (no pull, no report)")
                rc2 = tick(config)
                say(
                    f"exit codes {rc1} and {rc2}; leases spent: {len(estate.tenancy.leases)}; "
                    f"reports: {len(estate.tenancy.reports)}; registry manifest requests: "
                    f"{reg.request_count('/manifests/', ('GET', 'HEAD'))}"
                )
                say("status: what the box knows, from its state dir alone")
                cli("status", "--config", str(config))
                estate.tenancy.set_desired("r2", bundle(ref, reg.host, project, "debug"))
                if has_plan():
                    say("tenancy publishes r2 (LOG_LEVEL=debug): plan shows what an apply would do")
                    cli("plan", "--config", str(config))
                else:
                    say("tenancy publishes r2 (this version has no `plan` command yet)")
                say(
                    "doctor: every check live, one line each (the package and its timer are not "
                    "installed on this machine, so the timer line cannot be OK here)"
                )
                rc3 = cli("doctor", "--config", str(config))
                say(f"doctor exit {rc3} (0 all OK, 1 warnings, 2 a failure)")
            finally:
                subprocess.run(
                    ("docker", "compose", "--project-name", project, "down", "--remove-orphans"),
                    check=False,
                    capture_output=True,
                )
        return 0 if rc1 == rc2 == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
