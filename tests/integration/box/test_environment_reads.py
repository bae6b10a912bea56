"""A secret's or config's ``environment:`` name as the judge asks compose for it (issue 47's
attack): the judge reads each value through an interpolation it writes (``${NAME?...}``), so a
name that is not one token there (``a-b``: ``a`` with the default ``b``; ``A}``: ``A`` and
text) gave the secret a value ``up`` would never read, and it was admitted. Through the real
``docker compose config`` (``agent.policy.judge``, offline): a plain name is read as the .env
sets it; any other is refused (POLICY_HOST_STRING) and never asked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monky_deployd.agent import policy
from monky_deployd.config import Config
from monky_deployd.core.admission import artifact
from monky_deployd.core.admission.rules import Violation
from monky_deployd.core.errors import Code
from monky_deployd.core.faults import DeployError

pytestmark = pytest.mark.docker

NAMES = st.text(alphabet="aB_1-}{:=?+ .", min_size=1, max_size=6)


def _judge(tmp: Path, var: str) -> tuple[list[Violation], dict[str, object]]:
    project_dir = tmp / "state" / "revisions" / "r1"
    project_dir.mkdir(parents=True, exist_ok=True)
    cfg = Config.model_validate({"env": "env-test", "state_dir": str(tmp / "state")})
    doc = {
        "services": {"web": {"image": "busybox", "secrets": ["s"]}},
        "secrets": {"s": {"environment": var}},
    }
    env = "a=from-a\nB=from-B\n_=u\n"
    found, model, _ = policy.judge(
        cfg, tmp / "docker", "p", project_dir, (yaml.safe_dump(doc), env), engine=False
    )
    return list(found), model


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(NAMES)
def test_a_name_is_read_as_written_or_refused(tmp_path: Path, var: str) -> None:
    try:
        found, model = _judge(tmp_path, var)
    except DeployError as exc:  # compose itself cannot read it: refused, nothing admitted
        assert exc.code == Code.POLICY_UNJUDGED
        return
    values = artifact.child_environment(model)
    if var in ("a", "B", "_"):
        assert found == []
        assert list(values.values()) == [{"a": "from-a", "B": "from-B", "_": "u"}[var]]
    else:
        assert ("secrets.s.environment", Code.POLICY_HOST_STRING) in {
            (v.key, v.code) for v in found
        }
        assert values == {}


@pytest.mark.parametrize("var", ["a-b", "A}", "B?"])
def test_a_name_spliced_into_the_judges_interpolation_is_refused(tmp_path: Path, var: str) -> None:
    found, model = _judge(tmp_path, var)
    assert ("secrets.s.environment", Code.POLICY_HOST_STRING) in {(v.key, v.code) for v in found}
    assert artifact.child_environment(model) == {}
