import pytest
from kb_agent.agent.feedback import feedback_for, initial_messages, profile_table, trim_log
from kb_agent.evaluator.result import (
    CompileInfo,
    CorrectnessInfo,
    EvalResult,
    KernelRow,
    ProfileInfo,
    Status,
    TrialResult,
)
from kb_agent.problems import Problem

NEXT_STEP = "Answer with the whole"

PROBLEM = Problem(
    level=0,
    problem_id=1,
    name="relu",
    code="import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n",
    source="toy",
)


def test_every_feedback_ends_with_what_to_do_next():
    results = [
        EvalResult(Status.COMPILE_ERROR, message="nvcc failed", compile=CompileInfo(ok=False, errors=["e"])),
        EvalResult(Status.RUNTIME_ERROR, message="CUDA error: illegal memory access"),
        EvalResult(Status.TIMEOUT, message="correctness stage ran past 120 s"),
        EvalResult(Status.INCORRECT, message="output differs"),
        EvalResult(
            Status.REJECTED, message="ModelNew calls torch.relu; no custom kernel ran", backend="cuda"
        ),
        EvalResult(Status.CORRECT, speedup=1.5, runtime_ms=1.0, ref_runtime_ms=1.5),
    ]
    for r in results:
        text = feedback_for(r)
        last = text.strip().splitlines()[-1]
        assert NEXT_STEP in last and "```python" in last, (r.status, text)
        assert "$" not in text
    assert NEXT_STEP in feedback_for(None, no_code=True).strip().splitlines()[-1]


@pytest.mark.parametrize("status", [Status.CORRECT, Status.INCORRECT, Status.COMPILE_ERROR])
def test_a_reused_result_tells_the_model_its_code_repeats_an_earlier_turn(status):
    r = EvalResult(status, message="output differs", speedup=1.2, runtime_ms=1.0, ref_runtime_ms=1.2,
                   compile=CompileInfo(ok=status != Status.COMPILE_ERROR, errors=["k.cu(1): error: x"]))  # fmt: skip
    assert "identical to code you sent earlier" not in feedback_for(r)
    r.reused = {"stages": {"timing": 2.0}, "child_start": {}}
    text = feedback_for(r)
    assert "identical to code you sent earlier" in text and NEXT_STEP in text.strip().splitlines()[-1]


def test_compile_error_shows_first_errors_only():
    errors = [f"kernel.cu({i}): error: identifier x{i} is undefined" for i in range(25)]
    r = EvalResult(
        Status.COMPILE_ERROR,
        message="Building the CUDA extension failed.",
        compile=CompileInfo(ok=False, errors=errors),
    )
    text = feedback_for(r)
    assert "compile error" in text
    assert "Building the CUDA extension failed." in text
    assert "x0 is undefined" in text and "x9 is undefined" in text
    assert "x10 is undefined" not in text
    assert "and 15 more errors" in text


def test_compile_error_without_parsed_errors_uses_the_log_from_the_first_error():
    noise = "\n".join(f"[{i}/3] c++ -O3 -I/include stuff" for i in range(200))
    log = noise + "\nIn file included from main.cpp:1:\nmain.cpp:7:3: error: expected ';'\n   foo()\n"
    r = EvalResult(Status.COMPILE_ERROR, compile=CompileInfo(ok=False, log=log))
    text = feedback_for(r)
    assert "main.cpp:7:3: error: expected ';'" in text
    assert "[0/3]" not in text  # the noise before the first error is dropped
    assert len(text) < 1500


def test_trim_log_caps_length_and_falls_back_to_the_tail():
    assert trim_log("a\n" * 10 + "fatal error: boom\n" + "x" * 10_000, 500).endswith("[... trimmed]")
    assert trim_log("line\n" * 5000, 100).endswith("line")


def test_runtime_error_carries_message_and_output_tail():
    r = EvalResult(
        Status.RUNTIME_ERROR,
        message="RuntimeError: CUDA error: an illegal memory access was encountered",
        stderr="warming up\n" * 1000 + "Traceback: in forward, line 42\n",
    )
    text = feedback_for(r)
    assert "illegal memory access" in text
    assert "Traceback: in forward, line 42" in text
    assert text.count("warming up") < 300  # only the tail


