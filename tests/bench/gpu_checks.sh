#!/usr/bin/env bash
# The GPU checks of issues #3-#5 in one call on the H200 machine, most important first, each bounded so
# that what finished comes back. Prepare here first (the GPU machine has no registry and does not see
# ../shared):
#   bash ../shared/device/wheels.sh                      # litellm, sqlite-utils, ... as wheels in .whl/
#   mkdir -p .kb/kernelbench && cp -r ../shared/kernelbench/data .kb/kernelbench/ && echo /.kb/ >> .git/info/exclude
# then run `bash tests/bench/gpu_checks.sh` on the device, carrying .whl and .kb; results land in $OUT.
export PYTHONUNBUFFERED=1 KB_DATASET=$PWD/.kb/kernelbench PYTHONPATH=$PWD LITELLM_LOCAL_MODEL_COST_MAP=True
OUT=${OUT:-$(mktemp -d)}
set -o pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || echo "wheel install failed"
python3 -m pip install --no-build-isolation --no-deps -q -e . >/dev/null 2>&1 || echo "pip -e failed (using PYTHONPATH)"
export KB_BUILD_DIR=/tmp/kbbuild
echo "=== solve 2/40 (#4)"
KB_DB=$OUT/solve.sqlite timeout "${T_SOLVE:-300}" bash tests/bench/solve_demo.sh 2>&1 | tee "$OUT/solve.log"
echo "=== gpu tests (#3)"
timeout "${T_TESTS:-300}" python3 -m pytest -q -p no:cacheprovider -m gpu tests/evaluator -s 2>&1 | tee "$OUT/gpu_tests.log"
echo "=== problems check (#5)"
# the ones a first full scan (2026-11-30) left unchecked or checked under the old constant_pass rule, then
# the flags the issue names; `kb-agent problems check 1 --jobs 4` (and 2, 3) redo the whole scan
(timeout "${T_CHECK:-180}" kb-agent problems check 1/37-39,94-100,23 --jobs 4 --db "$OUT/checks.sqlite"
 timeout 120 kb-agent problems check 2/36,42,65,66,9,23,38,80,83 --jobs 4 --db "$OUT/checks.sqlite") 2>&1 \
  | tee "$OUT/checks.log"
echo "=== stage bench, strict cost (#3, #5)"
timeout "${T_BENCH:-150}" python3 tests/bench/bench_eval_stages.py --skip-plain --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
echo "=== red team on the GPU (#5)"
timeout "${T_RED:-300}" python3 tests/bench/redteam_table.py --device cuda --modes parity,strict --jobs 8 \
  --json "$OUT/redteam.json" 2>&1 | tee "$OUT/redteam.log"
