"""core.admission.artifact: the judged model (pinned host paths, its bytes) and the paths a
container could swap a link on (POLICY_SWAPPABLE_PATH)."""

from __future__ import annotations

import errno
import json
import posixpath
import subprocess

from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.admission import artifact
from monky_deployd.core.admission.artifact import Mount
from monky_deployd.core.errors import Code


def model(*binds: tuple[str, str, bool], project: str = "shop") -> dict[str, object]:
    """A model whose services bind ``(service, source, read_only)``."""
    services: dict[str, object] = {}
    for service, source, ro in binds:
        svc = services.setdefault(service, {"image": "x", "volumes": []})
        assert isinstance(svc, dict)
        svc["volumes"].append(
            {"type": "bind", "source": source, "target": f"/m{len(svc['volumes'])}"}
            | ({"read_only": True} if ro else {})
        )
    return {"name": project, "services": services}


def test_pinned_replaces_every_path_the_engine_mounts_and_nothing_else() -> None:
    given_model = {
        "name": "shop",
        "services": {
            "web": {
                "image": "x",
                "volumes": [
                    {"type": "bind", "source": "/srv/link", "target": "/a"},
                    {"type": "volume", "source": "data", "target": "/b"},
                ],
                "secrets": ["s"],
                "environment": {"P": "/srv/link"},
            }
        },
        "secrets": {"s": {"file": "/srv/link/s"}},
        "volumes": {"data": {"driver_opts": {"type": "none", "o": "bind", "device": "/srv/link"}}},
    }
    before = json.dumps(given_model, sort_keys=True)
    resolved = {"/srv/link": "/srv/real", "/srv/link/s": "/srv/real/s"}
    out = artifact.pinned(given_model, resolved)
    assert json.dumps(given_model, sort_keys=True) == before  # a copy
    web = out["services"]["web"]  # type: ignore[index]
    assert web["volumes"][0]["source"] == "/srv/real"
    assert web["volumes"][1]["source"] == "data"
    assert web["environment"] == {"P": "/srv/link"}  # a value is no path the engine follows
    assert out["secrets"]["s"]["file"] == "/srv/real/s"  # type: ignore[index]
    assert out["volumes"]["data"]["driver_opts"]["device"] == "/srv/real"  # type: ignore[index]
    assert [b.path for b in artifact.binds(out)] == ["/srv/real", "/srv/real/s", "/srv/real"]


def test_text_is_json_compose_reads_and_the_same_for_the_same_model() -> None:
    m = model(("web", "/srv/a", False))
    assert json.loads(artifact.text(m)) == m
    assert artifact.text(m) == artifact.text(json.loads(artifact.text(m)))


segment = st.sampled_from(["a", "b", "c", "data", "x"])
paths = st.lists(segment, min_size=1, max_size=4).map(lambda p: "/srv/" + "/".join(p))


@given(bind=paths, writer=paths, writable=st.booleans(), engine=st.booleans())
def test_a_bind_is_refused_exactly_when_a_writer_can_write_its_parent(
    bind: str, writer: str, writable: bool, engine: bool
) -> None:
    if engine:  # a container of the box
        m = model(("web", bind, True))
        found = artifact.swappable(m, [Mount("container other", "other", writer, writable)])
    else:  # a service of the release itself
        m = model(("web", bind, True), ("cache", writer, not writable))
        found = artifact.swappable(m, [])
    parent = posixpath.dirname(bind)
    expected = writable and (parent == writer or parent.startswith(writer + "/"))
    assert bool(found) == expected, found
    assert all(v.code is Code.POLICY_SWAPPABLE_PATH for v in found)


def test_the_line_names_the_bind_the_directory_and_who_writes_it() -> None:
    m = model(("web", "/srv/app/data/db", True))
    [v] = artifact.swappable(m, [Mount("container old-1", "old", "/srv/app", True)])
    assert v.line().startswith("service web: volumes /srv/app/data/db lies in /srv/app, which ")
    assert "container old-1 can write" in v.line()


def test_another_projects_bind_below_a_writable_bind_of_the_release_is_refused() -> None:
    m = model(("cache", "/srv/shared", False))
    engine = [Mount("container bank-db-1", "bank", "/srv/shared/db", True)]
    [v] = artifact.swappable(m, engine)
    assert (v.service, v.key) == ("cache", "volumes")
    assert "container bank-db-1 mounts" in v.asks
    # the release's own previous containers are replaced by the up: not held against it
    own = [Mount("container shop-db-1", "shop", "/srv/shared/db", True)]
    assert artifact.swappable(m, own) == []


def test_moved_names_a_pinned_path_that_leads_elsewhere_now() -> None:
    m = model(("web", "/srv/app", True))
    assert artifact.moved(m, {"/srv/app": "/srv/app"}) == []
    [v] = artifact.moved(m, {"/srv/app": "/etc"})
    assert "leads to /etc now" in v.asks
    [v] = artifact.moved(m, {"/srv/app": ""})
    assert "cannot follow" in v.asks