def test_timeout_feedback_names_the_stage():
    text = feedback_for(EvalResult(Status.TIMEOUT, message="the correctness stage ran past 120 s"))
    assert "timeout" in text and "correctness stage ran past 120 s" in text


def test_incorrect_summarises_values_shapes_and_nans():
    trials = [
        TrialResult(trial=0, seed=1, passed=True),
        TrialResult(
            trial=1,
            seed=2,
            passed=False,
            problem="values",
            max_abs_diff=0.53125,
            mean_abs_diff=0.0012,
            mismatched=37,
            numel=4096,
            mismatch_fraction=37 / 4096,
            first_mismatches=[{"index": [0, 17], "expected": 1.25, "actual": 0.71875}],
            nan_actual=3,
        ),
        TrialResult(
            trial=2, seed=3, passed=False, problem="shape", expected_shape=[8, 16], actual_shape=[8, 8]
        ),
        TrialResult(
            trial=3,
            seed=4,
            passed=False,
            problem="dtype",
            expected_dtype="torch.float32",
            actual_dtype="torch.float16",
        ),
        TrialResult(trial=4, seed=5, passed=False, problem="type", expected_shape=[8]),
    ]
    r = EvalResult(
        Status.INCORRECT,
        message="Output mismatch",
        correctness=CorrectnessInfo(trials=5, passed=1, atol=1e-4, rtol=1e-4, results=trials),
    )
    text = feedback_for(r)
    assert "Passed 1 of 5 correctness trials (atol=0.0001, rtol=0.0001)" in text
    assert "max abs diff 0.5312" in text and "mean abs diff 0.0012" in text
    assert "37 of 4096 elements outside tolerance (0.90%)" in text
    assert "at [0, 17]: expected 1.25, got 0.7188" in text
    assert "3 NaN in your output (reference: 0)" in text
    assert "output shape [8, 8], expected [8, 16]" in text
    assert "output dtype torch.float16, expected torch.float32" in text
    assert "1 more failing trials" in text  # only the first 3 failing trials in detail


def test_rejected_names_the_rule_and_the_backend():
    r = EvalResult(Status.REJECTED, message="no custom kernel ran in forward", backend="triton")
    text = feedback_for(r)
    assert "no custom kernel ran in forward" in text and "Triton kernels" in text


def test_correct_has_times_speedup_and_top_kernels():
    kernels = [
        KernelRow(
            name=f"kernel_{i}", calls=i + 1, total_us=100.0 - i, avg_us=1.0, share=0.1, custom=i % 2 == 0
        )
        for i in range(12)
    ]
    profile = ProfileInfo(kernels=kernels, total_us=1000, custom_kernel_ran=True, custom_share=0.62)
    r = EvalResult(Status.CORRECT, speedup=0.8, runtime_ms=1.25, ref_runtime_ms=1.0, profile=profile)
    text = feedback_for(r)
    assert "yours 1.25 ms, the reference 1 ms: speedup 0.80x (slower than the reference)" in text
    assert "Make it faster" in text
    assert "kernel_0" in text and "kernel_7" in text and "kernel_8" not in text
    assert "(... 4 more kernels)" in text
    assert "custom" in text and "library" in text
    assert "62%" in text


def test_a_slow_correct_kernel_reads_its_speedup_not_0_00x():
    r = EvalResult(Status.CORRECT, speedup=0.00031, runtime_ms=10.6, ref_runtime_ms=0.0033)
    assert "speedup 0.00031x (slower than the reference)" in feedback_for(r)


def test_profile_table_flags_no_custom_kernel_and_missing_profile():
    p = ProfileInfo(
        kernels=[KernelRow("ampere_sgemm_128x64_nn", 1, 50.0, 50.0, 1.0, False)], custom_kernel_ran=False
    )
    assert "None of these is your kernel" in profile_table(p)
    assert profile_table(None) == "(no profile was taken)"
    text = feedback_for(EvalResult(Status.CORRECT, speedup=2.0, runtime_ms=0.5, ref_runtime_ms=1.0))
    assert "(no profile was taken)" in text and "faster than the reference" in text


