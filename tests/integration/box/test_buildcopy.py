"""Issue 45: what a build reads is copied into the revision without following any link
(adapters.box.state.buildcopy), on real files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd.adapters.box.state import buildcopy
from monky_deployd.core.admission.builds import Copy
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError


def context(root: Path) -> Path:
    ctx = root / "ctx"
    (ctx / "sub").mkdir(parents=True)
    (ctx / "Dockerfile").write_text("FROM scratch\nCOPY . /app\n")
    (ctx / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (ctx / "sub" / "run.sh").chmod(0o4755)  # setuid: never kept
    os.symlink("/etc/shadow", ctx / "shadow")  # copied as a link: never followed
    os.symlink("sub/run.sh", ctx / "inner")
    return ctx


def test_a_context_is_copied_entry_by_entry_links_as_links(tmp_path: Path) -> None:
    ctx = context(tmp_path / "src")
    into = tmp_path / "rev"
    buildcopy.make([Copy("web", "build.context", str(ctx), "build/0/context")], into)
    copy = into / "build/0/context"
    assert sorted(p.name for p in copy.rglob("*")) == sorted(
        ["Dockerfile", "sub", "run.sh", "shadow", "inner"]
    )
    assert (copy / "Dockerfile").read_text() == "FROM scratch\nCOPY . /app\n"
    assert os.readlink(copy / "shadow") == "/etc/shadow" and (copy / "shadow").is_symlink()
    assert os.readlink(copy / "inner") == "sub/run.sh"
    assert stat.S_IMODE(os.lstat(copy / "sub" / "run.sh").st_mode) == 0o755


def test_an_empty_source_is_an_empty_directory(tmp_path: Path) -> None:
    buildcopy.make([Copy("web", "build.context", "", "build/0/context")], tmp_path / "rev")
    assert list((tmp_path / "rev/build/0/context").iterdir()) == []


@settings(max_examples=12, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 3), st.sampled_from(["dir", "file"]))
def test_a_link_on_the_way_since_the_judge_is_refused(tmp_path: Path, at: int, kind: str) -> None:
    """A container swaps a directory on the judged path (or the context itself) for a link
    to the agent's state dir: the copy refuses, nothing of the target is copied."""
    base = tmp_path / f"case-{at}-{kind}"
    secret = base / "state"
    secret.mkdir(parents=True)
    (secret / "token.json").write_text("lease-token")
    parts = ["a", "b", "c", "ctx"]
    judged = base.joinpath(*parts)
    judged.mkdir(parents=True)
    swapped = base.joinpath(*parts[: at + 1])
    os.rename(swapped, swapped.with_name(swapped.name + ".old"))
    os.symlink(secret, swapped)
    into = base / "rev"
    if kind == "dir":
        copies = [Copy("web", "build.context", str(judged), "build/0/context")]
    else:
        copies = [Copy("web", "build.dockerfile", str(judged), "build/0/Dockerfile", True)]
    with pytest.raises(DeployError) as err:
        buildcopy.make(copies, into)
    assert err.value.code is Code.POLICY_BUILD_CONTEXT
    assert str(judged) in err.value.message and "service web" in err.value.message
    assert "image:" in err.value.hint
    assert not any(p.name == "token.json" for p in into.rglob("*"))


def test_a_dockerfile_is_one_regular_file(tmp_path: Path) -> None:
    src = tmp_path / "Dockerfile.web"
    src.write_text("FROM scratch\n")
    into = tmp_path / "rev"
    buildcopy.make([Copy("w", "build.dockerfile", str(src), "build/0/Dockerfile", True)], into)
    assert (into / "build/0/Dockerfile").read_text() == "FROM scratch\n"
    os.mkfifo(tmp_path / "fifo")
    for bad in (tmp_path / "fifo", tmp_path):
        with pytest.raises(DeployError) as err:
            buildcopy.make([Copy("w", "build.dockerfile", str(bad), "x/D", True)], tmp_path / "r2")
        assert err.value.code is Code.POLICY_BUILD_CONTEXT


def test_a_dockerignore_that_is_a_link_is_refused(tmp_path: Path) -> None:
    """compose and the docker CLI open a context's .dockerignore following links."""
    ctx = context(tmp_path / "src")
    os.symlink("/etc/shadow", ctx / ".dockerignore")
    with pytest.raises(DeployError) as err:
        buildcopy.make([Copy("w", "build.context", str(ctx), "b/0/context")], tmp_path / "rev")
    assert ".dockerignore is not a regular file" in err.value.message
    (ctx / ".dockerignore").unlink()
    (ctx / ".dockerignore").write_text("*.log\n")
    buildcopy.make([Copy("w", "build.context", str(ctx), "b/0/context")], tmp_path / "ok")
    assert (tmp_path / "ok/b/0/context/.dockerignore").read_text() == "*.log\n"


def test_a_device_fifo_or_socket_in_a_context_is_refused(tmp_path: Path) -> None:
    ctx = context(tmp_path / "src")
    os.mkfifo(ctx / "sub" / "pipe")
    with pytest.raises(DeployError) as err:
        buildcopy.make([Copy("w", "build.context", str(ctx), "b/0/context")], tmp_path / "rev")
    assert err.value.code is Code.POLICY_BUILD_CONTEXT
    assert "pipe is neither a directory, a regular file nor a link" in err.value.message


def test_a_context_beyond_the_caps_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = context(tmp_path / "src")
    monkeypatch.setattr(buildcopy, "MAX_ENTRIES", 3)
    with pytest.raises(DeployError) as err:
        buildcopy.make([Copy("w", "build.context", str(ctx), "b/0/context")], tmp_path / "r1")
    assert "more than 3 entries" in err.value.message
    monkeypatch.setattr(buildcopy, "MAX_ENTRIES", 100)
    monkeypatch.setattr(buildcopy, "MAX_BYTES", 8)
    with pytest.raises(DeployError) as err:
        buildcopy.make([Copy("w", "build.context", str(ctx), "b/0/context")], tmp_path / "r2")
    assert "MiB" in err.value.message and err.value.code is Code.POLICY_BUILD_CONTEXT
    deep = tmp_path / "deep"
    (deep / "/".join(["d"] * 8)).mkdir(parents=True)
    monkeypatch.setattr(buildcopy, "MAX_DEPTH", 4)
    with pytest.raises(DeployError) as err:
        buildcopy.make([Copy("w", "build.context", str(deep), "b/0/context")], tmp_path / "r3")
    assert "directories deep" in err.value.message
