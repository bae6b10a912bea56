"""adapters.box.docker.hostpath with real files and links (issue 45): ``follow`` walks a path as
the kernel does (checked against ``os.path.realpath`` and ``os.stat`` over generated trees of
directories and links), a dangling link anywhere on the way is named, and a held path swapped
by a real process (another directory renamed in, a link put in its place) is named on the next
look (``held_now``, the Engine API a loopback fake with no container)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd.adapters.box.docker.hostpath import follow, held_now, read_held, write_held
from monky_deployd.config import DockerCfg
from monky_deployd.core.admission.artifact import Bind
from monky_deployd.core.admission.paths import hold
from monky_deployd_testkit.fakes.engine import FakeEngine

NAMES = ("a", "b", "c")
# a tree's entries: a directory, or a link to one of these targets (relative, absolute within
# the tree, up and out, missing, to itself)
TARGETS = ("a", "../b", "b/c", "/ROOT/c", "../../..", "missing", "a/missing", "x", ".")


@st.composite
def trees(draw: st.DrawFn) -> dict[str, str | None]:
    """relative path -> None (a directory) or a link's target ("/ROOT" the tree's root)."""
    entries: dict[str, str | None] = {}
    for first in NAMES:
        kind = draw(st.sampled_from(["dir", "link", "none"]))
        if kind == "dir":
            entries[first] = None
            for second in NAMES:
                if draw(st.booleans()):
                    entries[f"{first}/{second}"] = draw(st.sampled_from([None, *TARGETS]))
        elif kind == "link":
            entries[first] = draw(st.sampled_from(TARGETS))
    return entries


def plant(root: Path, entries: dict[str, str | None]) -> None:
    for rel, target in sorted(entries.items()):
        where = root / rel
        if target is None:
            where.mkdir()
        else:
            os.symlink(target.replace("/ROOT", str(root)), where)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees(), st.lists(st.sampled_from([*NAMES, "..", "x"]), min_size=1, max_size=4))
def test_follow_resolves_as_the_kernel_does_and_names_every_dangling_link(
    entries: dict[str, str | None], parts: list[str]
) -> None:
    root = Path(tempfile.mkdtemp(prefix="hostpath-"))
    try:
        plant(root, entries)
        path = str(root) + "/" + "/".join(parts)
        at = follow(path)
        try:
            real = os.path.realpath(path, strict=True)
        except FileNotFoundError:
            real = None
        except OSError:  # a loop
            assert at.real == "" or at.dangling
            return
        if real is not None:  # it exists: the same place, each part's identity the kernel's
            assert at.real == real and not at.dangling
            for part, dev, ino in at.chain:
                st_ = os.stat(part)
                assert (st_.st_dev, st_.st_ino) == (dev, ino)
            assert at.ident == (os.stat(path).st_dev, os.stat(path).st_ino)
            assert at.is_dir == os.path.isdir(path)
        elif at.real:  # missing: through a dangling link, or a plain missing tail
            links = [v for v in at.visited if os.path.islink(v)]
            if at.dangling:
                assert os.path.islink(at.dangling) and not os.path.exists(at.dangling)
            else:
                assert all(os.path.exists(v) for v in links)
                assert at.ident is None
                # what exists of it is real (no link in the chain) and the engine makes the rest
                assert all(not os.path.islink(p) for p, _, _ in at.chain)
    finally:
        shutil.rmtree(root)


def test_the_attack_as_found_a_link_to_what_the_releases_up_makes_later(tmp_path: Path) -> None:
    """The release binds ``made`` (missing: ``up`` creates it) and ``l -> made/../../..``:
    ``resolve()`` kept the link as written; ``follow`` names it dangling."""
    root = tmp_path / "srv"
    root.mkdir()
    os.symlink(str(root / "made" / ".." / ".." / ".." / "etc"), root / "l")
    at = follow(str(root / "l"))
    assert at.dangling == str(root / "l")
    assert follow(str(root / "made")).dangling == ""  # a plain missing tail: the engine's


@pytest.fixture
def engine() -> Iterator[FakeEngine]:
    with FakeEngine(Path("/var/lib/docker")) as eng:
        yield eng


SWAPS = {
    # a real process changes the path's way after its up: each is named on the next look
    "a link in its place": "import os,sys; os.rename(sys.argv[1], sys.argv[1]+'.old'); "
    "os.symlink('/etc', sys.argv[1])",
    "its parent renamed over": "import os,sys; p=os.path.dirname(sys.argv[1]); "
    "os.makedirs(p+'.new/data'); os.rename(p, p+'.old'); os.rename(p+'.new', p)",
    "a link on its parent": "import os,sys; p=os.path.dirname(sys.argv[1]); "
    "os.rename(p, p+'.old'); os.symlink(p+'.old', p)",
    "removed": "import shutil,sys; shutil.rmtree(sys.argv[1])",
}


@pytest.mark.parametrize("swap", sorted(SWAPS))
def test_a_held_path_swapped_by_a_real_process_is_named(
    tmp_path: Path, engine: FakeEngine, swap: str
) -> None:
    data = tmp_path / "srv" / "app" / "data"
    data.mkdir(parents=True)
    revision = tmp_path / "rev"
    revision.mkdir()
    bind = Bind("web", "volumes", str(data), "service web of this release")
    write_held(revision, hold([bind], {bind.path: follow(bind.path)}))
    assert oct((revision / "paths.held.json").stat().st_mode & 0o777) == "0o600"
    assert read_held(revision) is not None
    docker = DockerCfg(host=engine.host_url)
    assert held_now(docker, revision) == ()
    subprocess.run((sys.executable, "-c", SWAPS[swap], str(data)), check=True)
    [(service, why)] = held_now(docker, revision)
    assert service == "web" and why.startswith(f"{data} (volumes) ")
    assert any(p.startswith("/containers/json") for p in engine.paths)


def test_nothing_held_asks_the_engine_nothing(tmp_path: Path, engine: FakeEngine) -> None:
    assert held_now(DockerCfg(host=engine.host_url), tmp_path) == ()
    (tmp_path / "paths.held.json").write_text("not json")
    assert held_now(DockerCfg(host=engine.host_url), tmp_path) == ()
    assert engine.paths == []