def test_no_code_feedback_and_truncation_note():
    assert "class ModelNew" in feedback_for(None, no_code=True)
    assert "cut off at the token limit" in feedback_for(None, no_code=True, truncated=True)
    with pytest.raises(ValueError):
        feedback_for(None)


def test_feedback_round_trips_through_json():
    r = EvalResult(Status.CORRECT, speedup=1.2, runtime_ms=1.0, ref_runtime_ms=1.2)
    assert feedback_for(EvalResult.from_json(r.to_json())) == feedback_for(r)


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_initial_messages_hold_contract_target_and_reference(backend):
    msgs = initial_messages(PROBLEM, backend, "NVIDIA H100 80GB HBM3", "9.0", "bf16")
    assert [m["role"] for m in msgs] == ["system", "user"]
    task = msgs[1]["content"]
    assert PROBLEM.code.strip() in task
    assert "NVIDIA H100 80GB HBM3" in task and "9.0" in task
    assert "bf16" in task and "torch.bfloat16" in task and "atol=0.01" in task
    assert "class ModelNew" in task and "get_init_inputs()" in task
    assert ("load_inline" if backend == "cuda" else "@triton.jit") in task
    assert "exactly one fenced ```python block" in task
    assert "$" not in task.replace("$$", "")


def test_initial_messages_rejects_unknown_backend_and_precision():
    with pytest.raises(ValueError, match="backend"):
        initial_messages(PROBLEM, "auto", "gpu", "9.0", "fp32")
    with pytest.raises(ValueError, match="precision"):
        initial_messages(PROBLEM, "cuda", "gpu", "9.0", "fp8")


# -- defects of the old feedback, each with the input that showed it -------------------------------------
def _incorrect(**trial) -> EvalResult:
    t = TrialResult(trial=0, seed=7, passed=False, problem="values", mismatched=1, numel=16, **trial)
    return EvalResult(
        Status.INCORRECT,
        message="output mismatch in correctness trial 1 of 5 (values)",
        correctness=CorrectnessInfo(trials=5, passed=0, atol=1e-4, rtol=1e-4, results=[t]),
    )


def test_a_trial_is_numbered_as_the_verdict_numbers_it():
    text = feedback_for(_incorrect())
    assert "correctness trial 1 of 5" in text and "- trial 1 of 5:" in text
    assert "trial 0" not in text


def test_the_evaluators_profiler_lines_are_not_the_candidates_output():
    stderr = (
        "USDT:2026-12-01 20:23:10 23442:23442 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
        "my own debug line\n"
        "USDT:2026-12-01 20:23:10 23442:23442 SyncActivityProfilerHandler.cpp:59] profiler_stop\n"
        "STAGE:2024-05-01 10:00:00 1:1 ActivityProfilerController.cpp:314] Completed Stage: Warm Up\n"
    )
    text = feedback_for(EvalResult(Status.RUNTIME_ERROR, message="RuntimeError: boom", stderr=stderr))
    assert "my own debug line" in text
    assert "USDT" not in text and "profiler_start" not in text and "STAGE:" not in text
    only_ours = feedback_for(
        EvalResult(Status.RUNTIME_ERROR, message="RuntimeError: boom", stderr=stderr[:88])
    )
    assert "Output of your module" not in only_ours


def test_cuda_compile_errors_are_shown_once():
    errors = [
        'cuda.cu(12): error: identifier "blockDimx" is undefined\n    > int i = blockDimx.x;',
        'cuda.cu(20): error: expected a ";"',
    ]
    # the build stage's message repeats the parsed errors (evaluator/stages/build.py)
    r = EvalResult(
        Status.COMPILE_ERROR,
        message="compilation failed:\n" + "\n".join(errors),
        compile=CompileInfo(ok=False, errors=errors),
    )
    text = feedback_for(r)
    assert text.count('identifier "blockDimx" is undefined') == 1
    assert text.count("int i = blockDimx.x;") == 1 and text.count('expected a ";"') == 1
    assert "compilation failed:" in text


