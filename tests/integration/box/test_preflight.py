"""Disk pre-flight on real small filesystems (tmpfs) and a real second dockerd (R3).

- pull_targets: data-root, plus containerd's root when the daemon uses the containerd store;
- check_space: each filesystem once, DISK_INSUFFICIENT naming the path, the filesystem, free and
  needed bytes (the env-dev-08 case: room where the agent looked, none where the pull wrote);
- docker_info (the Engine API's GET /info): an engine that cannot answer (socket missing, port
  closed, HTTP 500, not JSON, no DockerRootDir) is DOCKER_UNAVAILABLE, never "disk"; so is a
  docker CLI missing from PATH;
- a dockerd whose data-root is a 48 MiB tmpfs and an image larger than that: the pre-flight
  refuses before any registry request, while the same pull without it dies with "no space left on
  device".
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd.adapters.box import runner
from monky_deployd.adapters.box.docker import docker_config, preflight
from monky_deployd.config import DiskCfg, DockerCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError
from monky_deployd.core.render import pullerrors, registry_cred
from monky_deployd_testkit.dockerlab import (
    Registry,
    docker_available,
    remove_image,
    terminate,
)
from monky_deployd_testkit.fakes.engine import FakeEngine

MIB = 1024 * 1024
SNAPSHOTTER_STATUS = [["driver-type", "io.containerd.snapshotter.v1"]]


@contextmanager
def tmpfs(size_mib: int, name: str = "fs") -> Iterator[Path]:
    """A real tmpfs of ``size_mib`` mounted under /tmp; unmounted and removed afterwards."""
    base = Path(tempfile.mkdtemp(prefix="monky-preflight-"))
    mount = base / name
    mount.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mount)], check=True
    )
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def fill(mount: Path, leave_mib: int) -> None:
    """Write a file so that about ``leave_mib`` MiB stay free."""
    vfs = os.statvfs(mount)
    size = vfs.f_bavail * vfs.f_frsize - leave_mib * MIB
    with open(mount / "filler", "wb") as f:
        f.write(b"\0" * size)  # tmpfs stores zeros too


def free(path: Path) -> int:
    vfs = os.statvfs(path)
    return vfs.f_bavail * vfs.f_frsize


# --- pull_targets ---------------------------------------------------------------------------


def cfg(tmp_path: Path, **kw: object) -> DockerCfg:
    kw.setdefault("containerd_config", tmp_path / "absent" / "config.toml")
    return DockerCfg.model_validate(kw)


def test_overlay2_daemon_writes_only_to_data_root(tmp_path: Path) -> None:
    info = {"DockerRootDir": "/var/lib/docker", "Driver": "overlay2", "DriverStatus": []}
    assert preflight.pull_targets(info, cfg(tmp_path)) == [Path("/var/lib/docker")]


@pytest.mark.parametrize(
    "info",
    [
        {"Driver": "overlayfs", "DriverStatus": SNAPSHOTTER_STATUS},
        {"Driver": "overlayfs", "DriverStatus": None},
        {"Driver": "stargz", "DriverStatus": SNAPSHOTTER_STATUS},
    ],
)
def test_containerd_store_adds_containerd_root(tmp_path: Path, info: dict[str, object]) -> None:
    info = {"DockerRootDir": "/var/lib/docker", **info}
    assert preflight.pull_targets(info, cfg(tmp_path)) == [
        Path("/var/lib/docker"),
        Path("/var/lib/containerd"),
    ]


def test_containerd_root_from_config_toml(tmp_path: Path) -> None:
    toml = tmp_path / "config.toml"
    toml.write_text('version = 2\nroot = "/data/containerd"\nstate = "/run/containerd"\n')
    info = {"DockerRootDir": "/var/lib/docker", "Driver": "overlayfs"}
    got = preflight.pull_targets(info, cfg(tmp_path, containerd_config=toml))
    assert got == [Path("/var/lib/docker"), Path("/data/containerd")]


def test_containerd_root_override_wins(tmp_path: Path) -> None:
    toml = tmp_path / "config.toml"
    toml.write_text('root = "/data/containerd"\n')
    docker_cfg = cfg(tmp_path, containerd_config=toml, containerd_root=Path("/srv/ctr"))
    info = {"DockerRootDir": "/var/lib/docker", "Driver": "overlayfs"}
    assert preflight.pull_targets(info, docker_cfg)[1] == Path("/srv/ctr")


def test_config_toml_without_root_means_default(tmp_path: Path) -> None:
    toml = tmp_path / "config.toml"
    toml.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nroot = "/not/top"\n')
    info = {"DockerRootDir": "/var/lib/docker", "Driver": "overlayfs"}
    got = preflight.pull_targets(info, cfg(tmp_path, containerd_config=toml))
    assert got[1] == Path("/var/lib/containerd")


@pytest.mark.parametrize("text", ['root = "/x"\nroot = "/y"\n', "root = [", 'root = "rel/dir"'])
def test_bad_config_toml_is_refused_not_guessed(tmp_path: Path, text: str) -> None:
    toml = tmp_path / "config.toml"
    toml.write_text(text)
    info = {"DockerRootDir": "/var/lib/docker", "Driver": "overlayfs"}
    with pytest.raises(DeployError) as err:
        preflight.pull_targets(info, cfg(tmp_path, containerd_config=toml))
    assert err.value.code == "CONTAINERD_CONFIG_UNREADABLE"
    assert str(toml) in err.value.message


def test_info_without_data_root_is_a_docker_fault(tmp_path: Path) -> None:
    with pytest.raises(DeployError) as err:
        preflight.pull_targets({"DockerRootDir": ""}, cfg(tmp_path))
    assert err.value.code == "DOCKER_UNAVAILABLE"


# --- check_space on real filesystems ---------------------------------------------------------


def test_env_dev_08_case_refuses_naming_the_tight_containerd_root(tmp_path: Path) -> None:
    with tmpfs(64, "data-root") as roomy, tmpfs(16, "containerd") as tight:
        fill(tight, leave_mib=4)
        toml = tmp_path / "config.toml"
        toml.write_text(f'version = 2\nroot = "{tight}"\n')
        info = {
            "DockerRootDir": str(roomy),
            "Driver": "overlayfs",
            "DriverStatus": SNAPSHOTTER_STATUS,
        }
        docker_cfg = DockerCfg(containerd_config=toml)
        tight_free = free(tight)
        with pytest.raises(DeployError) as err:
            preflight.run(info, docker_cfg, DiskCfg(headroom_bytes=4 * MIB), 8 * MIB)
    e = err.value
    assert e.code == "DISK_INSUFFICIENT"
    assert e.outcome == "refused"
    first = str(e).splitlines()[0]
    assert str(tight) in first, "names the path the pull writes to"
    assert f"filesystem {tight} (tmpfs)" in first, "names the filesystem"
    assert f"({tight_free} bytes)" in first, "free bytes, exact"
    assert f"({12 * MIB} bytes)" in first, "needed bytes, exact"
    assert str(roomy) not in first, "the roomy data-root is not the fault"
    assert f"ok: {roomy}" in e.detail and f"SHORT: {tight}" in e.detail


def test_both_fit(tmp_path: Path) -> None:
    with tmpfs(32, "a") as a, tmpfs(32, "b") as b:
        got = preflight.check_space([a, b], 8 * MIB, 4 * MIB)
        assert [m.mount_point for m in got] == [a, b]
        assert all(m.ok and m.required_bytes == 12 * MIB for m in got)
        assert got[0].free_bytes == free(a)


def test_headroom_floor_applies_without_need_bytes() -> None:
    with tmpfs(16) as small:
        with pytest.raises(DeployError) as err:
            preflight.check_space([small], None, DiskCfg().headroom_bytes)
        assert err.value.code == "DISK_INSUFFICIENT"
        assert "no disk_need_bytes declared" in err.value.hint
        assert preflight.check_space([small], None, 1 * MIB)[0].ok


def test_one_filesystem_is_measured_once() -> None:
    with tmpfs(16) as fs:
        (fs / "docker").mkdir()
        got = preflight.check_space([fs / "docker", fs / "containerd"], None, MIB)
        assert len(got) == 1
        assert got[0].all_paths == (fs / "docker", fs / "containerd")
        assert got[0].measured_at == fs / "docker"


def test_missing_path_is_measured_at_its_nearest_parent() -> None:
    with tmpfs(16) as fs:
        fill(fs, leave_mib=2)
        with pytest.raises(DeployError) as err:
            preflight.check_space([fs / "not" / "yet"], 4 * MIB, 0)
        assert f"{fs}/not/yet is on filesystem {fs} (tmpfs)" in err.value.message


def test_mount_point_with_a_space_in_its_name() -> None:
    with tmpfs(16, "data root") as fs:
        mount, fs_type = preflight.mount_of(fs)
        assert (mount, fs_type) == (fs, "tmpfs")


def test_human_sizes() -> None:
    assert preflight.human(3006477107) == "2.8 GiB (3006477107 bytes)"
    assert preflight.human(512) == "512 B (512 bytes)"


# --- docker info: the Engine API's GET /info -------------------------------------------------


def docker_on_path(tmp_path: Path) -> dict[str, str]:
    """A child's environment whose PATH holds an executable ``docker`` (never run here)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "docker"
    stub.write_text("#!/bin/sh\nexit 99\n")
    stub.chmod(0o755)
    return {"PATH": str(bin_dir)}


