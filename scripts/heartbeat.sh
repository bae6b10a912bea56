# shellcheck shell=bash
# Sourced by the scripts whose steps can take minutes (scripts/test.sh, scripts/demo.sh,
# packaging/build-deb.sh): `waiting WHAT CMD...` runs CMD and, every 20 s it still runs, says so
# on stderr ("test.sh: still installing the venv's packages (40 s)"), so no step is silent for
# more than 30 s. CMD's exit status is waiting's; its stdout is untouched (a $(...) gets only it).
# HEARTBEAT_S sets the interval (tests/repo/test_suite_runner.py shortens it).
waiting() {
  local what=$1 start=$SECONDS beat rc=0
  shift
  (
    trap 'kill "$nap" 2>/dev/null; exit 0' TERM
    while :; do
      sleep "${HEARTBEAT_S:-20}" &
      nap=$!
      wait "$nap"
      printf '%s: still %s (%d s)\n' "${0##*/}" "$what" $((SECONDS - start))
    done
  ) >&2 &
  beat=$!
  "$@" || rc=$?
  kill "$beat" 2>/dev/null || true
  wait "$beat" 2>/dev/null || true
  return "$rc"
}
