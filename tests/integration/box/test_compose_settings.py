"""Every variable the installed compose binary reads as its own setting (the names it carries,
read out of the real binary) is refused in a release's .env (ENV_COMPOSE_SETTING), whatever
shape its line has (issue 40)."""

from __future__ import annotations

import re
import shutil
from functools import cache
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monky_deployd.core.faults import EnvError
from monky_deployd.core.render import envfile

PLUGIN_DIRS = ("/usr/local/lib/docker/cli-plugins", "/usr/libexec/docker/cli-plugins")
_NAME = re.compile(rb"(?:COMPOSE|DOCKER|BUILDKIT|BUILDX)_[A-Z][A-Z0-9_]{2,}")


@cache
def compose_binary() -> bytes:
    """The compose plugin's binary (the suite installs it: a missing one fails, never skips)."""
    found = [p for p in (Path(d) / "docker-compose" for d in PLUGIN_DIRS) if p.is_file()]
    plain = Path(shutil.which("docker-compose") or "docker-compose")
    return (found[0] if found else plain).read_bytes()


@cache
def names_compose_reads() -> tuple[str, ...]:
    """The setting names in the compose binary (Go strings are not NUL-ended: two names may run
    together, and are refused together all the same)."""
    return tuple(sorted({m.decode() for m in _NAME.findall(compose_binary())}))


def test_the_binary_names_the_settings_the_attacks_used() -> None:
    for known in ("COMPOSE_DISABLE_ENV_FILE", "COMPOSE_PROFILES", "COMPOSE_FILE", "DOCKER_HOST"):
        assert known.encode() in compose_binary()
    assert len(names_compose_reads()) > 20


LINE_SHAPES = ("{n}=v", "export {n}=v", "{n}: v", "  {n} = 'v'", '{n}="${{S}}"', "{n}=")


@given(data=st.data())
def test_every_setting_compose_reads_is_refused_in_a_release_env(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(names_compose_reads()))
    shape = data.draw(st.sampled_from(LINE_SHAPES))
    template = "A=1\n" + shape.format(n=name) + "\n"
    with pytest.raises(EnvError) as err:
        envfile.render(template, {"S": "s"})
    assert err.value.code in ("ENV_COMPOSE_SETTING", "ENV_NAME_RESERVED")
    assert name in err.value.message