def test_a_writer_bound_through_a_link_is_the_same_directory_by_identity() -> None:
    """Issue 45: another app binds the root through a link (another text): its source's
    identity is a directory above the bind, so the bind is refused; and the release's own
    writer above another project's bind, by identity, both ways."""
    from monky_deployd.core.admission.paths import Where

    chain = (("/", 1, 2), ("/srv", 1, 3), ("/srv/root", 1, 4), ("/srv/root/x", 1, 5))
    where = {"/srv/root/x": Where("/srv/root/x", "/srv/root/x", chain=chain, is_dir=True)}
    m = model(("web", "/srv/root/x", True))
    linked = Mount("container other-1", "other", "/srv/alias", True, ident=(1, 4))
    [v] = artifact.swappable(m, [linked], where)
    assert "lies in /srv/alias, which container other-1 can write" in v.asks
    assert artifact.swappable(m, [linked]) == []  # by text alone it was no writer
    assert artifact.swappable(m, [linked._replace(ident=(1, 9))], where) == []
    # the other way: the release writes /srv/root (its identity), another project binds below
    # it through a link
    mine = model(("cache", "/srv/root", False))
    at = {"/srv/root": Where("/srv/root", "/srv/root", chain=chain[:3], is_dir=True)}
    at["/srv/alias/x"] = Where("/srv/alias/x", "/srv/root/x", chain=chain, is_dir=True)
    other = Mount("container bank-1", "bank", "/srv/alias/x", False, ident=(1, 5))
    [w] = artifact.swappable(mine, [other], at)
    assert w.service == "cache" and "container bank-1 mounts" in w.asks


_VALUES = st.text(st.characters(blacklist_characters="\0"), max_size=30)
_VARS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)


@given(st.dictionaries(_VARS, _VALUES, min_size=1, max_size=4), st.data())
def test_values_read_from_environment_reach_up_as_judged_under_the_agents_names(
    values: dict[str, str], data: st.DataObject
) -> None:
    """Issue 47: each secret or config read from ``environment:`` reads a variable of the
    agent's own name, whose value is the one compose resolved ($ written $$ as compose writes
    it): ``up``'s environment gives the container exactly that value, and nothing else."""
    names = sorted(values)
    kinds = {n: data.draw(st.sampled_from(["secrets", "configs"])) for n in names}
    judged: dict[str, object] = {"name": "shop", "services": {"web": {"image": "x"}}}
    for i, name in enumerate(names):
        top = judged.setdefault(kinds[name], {})
        assert isinstance(top, dict)
        top[f"s{i}"] = {"name": f"shop_s{i}", "environment": name}
    assert artifact.environment_reads(judged) == names
    written = {n: v.replace("$", "$$") for n, v in values.items()}  # compose's JSON output
    model = json.loads(artifact.text(artifact.supplied(judged, written)))
    env = artifact.child_environment(model)
    for i, name in enumerate(names):
        var = model[kinds[name]][f"s{i}"]["environment"]
        assert var.startswith(artifact.VALUE_PREFIX)
        assert env[var] == values[name]
    assert len(env) == len(values)
    assert {k: v for k, v in model.items() if not k.startswith("x-")}.keys() == judged.keys()


def test_a_value_compose_did_not_give_keeps_its_name_and_no_model_value_is_trusted() -> None:
    judged = {"secrets": {"db": {"environment": "DB"}}, artifact.VALUES_KEY: {"PATH": "/x"}}
    out = artifact.supplied(judged, {})
    assert out == {"secrets": {"db": {"environment": "DB"}}}
    assert artifact.child_environment(judged) == {}  # only the agent's own names
    assert "${DB?" in json.loads(artifact.reads(["DB"]))[artifact.READS_KEY]["DB"]


def _reading(*sizes: int) -> dict[str, object]:
    """A model (``supplied``) whose configs c0, c1, ... read values of ``sizes`` characters."""
    names = {f"c{i}": f"{artifact.VALUE_PREFIX}{i + 1}" for i in range(len(sizes))}
    return {
        "configs": {c: {"environment": var} for c, var in names.items()},
        artifact.VALUES_KEY: {var: "v" * n for var, n in zip(names.values(), sizes, strict=True)},
    }


@given(st.integers(min_value=-64, max_value=64))
def test_a_value_up_could_not_hand_compose_is_too_large(delta: int) -> None:
    """The attack on issue 47: a config read from environment: whose value is longer than one
    variable of a process's environment may be passed every check and ended `up` (E2BIG:
    INTERNAL). The line is Linux's own: exec of a process with that variable succeeds exactly
    when nothing is refused."""
    var = f"{artifact.VALUE_PREFIX}1"
    size = artifact.ARG_STRLEN - len(var) - 2 + delta  # NAME=value and its NUL: ARG_STRLEN + delta
    found = artifact.too_large(_reading(size))
    assert [(v.key, v.code) for v in found] == (
        [("configs.c0.environment", Code.ENV_TOO_LARGE)] if delta > 0 else []
    )
    env = artifact.child_environment(_reading(size))
    try:
        subprocess.run(("true",), env={"PATH": "/usr/bin:/bin", **env}, check=True)
        started = True
    except OSError as exc:
        assert exc.errno == errno.E2BIG
        started = False
    assert started == (not found)


def test_values_too_large_together_are_refused() -> None:
    each = artifact.ARG_STRLEN // 2
    assert artifact.too_large(_reading(*[each] * 8)) == []
    found = artifact.too_large(_reading(*[each] * 40))
    assert [(v.key, v.code) for v in found] == [
        ("secrets and configs with environment:", Code.ENV_TOO_LARGE)
    ]
    assert "v" * 16 not in found[0].line()
