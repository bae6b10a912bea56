""".gitlab-ci.yml holds together: it parses, its stages and jobs are consistent, every file its
scripts name exists, the lint stage runs every gate, and releases pass the tag gate first (R19)
with the Gitea mirror behind a manual job (R11)."""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CI_FILE = REPO / ".gitlab-ci.yml"
# Top-level keys that are GitLab keywords, not jobs.
KEYWORDS = {
    "stages",
    "variables",
    "default",
    "workflow",
    "include",
    "image",
    "services",
    "before_script",
    "after_script",
    "cache",
}
# A repository path in a script line: scripts/…, packaging/…, ansible/…, src/…, tests/…, bench/….
PATH_RE = re.compile(r"(?<![\w$/.-])((?:scripts|packaging|ansible|src|tests|bench)/[\w./-]*[\w/])")


def _ci() -> dict[str, Any]:
    data = yaml.safe_load(CI_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict), ".gitlab-ci.yml must hold a mapping"
    return data


def _jobs() -> dict[str, dict[str, Any]]:
    return {
        name: body
        for name, body in _ci().items()
        if name not in KEYWORDS and not name.startswith(".")
    }


def _lines(job: dict[str, Any], key: str = "script") -> list[str]:
    value = job.get(key, [])
    lines = [value] if isinstance(value, str) else list(value)
    for line in lines:
        # An unquoted "key: value" inside a script line turns it into a mapping in YAML.
        assert isinstance(line, str), f"{key} item is not a string (quote it): {line!r}"
    return lines


def _all_script_lines() -> list[str]:
    ci = _ci()
    lines = _lines(ci.get("default", {}), "before_script")
    for job in _jobs().values():
        for key in ("before_script", "script", "after_script"):
            lines += _lines(job, key)
    return lines


def test_stages_are_lint_test_build_release() -> None:
    assert _ci()["stages"] == ["lint", "test", "build", "release"]


def test_every_job_has_a_declared_stage_and_a_script() -> None:
    stages = set(_ci()["stages"])
    jobs = _jobs()
    assert jobs
    for name, job in jobs.items():
        assert isinstance(job, dict), name
        assert job.get("stage") in stages, f"job {name}: stage {job.get('stage')!r} not declared"
        assert _lines(job), f"job {name} has no script"
    for name, job in jobs.items():
        for need in job.get("needs", []):
            needed = need["job"] if isinstance(need, dict) else need
            assert needed in jobs, f"job {name} needs {needed}, which does not exist"


def test_every_file_named_in_a_script_exists() -> None:
    named = {m.group(1) for line in _all_script_lines() for m in PATH_RE.finditer(line)}
    assert "scripts/release-gate.sh" in named and "packaging/build-deb.sh" in named
    assert "bench/mutation.sh" in named
    missing = sorted(p for p in named if not (REPO / p).exists())
    assert not missing, f".gitlab-ci.yml names files that do not exist: {missing}"


def test_the_path_scan_finds_what_it_should() -> None:
    found = [m.group(1) for m in PATH_RE.finditer('a scripts/x.sh "packaging/b-c.sh" --out dist')]
    assert found == ["scripts/x.sh", "packaging/b-c.sh"]
    assert not list(PATH_RE.finditer("$CI_PROJECT_DIR/.venv/bin/ruff src_dir/scripts"))


@pytest.mark.parametrize(
    "command",
    [
        "ruff format --check",
        "ruff check",
        "mypy --strict src tests",
        "shellcheck",
        "bash -n",
        "ansible-lint ansible/",
        "yamllint -s ansible/ .gitlab-ci.yml",
    ],
)
def test_lint_stage_runs_every_gate(command: str) -> None:
    lint_lines = [
        line for job in _jobs().values() if job["stage"] == "lint" for line in _lines(job)
    ]
    assert any(command in line for line in lint_lines), f"no lint job runs `{command}`"


def test_the_local_gate_type_checks_the_tests_too() -> None:
    assert "\nmypy --strict src tests\n" in (REPO / "scripts" / "test.sh").read_text(
        encoding="utf-8"
    )


def test_test_stage_runs_pytest_after_starting_docker() -> None:
    lines = [line for job in _jobs().values() if job["stage"] == "test" for line in _lines(job)]
    assert any("pytest" in line for line in lines)
    assert lines.index("scripts/docker-up.sh") < next(
        i for i, line in enumerate(lines) if "pytest" in line
    )


def test_build_stage_builds_the_wheel_and_the_deb() -> None:
    lines = [line for job in _jobs().values() if job["stage"] == "build" for line in _lines(job)]
    assert any("pip wheel" in line for line in lines)
    assert any(line.startswith("packaging/build-deb.sh") for line in lines)