def test_a_cuda_candidate_that_cannot_run_here_is_not_told_to_fix_out_of_bounds_accesses():
    message = (
        "this machine's torch has no CUDA: the CUDA sources passed an nvcc compile check (sm_90) but cannot "
        "be built into a module or run here"
    )
    r = EvalResult(Status.RUNTIME_ERROR, message=message, backend="cuda", device="cpu")
    text = feedback_for(r)
    assert "could not be checked here" in text and message in text
    assert "running it failed" not in text and "out-of-bounds" not in text
    assert "Answer with the whole module" in text.strip().splitlines()[-1]
    driverless = EvalResult(
        Status.RUNTIME_ERROR, message="RuntimeError: Found no NVIDIA driver on your system."
    )
    assert "could not be checked here" in feedback_for(driverless)
    real = feedback_for(EvalResult(Status.RUNTIME_ERROR, message="CUDA error: an illegal memory access"))
    assert "running it failed" in real and "out-of-bounds" in real


def test_harness_paths_are_stripped_from_messages_output_and_logs():
    from kb_agent.agent.feedback import clean_paths

    trace = (
        'File "/tmp/kb-eval-4242-a1b2c3d4/candidate.py", line 9, in forward\n'
        '  File "/home/u/proj/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1751\n'
        '  File "/usr/lib/python3.11/importlib/__init__.py", line 126\n'
        "/home/u/.cache/kb-agent/build/0123456789abcdef/relu_ext/cuda.cu(4): error: bad\n"
    )
    cleaned = clean_paths(trace)
    assert 'File "candidate.py", line 9' in cleaned
    assert 'File "torch/nn/modules/module.py"' in cleaned
    assert 'File "python3.11/importlib/__init__.py"' in cleaned
    assert "build/relu_ext/cuda.cu(4): error: bad" in cleaned
    assert "/tmp/" not in cleaned and "/home/" not in cleaned and "site-packages" not in cleaned
    r = EvalResult(
        Status.RUNTIME_ERROR,
        message="an exception while running correctness trial 1:\n" + trace,
        stderr=trace,
    )
    text = feedback_for(r)
    assert "kb-eval-" not in text and "site-packages" not in text and "candidate.py" in text
    c = EvalResult(Status.COMPILE_ERROR, compile=CompileInfo(ok=False, log=trace))
    assert "kb-agent/build" not in feedback_for(c) and "build/relu_ext/cuda.cu" in feedback_for(c)


# -- recipes -----------------------------------------------------------------------------------------------
def _diagnosed() -> EvalResult:
    r = _incorrect(
        max_abs_diff=1.0,
        diagnosis="a constant offset: your values are the reference's + 1; the wrong elements: one element",
        mismatch_map=[
            "4 rows (dim 0) x 4 columns (dim 1); one cell ~ 1 x 1 elements",
            "#...",
            "....",
            "....",
            "....",
        ],
    )
    return r


def _correct() -> EvalResult:
    kernels = [KernelRow("relu_kernel", 1, 10.0, 10.0, 1.0, True)]
    return EvalResult(
        Status.CORRECT, speedup=1.5, runtime_ms=1.0, ref_runtime_ms=1.5,
        profile=ProfileInfo(kernels=kernels, total_us=10.0, custom_kernel_ran=True, custom_share=1.0),
    )  # fmt: skip


def test_nsight_computes_line_says_why_it_did_not_run_on_the_cpu():
    """A new user's `--feedback ncu` on the CPU read "Nsight Compute: not run." with no reason."""
    import dataclasses

    cpu = dataclasses.replace(_correct(), device="cpu")
    for recipe in ("ncu", "speed_of_light"):
        text = feedback_for(cpu, recipe=recipe)
        assert "Nsight Compute: not run (the evaluation ran on the CPU" in text, recipe
    assert "Nsight Compute: not run.\n" in feedback_for(_correct(), recipe="ncu")  # on a GPU: not asked


def test_the_diagnosis_comes_before_the_statistics_and_the_map_only_in_full():
    standard = feedback_for(_diagnosed())
    assert "Diagnosis: a constant offset" in standard
    assert standard.index("Diagnosis:") < standard.index("max abs diff 1")
    assert "Where it differs" not in standard
    full = feedback_for(_diagnosed(), recipe="full")
    assert "Where it differs (4 rows (dim 0) x 4 columns (dim 1)" in full and "#...\n....\n" in full
    minimal = feedback_for(_diagnosed(), recipe="minimal")
    assert "Diagnosis" not in minimal and "max abs diff 1" in minimal and "Find the bug" not in minimal


