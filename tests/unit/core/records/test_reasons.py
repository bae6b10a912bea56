"""core.records.reasons: which keys changed is exactly the symmetric difference plus the common keys
whose value moved; no value ever reaches a reason, a fingerprint or a label override."""

from __future__ import annotations

import hashlib
import hmac
import json

import yaml
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.records import reasons
from monky_deployd.core.records.applied import ServiceLabel
from monky_deployd.core.records.reasons import Fingerprint, Reason, ReasonFacts

KEY = b"k" * 32
names = st.from_regex(r"[A-Z][A-Z0-9_]{0,7}", fullmatch=True)
# values that cannot be mistaken for a name or a hash: they carry a marker
values = st.text(
    st.characters(codec="utf-8", exclude_characters="\n"),
    min_size=1,
    max_size=20,
).map(lambda v: f"VAL<{v}>")
env_maps = st.dictionaries(names, values, max_size=8)


def env_text(env: dict[str, str]) -> str:
    return "# a comment with ${NOT_A_KEY}\n" + "".join(f"{k}={v}\n" for k, v in env.items())


@given(old=env_maps, new=env_maps)
def test_changed_keys_are_the_symmetric_difference_and_the_moved_values(
    old: dict[str, str], new: dict[str, str]
) -> None:
    a = reasons.fingerprint(KEY, "c", env_text(old), {})
    b = reasons.fingerprint(KEY, "c", env_text(new), {})
    ch = reasons.key_changes(a.env, b.env)
    assert set(ch.added) == set(new) - set(old)
    assert set(ch.removed) == set(old) - set(new)
    assert set(ch.changed) == {k for k in set(old) & set(new) if old[k] != new[k]}
    assert bool(ch) == (set(ch.added) | set(ch.removed) | set(ch.changed) != set())


@given(old=env_maps, new=env_maps, secrets_old=env_maps, secrets_new=env_maps)
def test_no_value_reaches_a_reason_or_a_fingerprint(
    old: dict[str, str],
    new: dict[str, str],
    secrets_old: dict[str, str],
    secrets_new: dict[str, str],
) -> None:
    before = reasons.fingerprint(KEY, "services: {}\n", env_text(old), secrets_old)
    after = reasons.fingerprint(KEY, "services: {a: {}}\n", env_text(new), secrets_new)
    found = reasons.explain(ReasonFacts("r2", "r1", before, after))
    shown = json.dumps([r.as_wire() for r in found]) + reasons.describe(found)
    kept = json.dumps([dict(after.env), dict(after.secrets), dict(before.env)])
    for value in [*old.values(), *new.values(), *secrets_old.values(), *secrets_new.values()]:
        assert value not in shown and value not in kept
    kinds = [r.kind for r in found]
    assert kinds[:2] == ["REVISION", "COMPOSE"]
    assert ("ENV_KEYS" in kinds) == bool(reasons.key_changes(before.env, after.env))
    rotated = {k for k in set(secrets_old) & set(secrets_new) if secrets_old[k] != secrets_new[k]}
    assert ("SECRET_ROTATED" in kinds) == bool(rotated)


@given(
    st.binary(max_size=100),
    st.text(st.characters(codec="utf-8"), max_size=20),
    st.text(max_size=40),
)
def test_the_keyed_hasher_is_hmac_sha256(key: bytes, name: str, value: str) -> None:
    """The pre-keyed states give HMAC's own hashes, for keys shorter and longer than a block
    (lone surrogates included, as ``keyed_hash`` takes them)."""
    msg = name.encode("utf-8", "surrogatepass") + b"\0" + value.encode("utf-8", "surrogatepass")
    want = hmac.new(key, msg, hashlib.sha256).hexdigest()
    assert reasons.keyed_hasher(key)(name, value) == want == reasons.keyed_hash(key, name, value)


def test_the_keyed_hash_depends_on_the_key_the_name_and_the_value() -> None:
    h = reasons.keyed_hash(KEY, "A", "1")
    assert h != reasons.keyed_hash(b"j" * 32, "A", "1")
    assert h != reasons.keyed_hash(KEY, "B", "1")
    assert h != reasons.keyed_hash(KEY, "A", "2")
    assert reasons.keyed_hash(KEY, "A1", "") != reasons.keyed_hash(KEY, "A", "1")
    assert len(h) == 64 and h == reasons.keyed_hash(KEY, "A", "1")


