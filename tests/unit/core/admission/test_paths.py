"""core.admission.paths (issue 45): host paths judged by what following them met, writers by
identity, held paths compared on every tick. Over generated trees of facts: directories with
identities, reached by their real path or through a link (another text), writers bound by
either."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.admission.artifact import Bind, Mount
from monky_deployd.core.admission.host import HostPath
from monky_deployd.core.admission.paths import (
    Hold,
    Where,
    above,
    faults,
    held_text,
    hold,
    moved,
    read_held,
)
from monky_deployd.core.errors import Code

DEV = 7
HIDDEN = ("/tmp", "/var/tmp", "/home", "/root", "/run/user")


class Tree:
    """Directories ``/t/d1/d4...`` (node i's parent ``parents[i]``), node i's identity
    ``(DEV, 100 + i)``, each also reached through a link ``/links/l<i>``."""

    def __init__(self, parents: list[int]) -> None:
        self.parents = parents
        self.paths: list[str] = []
        for i, p in enumerate(parents):
            self.paths.append("/t" if i == 0 else f"{self.paths[p]}/d{i}")

    def ident(self, i: int) -> tuple[int, int]:
        return DEV, 100 + i

    def ancestors(self, i: int) -> list[int]:
        """i's ancestors, the root first (i excluded)."""
        out = []
        while i != 0:
            i = self.parents[i]
            out.append(i)
        return list(reversed(out))

    def where(self, i: int, written: str = "") -> Where:
        chain = [("/", DEV, 1), *((self.paths[a], *self.ident(a)) for a in self.ancestors(i))]
        chain.append((self.paths[i], *self.ident(i)))
        return Where(written or self.paths[i], self.paths[i], chain=tuple(chain), is_dir=True)


@st.composite
def trees(draw: st.DrawFn) -> Tree:
    n = draw(st.integers(2, 12))
    return Tree([0] + [draw(st.integers(0, i - 1)) for i in range(1, n)])


@st.composite
def tree_and_two(draw: st.DrawFn) -> tuple[Tree, int, int, bool]:
    tree = draw(trees())
    n = len(tree.paths)
    return tree, draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1)), draw(st.booleans())


@given(tree_and_two())
def test_a_writer_is_above_a_bind_exactly_when_its_directory_is_an_ancestor(
    case: tuple[Tree, int, int, bool],
) -> None:
    """By identity, whatever text the writer bound it by (its real path or a link to it)."""
    tree, bind, w, through_link = case
    source = f"/links/l{w}" if through_link else tree.paths[w]
    writer = Mount("container other-1", "other", source, True, ident=tree.ident(w))
    expected = w in tree.ancestors(bind)
    assert above(tree.paths[bind], tree.where(bind), writer) is expected
    # read-only, it writes nothing; unknown identity through a link: only the text is known
    assert above(tree.paths[bind], tree.where(bind), writer._replace(writable=False)) is False
    blind = writer._replace(ident=None)
    assert above(tree.paths[bind], tree.where(bind), blind) is (expected and not through_link)


@given(tree_and_two())
def test_a_held_path_holds_while_nothing_changes_and_moves_with_any_directory_on_it(
    case: tuple[Tree, int, int, bool],
) -> None:
    tree, bind, other, _ = case
    path = tree.paths[bind]
    held = hold([Bind("web", "volumes", path)], {path: tree.where(bind)})
    assert read_held(held_text(held).encode()) == held
    assert moved(held, {path: tree.where(bind)}) == []
    # any directory on its way swapped for another (same path, another identity)
    swapped_at = [*tree.ancestors(bind), bind][other % (len(tree.ancestors(bind)) + 1)]
    now = tree.where(bind)
    chain = tuple((p, d, i + 1000 if p == tree.paths[swapped_at] else i) for p, d, i in now.chain)
    [(service, why)] = moved(held, {path: now._replace(chain=chain)})
    assert service == "web" and f"another directory at {tree.paths[swapped_at]}" in why
    # the path leading elsewhere, a dangling link on its way, or no longer followed
    assert moved(held, {path: now._replace(real="/etc")})[0][1].endswith(
        f"not to {path} as at its up"
    )
    assert "leads to nothing" in moved(held, {path: now._replace(dangling="/t/x")})[0][1]
    assert "can no longer be followed" in moved(held, {})[0][1]


@given(tree_and_two())
def test_a_writer_appearing_on_a_held_paths_way_moves_it_and_one_beside_it_does_not(
    case: tuple[Tree, int, int, bool],
) -> None:
    tree, bind, w, through_link = case
    path = tree.paths[bind]
    held = hold([Bind("web", "volumes", path)], {path: tree.where(bind)})
    source = f"/links/l{w}" if through_link else tree.paths[w]
    writer = Mount("container other-1", "other", source, True, ident=tree.ident(w))
    found = moved(held, {path: tree.where(bind)}, [writer])
    if w in tree.ancestors(bind):
        [(_, why)] = found
        assert f"container other-1 can now write {tree.paths[w]}" in why
    else:  # beside it, below it, or the bind itself (its own writable mount)
        assert found == []