def test_mutation_testing_runs_only_scheduled_or_by_hand() -> None:
    job = _jobs()["mutation"]
    assert _lines(job) == ["bash bench/mutation.sh"]
    assert job["rules"] == [
        {"if": '$CI_PIPELINE_SOURCE == "schedule"'},
        {"when": "manual", "allow_failure": True},
    ]
    others = [line for name, j in _jobs().items() if name != "mutation" for line in _lines(j)]
    assert not any("mutation" in line or "mutmut" in line for line in others)
    assert "mutmut" not in (REPO / "scripts" / "test.sh").read_text(encoding="utf-8")


def test_release_jobs_run_only_on_v_tags_and_pass_the_gate_first() -> None:
    release = {n: j for n, j in _jobs().items() if j["stage"] == "release"}
    assert set(release) >= {"release:gitlab", "release:gitea"}
    for name, job in release.items():
        assert _lines(job)[0] == 'scripts/release-gate.sh "$CI_COMMIT_TAG"', name
        rules = job.get("rules")
        assert rules, f"{name} must be limited to tags by rules"
        assert all("$CI_COMMIT_TAG =~ /^v/" in rule["if"] for rule in rules), name


def test_gitea_release_is_manual_and_gitlab_release_is_not() -> None:
    jobs = _jobs()
    assert [r.get("when") for r in jobs["release:gitea"]["rules"]] == ["manual"]
    assert all(r.get("when") != "manual" for r in jobs["release:gitlab"]["rules"])


def test_release_credentials_never_reach_curl_argv() -> None:
    for name in ("release:gitlab", "release:gitea"):
        script = "\n".join(_lines(_jobs()[name]))
        assert "--config" in script, name
        for secret in ("$CI_JOB_TOKEN", "$GITEA_TOKEN"):
            for line in script.splitlines():
                if secret in line:
                    assert line.strip().startswith("printf "), f"{name}: {secret} in {line!r}"


def test_ci_file_is_yamllint_clean() -> None:
    proc = subprocess.run(
        [str(REPO / ".venv" / "bin" / "yamllint"), "-s", str(CI_FILE)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("job_name", sorted(_jobs()))
def test_job_scripts_are_valid_bash(job_name: str, tmp_path: Path) -> None:
    job = _jobs()[job_name]
    ci = _ci()
    lines = _lines(ci.get("default", {}), "before_script") + _lines(job)
    script = tmp_path / "job.sh"
    script.write_text("#!/usr/bin/env bash\nset -eo pipefail\n" + "\n".join(lines) + "\n")
    assert subprocess.run(["bash", "-n", str(script)], timeout=30).returncode == 0
    shellcheck = str(REPO / ".venv" / "bin" / "shellcheck")
    proc = subprocess.run(
        [shellcheck, "-S", "warning", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout


SUMS_LINE = "(cd dist && sha256sum -- *.deb *.whl install.sh > SHA256SUMS)"


@pytest.mark.parametrize("job_name", ["release:gitlab", "release:gitea"])
def test_release_publishes_sha256sums_of_every_file_it_uploads(job_name: str) -> None:
    """install.sh and the role verify the .deb against SHA256SUMS from beside it: each release
    job computes it after the tag gate, before the uploads, and uploads it with the rest."""
    lines = _lines(_jobs()[job_name])
    assert SUMS_LINE in lines, f"{job_name} does not write dist/SHA256SUMS"
    sums_at = lines.index(SUMS_LINE)
    uploads = [i for i, line in enumerate(lines) if "for f in dist/" in line]
    assert uploads and all(sums_at < i for i in uploads)
    for i in uploads:
        assert "dist/*.deb dist/*.whl dist/install.sh dist/SHA256SUMS;" in lines[i]


def test_the_sums_line_lists_each_artefact_once_in_sha256sum_format(tmp_path: Path) -> None:
    """Run the CI line itself over a dist/ like build:deb and build:wheel leave it."""
    dist = tmp_path / "dist"
    dist.mkdir()
    files = {
        "monky-deployd_0.1.0_amd64.deb": b"deb\n",
        "monky_deployd-0.1.0-py3-none-any.whl": b"whl",
        "install.sh": b"#!/usr/bin/env bash\n",
    }
    for name, body in files.items():
        (dist / name).write_bytes(body)
    proc = subprocess.run(["bash", "-c", SUMS_LINE], cwd=tmp_path, timeout=30, check=False)
    assert proc.returncode == 0
    lines = (dist / "SHA256SUMS").read_text().splitlines()
    assert sorted(lines) == sorted(
        f"{hashlib.sha256(body).hexdigest()}  {name}" for name, body in files.items()
    )