def test_each_kind_from_its_facts() -> None:
    fp = Fingerprint("x", {"A": "1"}, {"S": "1"})
    assert reasons.explain(ReasonFacts("r1", "r1", fp, fp)) == ()
    assert reasons.explain(ReasonFacts("r1")) == (Reason("REVISION", "(none) -> r1"),)
    drift = reasons.explain(ReasonFacts("r1", "r1", missing=("web",), stopped=("db",)))
    assert drift == (Reason("DRIFT", "web missing; db stopped"),)
    killed = reasons.explain(ReasonFacts("r1", "r1", interrupted="up of r2"))
    assert killed == (Reason("DRIFT", "a tick was killed during up of r2"),)
    retry = reasons.explain(ReasonFacts("r2", "r1", retry_attempt=3, retry_code="PULL_FAILED"))
    assert retry[1] == Reason("RETRY", "attempt 3 after PULL_FAILED")
    forced = reasons.explain(ReasonFacts("r2", "r1", retry_attempt=3, forced=True))
    assert [r.kind for r in forced] == ["REVISION", "FORCED"]
    back = reasons.explain(ReasonFacts("r1", "r1", rollback_to="r1"))
    assert back == (Reason("ROLLBACK", "to r1"),)
    img = reasons.explain(
        ReasonFacts("r1", "r1", images_before={"web": "h/w@sha256:aa", "db": ""},
              images_after={"web": "sha256:bb", "db": "sha256:cc", "new": "sha256:dd"})
    )  # fmt: skip
    assert img == (Reason("IMAGE_DIGEST", "web: sha256:aa -> sha256:bb"),)
    same = reasons.explain(ReasonFacts("r1", "r1", images_before={"w": "r@sha256:a"},
                                 images_after={"w": "sha256:a"}))  # fmt: skip
    assert same == ()


def test_a_record_without_a_fingerprint_gives_no_content_reasons() -> None:
    after = Fingerprint("x", {"A": "1"}, {})
    assert [r.kind for r in reasons.explain(ReasonFacts("r2", "r1", None, after))] == ["REVISION"]


def test_env_assignments_read_the_rendered_file() -> None:
    text = '# c\n\nexport A=1\nB = "two words"\nA=3\nC:4\n  # x=y\n'
    assert reasons.env_assignments(text) == {"A": "3", "B": '"two words"', "C": "4"}


@given(
    revision=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True),
    services=st.lists(st.from_regex(r"[a-z][a-z0-9_.-]{0,10}", fullmatch=True), max_size=5),
)
def test_the_labels_override_is_compose_yaml_for_every_service(
    revision: str, services: list[str]
) -> None:
    doc = yaml.safe_load(reasons.labels_override(revision, "tick1", services))
    got = doc["services"] or {}
    assert set(got) == set(services)
    for svc in got.values():
        assert svc["labels"] == {
            reasons.LABEL_REVISION: revision,
            reasons.LABEL_DEPLOY_ID: "tick1",
        }


names = st.from_regex(r"[a-z][a-z0-9_-]{0,8}", fullmatch=True)
hashes = st.dictionaries(names, st.sampled_from(["h1", "h2", "h3"]), max_size=5)


@given(before=hashes, now=hashes, moved=st.sets(names, max_size=3))
def test_a_service_keeps_its_labels_until_its_config_hash_or_image_changes(
    before: dict[str, str], now: dict[str, str], moved: set[str]
) -> None:
    old = {n: ServiceLabel(h, "r1", "tick1") for n, h in before.items()}
    got = reasons.service_labels(now, old, "r2", "tick2", moved)
    assert set(got) == set(now)
    for name, label in got.items():
        assert label.config_hash == now[name]
        kept = before.get(name) == now[name] and name not in moved
        assert (label.revision, label.deploy_id) == (("r1", "tick1") if kept else ("r2", "tick2"))
    doc = yaml.safe_load(reasons.labels_override("r2", "tick2", now, got))
    for name, svc in (doc["services"] or {}).items():
        assert svc["labels"][reasons.LABEL_REVISION] == got[name].revision
        assert svc["labels"][reasons.LABEL_DEPLOY_ID] == got[name].deploy_id


