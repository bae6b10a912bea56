"""The masking step on each path that is not a whole tick: a real child's output (masked whole,
then cut), a pull's output, the secrets a restore or a down learns at rest (a real state dir),
tenancy and OpenBao error bodies that echo what the agent sent (over real HTTP to loopback servers
that echo), and the log filter (message, extra fields, traceback)."""

from __future__ import annotations

import json
import logging
import random
import string
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from monky_deployd.adapters.box import runner
from monky_deployd.adapters.box.docker import docker_config
from monky_deployd.adapters.box.state.state import StateDir
from monky_deployd.adapters.net.bao import Bao
from monky_deployd.adapters.net.tenancy import Tenancy
from monky_deployd.agent import context, logs
from monky_deployd.config import Config, OpenBaoCfg, TenancyCfg
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import CommandError, DeployError
from monky_deployd.core.records.tickrecord import TickRecord
from monky_deployd.core.render import pullerrors
from monky_deployd.core.render.envfile import render
from monky_deployd.core.render.mask import MIN_RUN, Masker
from monky_deployd.core.render.registry_cred import Credential
from monky_deployd_testkit.fakes.http import LoopbackServer, Request, Response, json_response


def shown(secret: str, text: str) -> list[str]:
    """The runs of 8 characters of ``secret`` that ``text`` holds."""
    return [
        secret[i : i + MIN_RUN]
        for i in range(len(secret) - MIN_RUN + 1)
        if secret[i : i + MIN_RUN] in text
    ]


def chain_text(exc: BaseException) -> str:
    words: list[str] = []
    seen: BaseException | None = exc
    while seen is not None:
        words.append(f"{seen!s} {seen!r} {getattr(seen, 'detail', '')}")
        seen = seen.__cause__ or seen.__context__
    return " ".join(words)


def pem(seed: int, lines: int = 40) -> str:
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits + "+/"
    body = ["".join(rng.choice(alphabet) for _ in range(64)) for _ in range(lines)]
    return "\n".join(["-----BEGIN PRIVATE KEY-----", *body, "-----END PRIVATE KEY-----"])


# -- children ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_long_multi_line_secret_is_masked_before_the_output_is_cut(
    tmp_path: Path, seed: int
) -> None:
    secret = pem(seed)
    (tmp_path / "out").write_text(f"error: cannot use value {secret!r}\n{secret}\n")
    script = "import sys; sys.stderr.write(open(sys.argv[1]).read()); sys.exit(3)"
    with pytest.raises(CommandError) as caught:
        runner.run(
            (sys.executable, "-c", script, str(tmp_path / "out")),
            env=runner.base_env(),
            timeout=30,
            masker=Masker([secret]),
        )
    assert caught.value.detail and "***" in caught.value.detail
    assert not shown(secret, chain_text(caught.value))


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32))
def test_a_pull_error_never_shows_a_secret(seed: int) -> None:
    secret = pem(seed, lines=random.Random(seed).randint(1, 40))
    quoted = json.dumps(secret)
    output = f"{secret}\nError response from daemon: parsing {quoted[: len(quoted) // 2]}\n"
    err = pullerrors.pull_error(output, masker=Masker([secret]), returncode=1)
    assert not shown(secret, f"{err.message} {err.detail}")


# -- secrets at rest: a restore or a down runs a revision whose values were not read -----------


def test_a_revision_not_written_this_tick_teaches_the_masker_its_env_and_credential(
    tmp_path: Path,
) -> None:
    secret = pem(5, lines=3) + '"$\\ é'
    cred = Credential("robot", "pw-" + pem(6, lines=1)[30:60])
    state = StateDir(tmp_path / "state").ensure()
    env_text = render(
        "# header\nLOG_LEVEL=info\nKEY=${KEY}\nURL=https://u:${KEY}@h\n", {"KEY": secret}
    )
    state.write_revision("r1", "services: {}\n", env_text)
    docker_config.write_docker_config(state.docker_dir, "reg.example.net", cred)
    cfg = Config.model_validate(
        {"env": "env-a", "state_dir": str(tmp_path / "state"), "grant_file": str(tmp_path / "g")}
    )
    ctx = context.Context(cfg, state, TickRecord(tick_id="t", started_at=0.0), lambda: 0.0)
    try:
        ctx.compose("p", "r1")  # a restore's up or a down: r1 was not staged by this tick
        m = ctx.masker
        assert logs.masker() is m
        text = f"parsing {json.dumps(secret)[:70]} / user {cred.password!r} / {cred.basic_auth()}"
        assert not shown(secret, m(text)) and not shown(cred.password, m(text))
        assert cred.basic_auth() not in m(text)
        ctx.staged = "r2"
        assert ctx.compose("p", "r2").masker is m  # the staged revision's secrets are known
    finally:
        logs.set_masker(Masker())