def test_recipes_choose_components_for_a_correct_result():
    standard = feedback_for(_correct())
    assert "speedup 1.50x" in standard and "relu_kernel" in standard and "Make it faster" in standard
    assert "Nsight Compute" not in standard
    full = feedback_for(_correct(), recipe="full")
    assert "Nsight Compute: not run." in full and "relu_kernel" in full
    minimal = feedback_for(_correct(), recipe="minimal")
    assert "speedup 1.50x" in minimal and "relu_kernel" not in minimal and "Make it faster" not in minimal
    only = feedback_for(_correct(), recipe="profile,ncu")
    assert "speedup" not in only and "relu_kernel" in only and "Nsight Compute: not run." in only
    assert feedback_for(_correct(), recipe=["timing"]) == feedback_for(_correct(), recipe="timing")
    for recipe in ("minimal", "standard", "full", "ncu"):
        last = feedback_for(_correct(), recipe=recipe).strip().splitlines()[-1]
        assert NEXT_STEP in last, recipe


def test_compile_log_component_and_unknown_recipe():
    r = EvalResult(
        Status.COMPILE_ERROR, message="compilation failed", compile=CompileInfo(ok=False, errors=["e1"])
    )
    assert "First errors" in feedback_for(r, recipe="minimal")
    assert "First errors" not in feedback_for(r, recipe="hints") and "compilation failed" in feedback_for(
        r, recipe="hints"
    )
    from kb_agent.agent.feedback import COMPONENTS, RECIPES, parse_recipe

    assert parse_recipe("full") == frozenset(COMPONENTS) and set(RECIPES["minimal"]) < set(
        RECIPES["standard"]
    )
    assert parse_recipe("standard,map") == frozenset(RECIPES["standard"]) | {"map"}
    with pytest.raises(
        ValueError, match=r"unknown feedback component 'profiler'; give minimal, standard, full"
    ):
        parse_recipe("standard,profiler")


def test_a_run_stores_its_recipe_and_its_turns_get_that_feedback(tmp_path):
    from kb_agent.agent.llm import ScriptedModel
    from kb_agent.agent.loop import SolveConfig, solve
    from kb_agent.agent.store import Store
    from kb_agent.evaluator.fake import ScriptedEvaluator, canned
    from kb_agent.problems import resolve

    with pytest.raises(ValueError, match="unknown feedback component 'loud'"):
        SolveConfig(feedback="loud")
    reply = "```python\nimport torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n```\n"
    store = Store(tmp_path / "kb.sqlite")
    try:
        config = SolveConfig(turns=1, gpu_name="NVIDIA H100 80GB HBM3", arch="9.0", feedback="minimal")
        run_id = solve(resolve("toy")[:1], config, ScriptedModel([reply]), ScriptedEvaluator([canned("correct", 1.5)]),
                       store)  # fmt: skip
        assert store.get_run(run_id)["config"]["feedback"] == "minimal"
        (traj,) = store.trajectories(run_id)
        (turn,) = store.turns(traj["id"])
        assert "speedup 1.50x" in turn["feedback"] and "Make it faster" not in turn["feedback"]
    finally:
        store.close()


def test_solve_takes_a_feedback_recipe_and_refuses_an_unknown_one_in_one_line(tmp_path):
    from kb_agent.agent.cli import app
    from kb_agent.agent.store import Store
    from typer.testing import CliRunner

    args = ["solve", "--problem", "toy/relu", "--model", "scripted/demo", "--device", "cpu", "--turns", "1",
            "--db", str(tmp_path / "kb.sqlite"), "--run-name", "fb"]  # fmt: skip
    bad = CliRunner().invoke(app, [*args, "--feedback", "standard,loud"])
    assert bad.exit_code != 0 and "unknown feedback component 'loud'" in bad.output + str(bad.exception)
    ok = CliRunner().invoke(app, [*args, "--feedback", "diff_stats,timing"])
    assert ok.exit_code == 0, ok.output
    store = Store(tmp_path / "kb.sqlite")
    try:
        assert store.get_run("fb")["config"]["feedback"] == "diff_stats,timing"
    finally:
        store.close()
