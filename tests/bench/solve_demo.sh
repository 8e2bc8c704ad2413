#!/usr/bin/env bash
# The whole loop on a GPU machine, with a scripted model: `kb-agent solve --problem 2/40 --turns 5` against
# agent.fakeserver serving tests/bench/solve_2_40/{1..5}.md (a compile error, a wrong result, a naive
# CUDA GEMM, a shared-memory tiled GEMM, a 128x128 register-blocked SGEMM), then the report and the run
# turn by turn. Run from anywhere:
#
#   KB_DATASET=/path/to/kernelbench bash tests/bench/solve_demo.sh
#
# Environment (all optional):
#   KB_DATASET        local KernelBench copy; default: shared/kernelbench in or beside the repo, if present
#   KB_DB             trajectory store; default: a fresh SQLite file in a temporary directory
#   PYTHON            the interpreter (default python3)
#   DEMO_TURNS        turns (default 5)
#   DEMO_EXTRA_ARGS   more `solve` options, e.g. "--device cpu" to test the plumbing on a CPU machine
#   DEMO_REPLIES      the replies directory (default tests/bench/solve_2_40)
#   DEMO_RUN_NAME     the run's name (default demo-2-40-<time>-<pid>)
# Exit status: that of `kb-agent solve` (0 when the run finished), or 2 when the setup failed.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 2
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

# kb-agent: the installed script, else the CLI straight from this checkout
if command -v kb-agent >/dev/null 2>&1; then
  KB=(kb-agent)
else
  KB=("$PY" -c 'from kb_agent.agent.cli import main; main()')
fi

if [ -z "${KB_DATASET:-}" ]; then
  for d in "$ROOT/shared/kernelbench" "$ROOT/../shared/kernelbench"; do
    if [ -d "$d" ]; then export KB_DATASET=$(cd "$d" && pwd); break; fi
  done
fi
[ -n "${KB_DATASET:-}" ] || echo "warning: KB_DATASET is not set and no shared/kernelbench was found: problems come from the Hub" >&2

TMP=$(mktemp -d "${TMPDIR:-/tmp}/kb-demo.XXXXXX") || exit 2
export KB_DB=${KB_DB:-$TMP/kb.sqlite}
REPLIES=${DEMO_REPLIES:-$ROOT/tests/bench/solve_2_40}
TURNS=${DEMO_TURNS:-5}
RUN_NAME=${DEMO_RUN_NAME:-demo-2-40-$(date +%Y%m%d-%H%M%S)-$$}
read -r -a EXTRA <<<"${DEMO_EXTRA_ARGS:-}"

SERVER_PID=
WATCH_PID=
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
  fi
  if [ -n "$WATCH_PID" ]; then
    kill "$WATCH_PID" 2>/dev/null
    wait "$WATCH_PID" 2>/dev/null
  fi
  echo "== fake server log"
  cat "$TMP/server.log" 2>/dev/null
  echo "(store and server log kept in $TMP)"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 141' PIPE

section() { printf '\n== %s\n' "$*"; }

section "setup"
echo "root:      $ROOT"
echo "kb-agent:  ${KB[*]}"
echo "dataset:   ${KB_DATASET:-<the Hub>}"
echo "store:     $KB_DB"
echo "replies:   $REPLIES ($(ls "$REPLIES" | tr '\n' ' '))"
echo "run name:  $RUN_NAME"
"$PY" - <<'PY'
import platform, sys
print("python:   ", sys.version.split()[0], platform.machine())
try:
    import torch
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    print("torch:    ", torch.__version__, "cuda", torch.version.cuda, "|", gpu)
except Exception as e:  # the solve below reports the real problem
    print("torch:     not importable:", e)
PY
command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -n 1

# the scripted model: port 0 lets the OS pick a free port; the server prints its URL first
"$PY" -u -m kb_agent.agent.fakeserver --replies "$REPLIES" --port 0 >"$TMP/server.log" 2>&1 &
SERVER_PID=$!
# should this script die without its trap (SIGKILL), the server goes with it
(while kill -0 $$ 2>/dev/null; do sleep 1; done; kill "$SERVER_PID" 2>/dev/null) >/dev/null 2>&1 &
WATCH_PID=$!
BASE=
for _ in $(seq 1 100); do
  BASE=$(grep -m1 -oE '^http://127\.0\.0\.1:[0-9]+' "$TMP/server.log" 2>/dev/null)
  [ -n "$BASE" ] && break
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$BASE" ]; then
  echo "error: the fake LLM server did not start" >&2
  exit 2
fi
echo "fake LLM:  $BASE/v1 (pid $SERVER_PID)"

section "kb-agent solve --problem 2/40 --turns $TURNS ${EXTRA[*]+${EXTRA[*]}}"
t0=$(date +%s)
"${KB[@]}" solve --problem 2/40 --turns "$TURNS" --model openai/scripted-demo --api-base "$BASE/v1" \
  --run-name "$RUN_NAME" ${EXTRA[@]+"${EXTRA[@]}"}
rc=$?
echo "solve exited $rc after $(($(date +%s) - t0)) s"

section "kb-agent report $RUN_NAME"
"${KB[@]}" report "$RUN_NAME"

section "kb-agent runs show $RUN_NAME"
"${KB[@]}" runs show "$RUN_NAME"

exit "$rc"
