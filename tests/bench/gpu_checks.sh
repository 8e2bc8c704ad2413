#!/usr/bin/env bash
# The GPU checks of the open issues, as groups that each fit one call to the H200 machine (about 10
# minutes; run them back to back, the machine goes back when idle). Each step is bounded by a timeout and
# writes its whole output to $OUT/STEP.log, so what finished comes back even when a call is cut.
#
#   bash tests/bench/gpu_checks.sh GROUP [GROUP ...]
#
# Groups (figures measured 2026-12-02 on one H200, at the commits of that day):
#   evaluator   fork-server and Nsight Compute GPU tests, bench_ncu, bench_latency --small, the red-team
#               table in strict mode (#11, #13, #15; ~7.5 min)
#   latency     bench_latency at full sizes within LATENCY_BUDGET_S (330) seconds, LATENCY_ARGS added (#13)
#   redteam     the red-team table in strict mode, as in `evaluator` (#11)
#   prelude-tests  the GPU tests of the light torch/types.h (tests/evaluator/test_prelude.py)
#   strategies  tests/bench/strategies_demo.sh: best-of-n, beam, a fork (#16; ~5 min; the fork's full
#               recipe runs Nsight Compute on every correct turn)
#   checks      `problems check` of each level in CHECK_LEVELS (default "1 2 3 4") at --jobs 8 (#19;
#               level 1 114 s, level 2 50 s, level 3 43 s)
#   gpu-tests   the other GPU tests of the evaluator (timing, split build, binding cache, examples)
#   baseline    `kb-agent baseline` of BASELINE_SPEC (default 1) with BASELINE_ARGS (#17; level 1 at --jobs 8
#               takes two calls, 1/1-50 407 s and 1/51-100 382 s; problems the store has are skipped)
#   sweep       bench_sweep at SWEEP_JOBS (default 8) over SWEEP_PROBLEMS (default 1/1-20) x SWEEP_TURNS (3) of
#               scripted CUDA replies (SWEEP_REPLIES, default wrap: per problem a compile error, then two
#               correct candidates, each a new .cu; tests/bench/sweep_replies.py) with SWEEP_LATENCY_S (20) of latency
#               (#14; --jobs 1 over all 20 needs ~30 min of device time, more than a session has:
#               SWEEP_JOBS=1 SWEEP_PROBLEMS=1/1-3 is a seventh of it); the step's limit is SWEEP_LIMIT_S
#               (default 540); 1/1-20: --jobs 8 428 s (GPU busy 36 %), --jobs 20 302 s (63 %)
#   report      `kb-agent report` of every run in the store, by turn, with plots in $OUT/plots and the
#               problems check's flags excluded as well (#17)
#   ray         bench_sweep through the local pool, then through a local Ray instance (`--executor
#               local,ray`: a fresh Ray worker per evaluation), over RAY_PROBLEMS (default 1/1-8) x SWEEP_TURNS
#               with SWEEP_LATENCY_S (default here 5) at SWEEP_JOBS, and whether both gave the same verdicts
#               (#14). Needs Ray: see below.
#   profile     tests/bench/profile_stages.py on 1/19: the Triton candidate (a cold run, then a warm one in
#               the same process) and bench_latency's CUDA candidate, each stage and named part timed (#13)
#
# Every group writes one store, $OUT/study.sqlite (started as a copy of $GPU_CHECKS_DB when that is set:
# pass the previous call's store back in, so that baselines, checks and sweeps meet in one store for
# `report`).
# Prepare here first (the GPU machine has no package registry and does not see ../shared):
#   bash ../shared/device/wheels.sh        # litellm, sqlite-utils, ... as wheels in .whl/ (~53 MB)
#   mkdir -p .kb/kernelbench && cp -r ../shared/kernelbench/data .kb/kernelbench/ && echo /.kb/ >> .git/info/exclude
# then run `bash tests/bench/gpu_checks.sh GROUP` on the device, carrying .whl and .kb; results land in
# $OUT. Set GPU_CHECKS_HEAD=1 to run the committed HEAD rather than the working tree as it travelled.
# Ray (the `ray` group) and the wheels together are more than one call carries (64 MiB): build
# .kb/ray-site.tar.gz with tests/bench/ray_bundle.sh, carry it (.kb) in one call, which unpacks it into
# /tmp/raysite, then carry .whl and .kb/kernelbench in the next call while the machine is still warm
# (back to back: it goes back after 30 s idle); every call finds /tmp/raysite and puts it on PYTHONPATH.
set -u
cd "$(dirname "$0")/../.."
# a Python that dies of a signal prints every thread's stack (once, a sweep ended rc 139 with no trace)
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export KB_DATASET=${KB_DATASET:-$PWD/.kb/kernelbench} KB_BUILD_DIR=${KB_BUILD_DIR:-/tmp/kbbuild}
OUT=${OUT:-$(mktemp -d)}
T0=$(date +%s)
if [ "${GPU_CHECKS_HEAD:-0}" = 1 ] && git rev-parse -q HEAD >/dev/null 2>&1; then
  git checkout -q HEAD -- . && git clean -fdq -e .kb -e .whl -e .venv && echo "at $(git log --oneline -1)"
fi
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl >/dev/null 2>&1 && export PYTHONPATH=/tmp/site:$PWD || echo "wheel install failed"
else
  export PYTHONPATH=$PWD
fi
if [ -f .kb/ray-site.tar.gz ] && [ ! -d /tmp/raysite/ray ]; then
  mkdir -p /tmp/raysite && tar -xzf .kb/ray-site.tar.gz -C /tmp/raysite || echo "ray unpack failed"
