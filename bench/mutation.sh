#!/usr/bin/env bash
# Mutation testing of the pure core: bash bench/mutation.sh
#
# mutmut 3 mutates src/monky_deployd/core/{envfile,dotenv,bundle,token_plan,pullerrors,registry_cred}.py
# one change at a time and runs the unit tests of tests/unit/core against each mutant in a copy of
# the tree (mutants/, git-ignored). The configuration is [tool.mutmut] in pyproject.toml.
# Prints killed / survived / timeout per module and every mutant the tests did not kill (with its
# diff), and exits 1 when a module's score, (killed + timeout) / total, is below 90 %.
# The survivors accepted, and why, are listed in bench/README.md.
#
# Runs on a fresh machine: creates .venv with the test extras when it is missing and installs
# mutmut into it (mutmut is not a test dependency: nothing else needs it).
# Environment: MUTATION_JOBS (parallel mutants, default: the number of CPUs),
#              MUTATION_MIN_SCORE (default 90).
# Not part of scripts/test.sh: a run takes several minutes on 2 cores (bench/README.md).
set -euo pipefail

cd "$(dirname "$0")/.."
MUTMUT_VERSION="3.8.1"
jobs="${MUTATION_JOBS:-$(nproc)}"
min_score="${MUTATION_MIN_SCORE:-90}"

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
    .venv/bin/pip install --prefer-binary -e '.[test]'
fi
if [ "$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("mutmut"))' 2>/dev/null)" != "$MUTMUT_VERSION" ]; then
    .venv/bin/pip install --prefer-binary "mutmut==$MUTMUT_VERSION"
fi

# A fresh run every time: mutmut keeps verdicts in mutants/ and would reuse stale ones.
rm -rf mutants
mkdir -p mutants
log=mutants/mutmut-run.log
start=$(date +%s)
export MONKY_HYPOTHESIS=mutation
echo "mutmut $MUTMUT_VERSION, $jobs in parallel (progress in $log) ..."
if ! .venv/bin/mutmut run --max-children "$jobs" >"$log" 2>&1; then
    tail -n 40 "$log" | tr '\r' '\n' | tail -n 40
    echo "mutmut run failed (see $log)" >&2
    exit 2
fi
.venv/bin/mutmut export-cicd-stats >/dev/null
elapsed=$(($(date +%s) - start))

status=0
.venv/bin/python bench/mutation_summary.py --min-score "$min_score" || status=$?
echo
echo "wall time: ${elapsed}s"
exit "$status"
