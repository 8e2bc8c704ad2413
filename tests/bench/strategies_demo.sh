#!/usr/bin/env bash
# Search strategies on a GPU machine with a scripted model (issue 16): best-of-n (--n 3, 2 turns) and beam
# (--width 2 --branch 2, 2 rounds) on KernelBench 1/19 (ReLU) and 1/21 (Sigmoid), against agent.fakeserver
# serving tests/bench/strategies_1_19_21/{1..5}.md in a cycle (a compile error, a scalar ReLU, a scalar
# sigmoid, float4 versions of both: each problem has right and wrong answers among them); then each run's
# report (fast_p, model calls and evaluations per trajectory) and the two runs paired; then a linear run of
# 3 turns forked at turn 2 with the full feedback recipe, and those two paired. One command, from anywhere:
#
#   KB_DATASET=/path/to/kernelbench bash tests/bench/strategies_demo.sh
#
# Environment (all optional): KB_DATASET (default shared/kernelbench in or beside the repo), KB_DB (default
# a fresh file in a temporary directory), PYTHON (python3), STRAT_PROBLEMS (1/19,1/21), STRAT_REPLIES (the
# replies folder), STRAT_EXTRA_ARGS (more solve options; "--device cpu --backend triton --no-retime" with
# STRAT_PROBLEMS=toy/relu STRAT_REPLIES=agent/scripted/demo tests the plumbing on a CPU machine).
# Which reply a request gets depends on the order the parallel requests reach the server, so the
# figures vary between runs; the counts (model calls, evaluations) do not. Exit status: 0, or the first
# failing command's.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
KB=("$PY" -c 'from kb_agent.agent.cli import main; main()')
if [ -z "${KB_DATASET:-}" ]; then
  for d in "$ROOT/shared/kernelbench" "$ROOT/../shared/kernelbench"; do
    if [ -d "$d" ]; then export KB_DATASET=$(cd "$d" && pwd); break; fi
  done
fi
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kb-strategies.XXXXXX")
export KB_DB=${KB_DB:-$TMP/kb.sqlite}
PROBLEMS=${STRAT_PROBLEMS:-1/19,1/21}
REPLIES=${STRAT_REPLIES:-$ROOT/tests/bench/strategies_1_19_21}
read -r -a EXTRA <<<"${STRAT_EXTRA_ARGS:-}"
TAG=$(date +%H%M%S)-$$

"$PY" -u -m kb_agent.agent.fakeserver --replies "$REPLIES" --cycle --port 0 >"$TMP/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null; echo "(store and server log in $TMP)"' EXIT
BASE=
for _ in $(seq 1 100); do
  BASE=$(grep -m1 -oE '^http://127\.0\.0\.1:[0-9]+' "$TMP/server.log" 2>/dev/null) && break
  sleep 0.1
done
[ -n "$BASE" ] || { echo "error: the fake LLM server did not start" >&2; exit 2; }
echo "dataset ${KB_DATASET:-<the Hub>}; store $KB_DB; fake LLM $BASE/v1; replies $REPLIES"
solve() { "${KB[@]}" solve --problem "$PROBLEMS" --model openai/scripted --api-base "$BASE/v1" --jobs 2 "$@" \
  ${EXTRA[@]+"${EXTRA[@]}"}; }
timed() { local t0; t0=$(date +%s); "$@"; echo "($(($(date +%s) - t0)) s)"; }

echo; echo "== best-of-n: --n 3 --turns 2"
timed solve --strategy best-of-n --n 3 --turns 2 --run-name "bon-$TAG"
echo; echo "== beam: --width 2 --branch 2 --turns 2"
timed solve --strategy beam --width 2 --branch 2 --turns 2 --run-name "beam-$TAG"
for r in "bon-$TAG" "beam-$TAG"; do echo; echo "== report $r"; "${KB[@]}" report "$r" --per-problem; done
echo; echo "== report bon-$TAG beam-$TAG --paired"
"${KB[@]}" report "bon-$TAG" "beam-$TAG" --paired
echo; echo "== linear, 3 turns, then forked at turn 2 with --feedback full"
timed solve --turns 3 --run-name "lin-$TAG"
timed "${KB[@]}" fork "lin-$TAG" --turn 2 --feedback full --run-name "fork-$TAG"
"${KB[@]}" report "lin-$TAG" "fork-$TAG" --paired
"${KB[@]}" report "fork-$TAG" | grep -E "model calls|fast_1.0 " || true