@pytest.mark.docker
def test_docker_info_from_the_real_daemon_is_what_the_cli_says() -> None:
    docker_available()
    here = DockerCfg(host=os.environ.get("DOCKER_HOST"))  # the suite's second engine too
    info = preflight.docker_info(here, runner.base_env())
    cli = json.loads(
        subprocess.run(
            ["docker", "info", "--format", "{{json .}}"], capture_output=True, check=True
        ).stdout
    )
    for key in ("DockerRootDir", "Driver", "DriverStatus", "ServerVersion"):
        assert info[key] == cli[key], key
    api_reg, cli_reg = info["RegistryConfig"], cli["RegistryConfig"]
    assert isinstance(api_reg, dict)
    for key in ("InsecureRegistryCIDRs", "IndexConfigs"):  # what registry.insecure reads
        assert api_reg[key] == cli_reg[key], key
    assert Path(str(info["DockerRootDir"])).is_dir()
    got = preflight.run(info, here, DiskCfg(headroom_bytes=0), None)
    assert got and got[0].path == Path(str(info["DockerRootDir"]))


@pytest.fixture(scope="module")
def engine() -> Iterator[FakeEngine]:
    with FakeEngine(Path("/var/lib/docker")) as eng:
        yield eng


# each way the engine cannot say where pulls write: (docker.host, a fault of the fake engine)
ENGINE_FAULTS = {
    "socket missing": ("unix-missing", None),
    "socket is a file": ("unix-file", None),
    "port closed": ("tcp-closed", None),
    "HTTP 500": ("tcp", (500, b'{"message": "daemon is shutting down"}')),
    "not JSON": ("tcp", (200, b"<html>proxy</html>")),
    "not an object": ("tcp", (200, b'["DockerRootDir"]')),
    "no DockerRootDir": ("tcp", (200, b'{"Driver": "overlay2"}')),
    "empty DockerRootDir": ("tcp", (200, b'{"DockerRootDir": ""}')),
}