# --- service_digests: the labels' config digests from compose's effective configuration ---

KEY = b"k" * 32
values = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=8), st.lists(st.text(max_size=4))
)
fields = st.from_regex(r"[a-z][a-z_]{0,10}", fullmatch=True)
definitions = st.dictionaries(fields, values, max_size=6).map(lambda d: {"image": "x", **d})


@given(definitions, st.sampled_from(["build", "pull_policy", "scale", "depends_on", "profiles"]))
def test_what_compose_leaves_out_of_its_hash_does_not_move_the_digest(
    body: dict[str, object], left_out: str
) -> None:
    a = {"services": {"web": {k: v for k, v in body.items() if k != left_out}}}
    b = {"services": {"web": {**body, left_out: {"context": "/elsewhere", "x": [1]}}}}
    assert reasons.service_digests(KEY, a, "") == reasons.service_digests(KEY, b, "")
    replicas = {"services": {"web": {**body, "deploy": {"replicas": 5, "resources": {}}}}}
    one = {"services": {"web": {**body, "deploy": {"replicas": 1, "resources": {}}}}}
    assert reasons.service_digests(KEY, replicas, "") == reasons.service_digests(KEY, one, "")


@given(
    definitions,
    fields.filter(
        lambda f: f not in {"build", "pull_policy", "scale", "depends_on", "profiles", "env_file"}
    ),
    values,
)
def test_any_other_change_of_a_definition_moves_only_its_service_digest(
    body: dict[str, object], name: str, value: object
) -> None:
    changed = {**body, name: value}
    other = {"image": "db"}
    before = reasons.service_digests(KEY, {"services": {"web": body, "db": other}}, "A=1\n")
    after = reasons.service_digests(KEY, {"services": {"web": changed, "db": other}}, "A=2\n")
    assert before["db"] == after["db"]  # it does not read the .env as env_file
    same = name in body and json.dumps(body[name]) == json.dumps(value)  # (1 is not True)
    assert (before["web"] == after["web"]) == same
    assert all(d.startswith(reasons.DIGEST_PREFIX) for d in after.values())
    assert reasons.digested({n: ServiceLabel(d, "r1") for n, d in after.items()})


@given(definitions, st.text(max_size=20), st.text(max_size=20))
def test_an_env_file_service_moves_with_the_env_and_not_with_its_path(
    body: dict[str, object], env_a: str, env_b: str
) -> None:
    def digest(path: str, env: str, key: bytes = KEY) -> str:
        web = {**body, "env_file": [{"path": path}]}
        return reasons.service_digests(key, {"services": {"web": web}}, env)["web"]

    # the revision directory is in env_file's path; compose reads the file in at up
    assert digest("/s/revisions/r1/.env", env_a) == digest("/s/revisions/r2/.env", env_a)
    assert (digest("/s/r1/.env", env_a) == digest("/s/r1/.env", env_b)) == (env_a == env_b)
    assert digest("/s/r1/.env", env_a) != digest("/s/r1/.env", env_a, b"q" * 32)  # keyed


def test_compose_hashes_an_older_agent_kept_are_not_digests() -> None:
    assert not reasons.digested({"web": ServiceLabel("ab" * 32, "r1")})
    assert reasons.digested({})
    assert reasons.service_digests(KEY, {"services": "nonsense"}, "") == {}
    assert reasons.service_digests(KEY, {}, "") == {}


@given(before=hashes, now=hashes, moved=st.sets(names, max_size=3))
def test_labels_compared_by_one_hash_keep_the_digest_given_to_record(
    before: dict[str, str], now: dict[str, str], moved: set[str]
) -> None:
    old = {n: ServiceLabel(h, "r1", "tick1") for n, h in before.items()}
    record = {n: reasons.DIGEST_PREFIX + h for n, h in now.items()}
    got = reasons.service_labels(now, old, "r2", "tick2", moved, record)
    compared = reasons.service_labels(now, old, "r2", "tick2", moved)
    assert {n: lb.config_hash for n, lb in got.items()} == record
    assert {n: (lb.revision, lb.deploy_id) for n, lb in got.items()} == {
        n: (lb.revision, lb.deploy_id) for n, lb in compared.items()
    }