fi
if [ -d /tmp/raysite/ray ]; then export PYTHONPATH=$PYTHONPATH:/tmp/raysite; fi
KB=(python3 -c "from kb_agent.agent.cli import main; main()")
DB=$OUT/study.sqlite
if [ -n "${GPU_CHECKS_DB:-}" ]; then cp "$GPU_CHECKS_DB" "$DB" || exit 1; fi
echo "setup $(($(date +%s) - T0)) s; $(nvidia-smi --query-gpu=name,clocks.sm,memory.used --format=csv,noheader 2>&1)"

step() { # step NAME TIMEOUT_S CMD...: CMD bounded by TIMEOUT_S, its output in $OUT/NAME.log, its tail here
  local name=$1 t=$2
  shift 2
  echo "=== $name start $(date +%T)"
  timeout -k 5 "$t" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  tail -n "${TAILN:-20}" "$OUT/$name.log"
  echo "=== $name rc=$rc end $(date +%T)"
}

for group in "$@"; do
  case $group in
    evaluator)
      step gpu_tests_zygote_ncu 200 python3 -m pytest -q -p no:cacheprovider -m gpu -s \
        tests/evaluator/test_zygote.py tests/evaluator/test_ncu.py
      step bench_ncu 200 python3 tests/bench/bench_ncu.py --json "$OUT/ncu.jsonl"
      step latency 120 python3 tests/bench/bench_latency.py --small --budget-s 105 --json "$OUT/latency.json" \
        --cases first_build_cuda,refine_same_decls,identical_again,triton
      step redteam 300 python3 tests/bench/redteam_table.py --device cuda --modes strict --jobs 4 --skip-slow \
        --jsonl "$OUT/redteam.jsonl"
      ;;
    latency)
      step latency "${LATENCY_LIMIT_S:-360}" python3 tests/bench/bench_latency.py --budget-s "${LATENCY_BUDGET_S:-330}" \
        --json "$OUT/latency.json" ${LATENCY_ARGS:-}
      ;;
    redteam)
      step redteam 300 python3 tests/bench/redteam_table.py --device cuda --modes strict --jobs 4 --skip-slow \
        --jsonl "$OUT/redteam.jsonl"
      ;;
    prelude-tests)
      step prelude_tests 240 python3 -m pytest -q -p no:cacheprovider -m gpu -s tests/evaluator/test_prelude.py
      ;;
    strategies)
      KB_DB="$OUT/strategies.sqlite" step strategies 540 bash tests/bench/strategies_demo.sh
      ;;
    checks)
      for level in ${CHECK_LEVELS:-1 2 3 4}; do
        step "check_l$level" 240 "${KB[@]}" problems check "$level" --jobs 8 --db "$DB" --json
      done
      ;;
    gpu-tests)
      step gpu_tests 540 python3 -m pytest -q -p no:cacheprovider -m gpu -rs tests/evaluator/test_timing_gpu.py \
        tests/evaluator/test_evaluate_gpu.py tests/evaluator/test_split_build.py \
        tests/evaluator/test_bindcache_gpu.py tests/evaluator/test_probe_memory_gpu.py tests/prompts/test_examples.py tests/bench/test_sweep_replies.py
      ;;
    baseline)
      # shellcheck disable=SC2086 # BASELINE_ARGS: more options, word-split on purpose (e.g. "--jobs 8")
      step baseline 540 "${KB[@]}" baseline "${BASELINE_SPEC:-1}" --db "$DB" ${BASELINE_ARGS:-}
      ;;
    sweep)
      step sweep "${SWEEP_LIMIT_S:-540}" python3 tests/bench/bench_sweep.py --device cuda \
        --latency-s "${SWEEP_LATENCY_S:-20}" --turns "${SWEEP_TURNS:-3}" \
        --jobs "${SWEEP_JOBS:-8}" --problem "${SWEEP_PROBLEMS:-1/1-20}" --replies "${SWEEP_REPLIES:-wrap}" --db "$DB"
      ;;
    ray)
      step ray_sweep "${SWEEP_LIMIT_S:-540}" python3 tests/bench/bench_sweep.py --device cuda --executor local,ray \
        --latency-s "${SWEEP_LATENCY_S:-5}" --turns "${SWEEP_TURNS:-3}" --jobs "${SWEEP_JOBS:-8}" \
        --problem "${RAY_PROBLEMS:-1/1-8}" --replies wrap
      ;;
    profile)
      step profile_triton 150 python3 tests/bench/profile_stages.py --problem 1/19 --repeat 2 --top 30
      step profile_cuda 200 python3 tests/bench/profile_stages.py --problem 1/19 --candidate cuda:relu --repeat 1 \
        --top 30
      ;;
    report)
      mapfile -t runs < <(python3 -c "import sqlite3, sys
print('\n'.join(r[0] for r in sqlite3.connect(sys.argv[1]).execute('select name from runs order by id')))" "$DB")
      step report 120 "${KB[@]}" report "${runs[@]}" --db "$DB" --by-turn --by-budget --per-problem \
        --exclude-degenerate --plot "$OUT/plots"
      ;;
    *)
      echo "unknown group $group: evaluator, latency, redteam, prelude-tests, strategies, checks, gpu-tests, baseline, sweep, ray, profile or report" >&2
      exit 2
      ;;
  esac
done
echo "all groups in $(($(date +%s) - T0)) s; logs in $OUT"