def test_a_files_own_identity_is_not_held_its_directory_is() -> None:
    chain = (("/", DEV, 1), ("/srv", DEV, 2), ("/srv/app.conf", DEV, 3))
    at = Where("/srv/app.conf", "/srv/app.conf", chain=chain, is_dir=False)
    held = hold([Bind("web", "configs", "/srv/app.conf")], {at.path: at})
    rewritten = at._replace(chain=(*chain[:2], ("/srv/app.conf", DEV, 99)))  # an atomic rewrite
    assert moved(held, {at.path: rewritten}) == []
    renamed = at._replace(chain=(chain[0], ("/srv", DEV, 98), chain[2]))
    assert "another directory at /srv" in moved(held, {at.path: renamed})[0][1]


def test_a_missing_tail_is_held_by_the_parts_that_exist() -> None:
    chain = (("/", DEV, 1), ("/srv", DEV, 2))
    at = Where("/srv/new", "/srv/new", visited=("/srv", "/srv/new"), chain=chain)
    assert at.ident is None and at.above == ((DEV, 2), (DEV, 1))
    held = hold([Bind("web", "volumes", "/srv/new")], {at.path: at})
    made = Where("/srv/new", "/srv/new", chain=(*chain, ("/srv/new", DEV, 3)), is_dir=True)
    assert moved(held, {at.path: made}) == []  # the engine made it: no link, same parent


def test_read_held_refuses_what_this_agent_did_not_write() -> None:
    for raw in (b"", b"{}", b'{"held": [{"path": 1}]}', b"[1]", b'{"held": 3}'):
        assert read_held(raw) is None
    assert read_held(held_text([]).encode()) == []


def test_read_held_round_trips_a_volume_device() -> None:
    row = Hold("", "volumes.data.driver_opts.device", "/srv/d", "/srv/d", (("/", 1, 2),), True)
    assert read_held(held_text([row]).encode()) == [row]


def bind(path: str, build: bool = False) -> HostPath:
    return HostPath("web", "build.context" if build else "volumes", path, build)


def test_a_dangling_link_on_the_way_is_refused_by_its_own_code() -> None:
    at = Where("/srv/app/l", "/srv/app/later", "/srv/app/l", ("/srv", "/srv/app", "/srv/app/l"))
    [v] = faults([bind("/srv/app/l")], {"/srv/app/l": at}, HIDDEN)
    assert v.code == Code.POLICY_DANGLING_LINK and "the link /srv/app/l" in v.asks


@given(st.sampled_from(HIDDEN), st.sampled_from(["", "/x", "/a/b"]), st.booleans())
def test_a_way_under_a_hidden_directory_is_refused_written_or_through_a_link(
    top: str, tail: str, linked: bool
) -> None:
    target = top + tail
    path = "/srv/app/l" if linked else target
    visited = ("/srv", "/srv/app", "/srv/app/l", target) if linked else (target,)
    [v] = faults([bind(path)], {path: Where(path, target, visited=visited)}, HIDDEN)
    assert v.code == Code.POLICY_HIDDEN_PATH and f"under {top}" in v.asks
    assert ("via" in v.asks) is linked


def test_hidden_is_by_directory_not_by_prefix_and_a_builds_own_release_dir_passes() -> None:
    at = Where("/tmpfiles/x", "/tmpfiles/x", visited=("/tmpfiles", "/tmpfiles/x"))
    assert faults([bind("/tmpfiles/x")], {"/tmpfiles/x": at}, HIDDEN) == []
    rel = "/tmp/state/revisions/r1"
    ctx = Where(rel, rel, visited=("/tmp", "/tmp/state", rel))
    assert faults([bind(rel, build=True)], {rel: ctx}, HIDDEN, rel) == []
    assert faults([bind(rel)], {rel: ctx}, HIDDEN, rel)[0].code == Code.POLICY_HIDDEN_PATH
    escaped = Where(rel + "/l", "/tmp/other", visited=(rel + "/l", "/tmp/other"))
    found = faults([bind(rel + "/l", build=True)], {rel + "/l": escaped}, HIDDEN, rel)
    assert [v.code for v in found] == [Code.POLICY_HIDDEN_PATH]


def test_a_way_through_proc_is_refused_whatever_its_text_resolves_to() -> None:
    """``/proc/<pid>/root`` reads as ``/`` and leads into another process's root."""
    path = "/srv/app/l"
    at = Where(path, "/srv/app/data", visited=("/srv", "/srv/app", path, "/proc", "/proc/77"))
    [v] = faults([bind(path)], {path: at}, HIDDEN)
    assert v.code == Code.POLICY_PROTECTED_PATH and "passes through /proc" in v.asks
    beside = Where("/srv/procx", "/srv/procx", visited=("/srv", "/srv/procx"))
    assert faults([bind("/srv/procx")], {"/srv/procx": beside}, HIDDEN) == []