# -- service error bodies ---------------------------------------------------------------------


class Echo(LoopbackServer):
    """Answers every request with an error that echoes what the request carried: the bearer
    token, the X-Vault-Token, a login's JWT; raw, quoted and cut short."""

    def route(self, req: Request) -> Response:
        sent = (req.header("Authorization") or "").removeprefix("Bearer ")
        sent = sent or req.header("X-Vault-Token") or ""
        if req.body:
            sent = sent or str(json.loads(req.body).get("jwt", ""))
        words = f"bad credential {sent} ({sent!r}, {json.dumps(sent)}, {sent[: len(sent) // 2]})"
        if req.path.startswith("/v1/envs/"):
            return json_response(500, {"error": {"code": sent, "message": words}})
        status = 400 if req.path.endswith("/login") else 500
        return json_response(status, {"errors": [words, sent]})


@pytest.fixture(scope="module")
def echo() -> Iterator[Echo]:
    with Echo() as srv:
        yield srv


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(trust_env=False) as client:
        yield client


def own_words(call: Callable[[str], object], token: str) -> str:
    """What the agent says for this call when the token shares nothing with ``token``: its own
    words (a code such as GRANT_REJECTED, a URL), which a generated token may happen to contain."""
    try:
        call("hvs." + "~" * (len(token) - 4))
    except DeployError as exc:
        return chain_text(exc)
    raise AssertionError("the echo server answers every request with an error")


def leaked(secret: str, text: str, own: str) -> list[str]:
    """The runs of ``secret`` in ``text`` that are not the agent's own words."""
    return [run for run in shown(secret, text) if run not in own]


TOKENS = st.text(
    st.characters(codec="ascii", categories=("L", "N", "P", "S")), min_size=16, max_size=60
)


@settings(max_examples=25, deadline=None)
@given(token=TOKENS)
def test_tenancy_error_bodies_never_show_the_bearer(
    echo: Echo, http: httpx.Client, token: str
) -> None:
    token = "hvs." + token.replace("\x00", "")
    cfg = TenancyCfg(host=echo.host, port=echo.port, timeout_s=5)
    tenancy = Tenancy(http, cfg, "env-a", max_body_bytes=1 << 20)
    calls: list[Callable[[str], object]] = [
        lambda t: tenancy.lease(t),
        lambda t: tenancy.checkin(t, {}, None),
        lambda t: tenancy.report(t, {}),
    ]
    for call in calls:
        with pytest.raises(DeployError) as caught:
            call(token)
        assert caught.value.code is Code.TENANCY_UNAVAILABLE
        assert not leaked(token, chain_text(caught.value), own_words(call, token))


@settings(max_examples=25, deadline=None)
@given(token=TOKENS)
@example(token="00000000REJECTED")  # a token holding the agent's own word (GRANT_REJECTED)
def test_openbao_error_bodies_never_show_the_token_or_the_grant(
    echo: Echo, http: httpx.Client, token: str
) -> None:
    token = "hvs." + token
    bao = Bao(http, OpenBaoCfg(host=echo.host, port=echo.port, timeout_s=5))
    calls: list[Callable[[str], object]] = [
        lambda t: bao.lookup_self(t),
        lambda t: bao.renew_self(t),
        lambda t: bao.read_secret(t, "envs/env-a/app", "k"),
        lambda t: bao.login_jwt(t),
    ]
    for call in calls:
        with pytest.raises(DeployError) as caught:
            call(token)
        assert not leaked(token, chain_text(caught.value), own_words(call, token)), caught.value


# -- log lines --------------------------------------------------------------------------------


def test_the_log_filter_masks_message_extras_and_tracebacks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    secret = pem(7, lines=3)
    logs.setup("json", logging.DEBUG)
    logs.set_masker(Masker([secret]))
    try:
        log = logging.getLogger("monky_deployd.test")
        log.info("value %s here", secret, extra={"event": "t", "detail": {"k": [secret]}})
        logging.getLogger("httpx").warning(f"third party says {secret!r}")
        try:
            raise ValueError(f"boom {json.dumps(secret)}")
        except ValueError:
            log.debug("unexpected", exc_info=True, extra={"event": "t.bug"})
    finally:
        logs.set_masker(Masker())
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 3 and "exc_info" in lines[2]
    assert not shown(secret, out)
    assert not shown(secret, " ".join(str(v) for line in lines for v in line.values()))
