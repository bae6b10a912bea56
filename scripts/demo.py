"""The main job, shown end to end: one real tick against loopback reference services.

Starts the reference tenancy and OpenBao fakes (monky_deployd_testkit.fakes) on 127.0.0.1, a real
registry with htpasswd auth holding a real busybox image, publishes a desired bundle, then runs
`monky-deployd apply --once` twice: the first tick applies the bundle to real containers, the
second is a no-op. Without a reachable Docker engine it says so and prints what would have run.
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


def tick(config: Path) -> int:
    argv = (sys.executable, "-m", "monky_deployd.cli", "apply", "--once", "--config", str(config))
    print("$ monky-deployd apply --once --config", config, flush=True)
    return subprocess.run(argv, check=False).returncode


def bundle(image: str, registry_host: str, project: str) -> dict[str, object]:
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
        "DB_PASSWORD=${DB_PASSWORD}\nLOG_LEVEL=info\n",
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
            finally:
                subprocess.run(
                    ("docker", "compose", "--project-name", project, "down", "--remove-orphans"),
                    check=False,
                    capture_output=True,
                )
        return 0 if rc1 == rc2 == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
