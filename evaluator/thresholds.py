"""Every threshold strict mode judges by, in one place, each with its unit and the measurement behind it.

The checks that use them live in `evaluator.strict` and the stage modules; the verdict is decided from
the recorded facts by `evaluator.judge`. Changing a value here changes what strict mode rejects: say why
in the commit, with the measurement.
"""

from __future__ import annotations

# relative_error / trial_*: ‖actual − expected‖ / ‖expected‖ on strict trials. A zero or constant output
# against a non-constant reference has a relative error of about 1; honest fp32 kernels land far below
# 1e-3 (tf32 near 3e-4), half precision below 1e-2.
MAX_RELATIVE_ERROR = {"fp32": 1e-2, "fp16": 5e-2, "bf16": 5e-2}

# custom_kernels_do_the_work (until replaced): share of one forward's GPU time in custom kernels.
MIN_CUSTOM_SHARE = 0.5

# speed_of_light: peak dense rates per compute capability, FLOP/s (vendor datasheets: H100/H200 SXM TF32
# tensor 495e12, FP16/BF16 tensor 990e12; A100 156e12 / 312e12). fp32 problems use the TF32 rate, the
# most generous one a candidate could legitimately reach.
PEAK_FLOPS = {
    "9.0": {"fp32": 495e12, "fp16": 990e12, "bf16": 990e12},
    "8.0": {"fp32": 156e12, "fp16": 312e12, "bf16": 312e12},
}
# speed_of_light: a candidate is rejected as implausible only when it beats the floor by this factor
# (timer noise).
SOL_SLACK = 0.8

# timed_work_on_stream: the host clock around a synchronised call may exceed the timed stream's events
# by this factor plus this many ms before work is said to have escaped the timed stream.
STREAM_HOST_FACTOR = 2.0
STREAM_HOST_SLACK_MS = 0.1

# no_replay: the candidate's time on repeated inputs must be at least this fraction of its time on fresh
# input values (medians, or else the fastest calls). Honest calls vary by up to 2x on a loaded CPU under
# the Triton interpreter (measured: 172 vs 359 ms), far less on a GPU, but another process on the GPU
# once slowed the fresh-value calls of an honest 26 us ReLU to a 52 us median (H200, 2026-11-30).
REPLAY_FLOOR = {"cuda": 0.5, "cpu": 0.1}