@settings(
    max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(fault=st.sampled_from(sorted(ENGINE_FAULTS)))
def test_an_engine_that_cannot_answer_is_docker_unavailable_not_disk(
    tmp_path: Path, engine: FakeEngine, fault: str
) -> None:
    how, answer = ENGINE_FAULTS[fault]
    if how == "unix-missing":
        host, where = f"unix://{tmp_path}/no-daemon.sock", f"{tmp_path}/no-daemon.sock"
    elif how == "unix-file":
        (tmp_path / "file.sock").write_text("")
        host, where = f"unix://{tmp_path}/file.sock", f"{tmp_path}/file.sock"
    elif how == "tcp-closed":
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        host, where = f"tcp://127.0.0.1:{port}", f"http://127.0.0.1:{port}"
    else:
        host, where = engine.host_url, engine.url
    if answer is not None:
        engine.fail_next(*answer, path_contains="/info")
    try:
        with pytest.raises(DeployError) as err:
            preflight.docker_info(DockerCfg(host=host), docker_on_path(tmp_path))
    finally:
        engine.clear_faults()
    e = err.value
    assert e.code is Code.DOCKER_UNAVAILABLE
    assert e.message.startswith("Docker's daemon cannot be asked where pulls write: ")
    assert f"the Docker engine at {where} " in e.message
    assert e.message.endswith("(this is a Docker fault, not a disk fault)")


def test_a_docker_host_neither_unix_nor_tcp_is_named_as_such(tmp_path: Path) -> None:
    with pytest.raises(DeployError) as err:
        preflight.docker_info(DockerCfg(host="ssh://box"), docker_on_path(tmp_path))
    assert err.value.code is Code.DOCKER_HOST_UNSUPPORTED


def test_missing_docker_binary_is_docker_unavailable(tmp_path: Path, engine: FakeEngine) -> None:
    before = len(engine.paths)
    binary = str(tmp_path / "docker")
    with pytest.raises(DeployError) as err:
        preflight.docker_info(DockerCfg(binary=binary, host=engine.host_url), runner.base_env())
    assert err.value.code is Code.DOCKER_UNAVAILABLE
    assert f"the docker CLI {binary!r} (docker.binary) is not found on PATH=" in err.value.message
    assert len(engine.paths) == before  # the engine is not asked: no pull could run anyway


def test_the_fake_engines_info_is_read(tmp_path: Path, engine: FakeEngine) -> None:
    info = preflight.docker_info(DockerCfg(host=engine.host_url), docker_on_path(tmp_path))
    assert info["DockerRootDir"] == "/var/lib/docker"
    assert engine.paths[-1] == "/info"


# --- a daemon whose data-root is too small for the image -------------------------------------


@pytest.fixture(scope="module")
def small_dockerd() -> Iterator[str]:
    """A second real dockerd (data-root on a 48 MiB tmpfs); yields its DOCKER_HOST."""
    docker_available()
    with tmpfs(48, "data-root") as root:
        base = root.parent
        sock = base / "d.sock"
        log = open(base / "dockerd.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [
                "dockerd",
                "--data-root",
                str(root),
                "--exec-root",
                str(base / "exec"),
                "--pidfile",
                str(base / "dockerd.pid"),
                "-H",
                f"unix://{sock}",
                "--iptables=false",
                "--ip6tables=false",
                "--bridge=none",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        host = f"unix://{sock}"
        try:
            deadline = time.monotonic() + 60
            while True:
                probe = subprocess.run(
                    ["docker", "-H", host, "info", "--format", "{{.ServerVersion}}"],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if probe.returncode == 0 and probe.stdout.strip():
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        "second dockerd did not start: "
                        + (base / "dockerd.log").read_text(errors="replace")[-1500:]
                    )
                time.sleep(0.5)
            yield host
        finally:
            terminate(proc, wait_s=30)


@pytest.fixture(scope="module")
def big_image(registry: Registry, busybox_image: str) -> Iterator[tuple[str, int]]:
    """A 64 MiB (random, incompressible) image in the test registry: (ref, size in bytes)."""
    tag = f"monky-test/big-{uuid.uuid4().hex[:8]}:v1"
    with tempfile.TemporaryDirectory(prefix="monky-big-") as ctx:
        Path(ctx, "blob").write_bytes(os.urandom(64 * MIB))
        Path(ctx, "Dockerfile").write_text(f"FROM {busybox_image}\nCOPY blob /blob\n")
        subprocess.run(
            ["docker", "build", "-q", "-t", tag, ctx],
            env=dict(os.environ, DOCKER_BUILDKIT="0"),
            check=True,
            capture_output=True,
        )
    try:
        size = int(
            subprocess.run(
                ["docker", "image", "inspect", "--format", "{{.Size}}", tag],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        yield registry.push(tag, tag.split(":")[0], "v1"), size
    finally:
        remove_image(tag)


@pytest.mark.docker
def test_preflight_refuses_what_would_die_mid_pull(
    small_dockerd: str, big_image: tuple[str, int], registry: Registry, tmp_path: Path
) -> None:
    ref, size = big_image
    docker_dir = tmp_path / "docker"
    cred = registry_cred.Credential(registry.username, registry.password)
    docker_config.write_docker_config(docker_dir, registry.host, cred)
    env = runner.base_env(docker_config.docker_env(docker_dir, small_dockerd))
    (tmp_path / "compose.yaml").write_text(f"services:\n  big:\n    image: {ref}\n")
    docker_cfg = DockerCfg(host=small_dockerd, containerd_config=tmp_path / "absent.toml")

    # What the tick does: the engine's info, then the pre-flight, and only then the pull.
    before = registry.request_count("/v2/")
    info = preflight.docker_info(docker_cfg, env)
    data_root = Path(str(info["DockerRootDir"]))
    for need, headroom in ((size, 0), (None, DiskCfg().headroom_bytes)):
        with pytest.raises(DeployError) as err:
            preflight.run(info, docker_cfg, DiskCfg(headroom_bytes=headroom), need)
        assert err.value.code == "DISK_INSUFFICIENT"
        assert f"{data_root} is on filesystem {data_root} (tmpfs)" in err.value.message
    assert registry.request_count("/v2/") == before, "refused before any registry request"

    # Without the pre-flight the same pull dies mid-way with the daemon's words.
    pull = runner.run(
        ("docker", "compose", "-p", f"monky-big-{uuid.uuid4().hex[:8]}", "pull"),
        env=env,
        cwd=str(tmp_path),
        timeout=300,
        check=False,
    )
    assert pull.returncode != 0
    assert registry.request_count("/v2/") > before
    code, line = pullerrors.classify(pull.stderr)
    assert code == "DISK_FULL", line
    assert "no space left on device" in line
