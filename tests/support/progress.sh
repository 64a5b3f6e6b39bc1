# shellcheck shell=bash
# One line per stage of a long step, and the details in a log file: the shell twin of
# tests/support/progress.py. Source it, then:
#
#   progress_begin LOG TOTAL      # truncate LOG; TOTAL stages ("" when unknown)
#   progress_say TEXT             # a line of its own, e.g. what takes long and where LOG is
#   progress_stage NAME CMD...    # run CMD (a command or a function) with its output in LOG
#
# progress_stage prints "[n/N] NAME ... 41s" on stderr (on a terminal the time ticks while CMD
# runs). When CMD fails it prints "failed after 41s", the last lines of LOG, and returns CMD's
# status, so a caller under `set -e` stops there. CMD runs in a subshell with `set -e` on, which
# bash ignores when the progress_stage call itself is tested (if, ||, &&): give such a call
# plain commands, not functions that rely on `set -e`.

PROGRESS_LOG=""
PROGRESS_TOTAL=""
PROGRESS_DONE=0
PROGRESS_TAIL_LINES=30

progress_begin() {
  PROGRESS_LOG="$1"
  PROGRESS_TOTAL="${2:-}"
  PROGRESS_DONE=0
  mkdir -p "$(dirname "$PROGRESS_LOG")"
  : >"$PROGRESS_LOG"
}

progress_say() {
  printf '%s\n' "$*" >&2
}

# Microseconds since the epoch (bash 5's EPOCHREALTIME, whatever the locale's decimal point).
progress_now() {
  local now="${EPOCHREALTIME/[.,]/}"
  printf '%d' "$((10#$now))"
}

# The time since $1 (progress_now): 0.4s, 41s, 5m12s, the format of progress.py's duration().
progress_since() {
  local tenths=$((($(progress_now) - $1) / 100000)) seconds
  seconds=$(((tenths + 5) / 10))
  if [ "$tenths" -lt 100 ]; then
    printf '%d.%ds' $((tenths / 10)) $((tenths % 10))
  elif [ "$seconds" -lt 60 ]; then
    printf '%ds' "$seconds"
  else
    printf '%dm%02ds' $((seconds / 60)) $((seconds % 60))
  fi
}

progress_stage() {
  local name="$1"
  shift
  PROGRESS_DONE=$((PROGRESS_DONE + 1))
  local head="$name ..."
  [ -n "$PROGRESS_TOTAL" ] && head="[$PROGRESS_DONE/$PROGRESS_TOTAL] $head"
  local began ticker="" status=0 errexit=0
  began="$(progress_now)"
  printf '=== %s\n$ %s\n' "$head" "$*" >>"$PROGRESS_LOG"
  if [ -t 2 ]; then
    # Ticks until stopped; also stops within a second of the script's own end (kill -0 $$).
    (
      while kill -0 $$ 2>/dev/null; do
        printf '\r\033[K%s %s' "$head" "$(progress_since "$began")" >&2
        sleep 1
      done
    ) &
    ticker=$!
  else
    printf '%s' "$head" >&2
  fi
  # `set -e` is ignored inside anything tested by `||`, `&&` or `if`; so the status is read
  # with errexit off, and CMD's own subshell turns it back on.
  [[ $- == *e* ]] && errexit=1
  set +e
  (
    set -e
    "$@"
  ) >>"$PROGRESS_LOG" 2>&1 </dev/null
  status=$?
  if [ -n "$ticker" ]; then
    kill "$ticker" 2>/dev/null
    wait "$ticker" 2>/dev/null
    printf '\r\033[K%s' "$head" >&2
  fi
  [ "$errexit" = 1 ] && set -e
  local took
  took="$(progress_since "$began")"
  if [ "$status" -eq 0 ]; then
    printf '=== %s %s\n' "$head" "$took" >>"$PROGRESS_LOG"
    printf ' %s\n' "$took" >&2
    return 0
  fi
  printf '=== %s failed after %s (exit %d)\n' "$head" "$took" "$status" >>"$PROGRESS_LOG"
  printf ' failed after %s (exit %d)\n--- last lines of %s:\n' "$took" "$status" "$PROGRESS_LOG" >&2
  tail -n "$PROGRESS_TAIL_LINES" "$PROGRESS_LOG" >&2
  return "$status"
}
