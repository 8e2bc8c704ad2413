"""What strict mode does around every call of either model (CPU, Triton interpreted): it seeds the RNGs
before each, as KernelBench's correctness trials do (`set_seed(trial_seed)`), so a reference that draws
random numbers (dropout in training mode) meets the same draws in a candidate that makes them alike; and
after each call of the candidate it looks for torch function or dispatch modes left on, through which
every later torch call of the harness (the reference, the comparison) would run."""

import importlib.util
from pathlib import Path

import pytest
from kb_agent.evaluator import EvalSettings, Status, evaluate
from kb_agent.problems import resolve_one

# the problem and candidate helpers of the timing stage's tests (the Triton ReLU kernel among them)
_spec = importlib.util.spec_from_file_location(
    "timing_inputs", Path(__file__).with_name("test_timing_inputs.py")
)
_helpers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helpers)
problem, run = _helpers.problem, _helpers.run

DROPOUT_REFERENCE = "torch.nn.functional.dropout(torch.relu(x), p=0.2, training=True)"


DROPOUT_RELU = """
def forward(self, x):
    return torch.nn.functional.dropout(relu_into(x.contiguous(), torch.empty_like(x)), p=0.2, training=True)
"""


@pytest.mark.slow
def test_a_candidate_of_a_reference_that_draws_random_numbers_passes_when_it_draws_them_alike(tmp_path):
    # KernelBench seeds the RNGs before each model's call, so dropout in training mode draws the same mask
    # in both; strict mode's extra trials and judged calls did not, and rejected this honest candidate
    # (trial_candidate_first, relative_error, timing_outputs: found on KernelBench 2/66)
    r = run(problem(tmp_path, "return [torch.randn(16, 1024)]", forward=DROPOUT_REFERENCE), DROPOUT_RELU)
    assert r.status == Status.CORRECT, r.message


DEAD_KERNEL_DROPOUT = """
def forward(self, x):
    x = x.contiguous()
    relu_into(x, torch.empty_like(x))  # launched, its result never used
    return torch.nn.functional.dropout(torch.where(x > 0, x, 0.0), p=0.2, training=True)
"""


@pytest.mark.slow
def test_a_dead_kernel_beside_dropout_is_found_by_the_kernel_probe(tmp_path):
    # the probe's poisoned call and the reference's drew different dropout masks, so the output always
    # "changed" when the custom launch's results were poisoned, and a kernel whose result is never used
    # passed as doing the work (correct before the probe seeded both calls alike)
    r = run(
        problem(tmp_path, "return [torch.randn(16, 1024)]", forward=DROPOUT_REFERENCE), DEAD_KERNEL_DROPOUT
    )
    assert r.status == Status.REJECTED, r.message
    failed = {k for k, v in r.strict["checks"].items() if not v["passed"]}
    assert failed == {"custom_kernels_do_the_work"}, failed
    assert r.strict["kernel_probe"]["poison"]["output_unchanged"] is True


LEAVES_A_MODE_ON = """
from torch.overrides import TorchFunctionMode


class Blind(TorchFunctionMode):  # every torch.sub of the harness after the candidate's call: zeros
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.sub, torch.Tensor.sub, torch.Tensor.__sub__):
            out = kwargs.get("out")
            return out.zero_() if out is not None else torch.zeros_like(args[0])
        return func(*args, **kwargs)


MODES = []


class ModelNew(nn.Module):
    def forward(self, x):
        if not MODES:
            MODES.append(Blind())
            MODES[0].__enter__()  # and never left
        return relu_into(x.contiguous(), torch.empty_like(x)) * 0  # wrong
"""


@pytest.mark.slow
def test_a_torch_function_mode_left_on_after_forward_is_tampering(tmp_path):
    # the mode rewrote the comparison's subtraction: KernelBench's rules call the all-zeros output correct
    # (so does KernelBench, whose allclose a mode reaches too); strict mode now looks after each call
    prob = problem(tmp_path, "return [torch.randn(16, 1024)]")
    source = _helpers.KERNELS + LEAVES_A_MODE_ON
    r = evaluate(prob, source, EvalSettings(device="cpu"))
    assert r.status == Status.REJECTED, r.message
    assert "correctness trial 1" in r.strict["checks"]["tampering"]["detail"]


# a candidate that keeps the harness's writes from reaching the tensor it was last called on, then
# replays for it: `copy_` lives on torch._C.TensorBase, so `torch.Tensor.copy_ = f` adds an attribute
SHADOWS_COPY = """
_FROZEN, _copy = [None], torch.Tensor.copy_


def _frozen_copy(self, src, non_blocking=False):
    return self if self is _FROZEN[0] else _copy(self, src, non_blocking)


setattr(torch.Tensor, "copy_", _frozen_copy)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = None

    def forward(self, x):
        if x is _FROZEN[0]:
            return self.out.clone()
        y = relu_into(x.contiguous(), torch.empty_like(x))
        _FROZEN[0], self.out = x, y.clone()
        return y
"""

# replays its output for inputs equal to the last ones it computed on: wherever the draws repeat
REPLAY_EQUAL_INPUTS = """

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.key = self.out = None

    def forward(self, x):
        if self.key is not None and torch.equal(x, self.key):
            return self.out.clone()
        y = relu_into(x.contiguous(), torch.empty_like(x))
        self.key, self.out = x.clone(), y.clone()
        return y
"""

# its own CPU kernel for aten::normal_, which ignores the seed: every draw of get_inputs() is the same
OVERRIDES_NORMAL = (
    """
_LIB, _GEN = torch.library.Library("aten", "IMPL"), torch.Generator()


def _normal_(self, mean=0.0, std=1.0, *, generator=None):
    _GEN.manual_seed(1234)
    with torch.no_grad():
        return self.copy_(torch.rand(self.shape, generator=_GEN) * std + mean)


_LIB.impl("normal_", _normal_, "CPU")
"""
    + REPLAY_EQUAL_INPUTS
)

SETS_THE_DEFAULT_DEVICE = """
torch.set_default_device("cpu")  # a mode of torch's own, on from the import


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_into(x.contiguous(), torch.empty_like(x))
"""


# a global forward hook makes the reference's output the candidate's (2x, not ReLU) and a pre-hook slows
# the reference's every call
HOOKS_THE_REFERENCE = """
import time
from torch.nn.modules import module as _module


def _slow(module, args):
    if type(module).__name__ == "Model":
        t = time.perf_counter()
        while time.perf_counter() - t < 0.01:
            pass


def _twice(module, args, output):
    return args[0] * 2 if type(module).__name__ == "Model" else None


_module.register_module_forward_pre_hook(_slow)
_module.register_module_forward_hook(_twice)


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_into(x.contiguous(), torch.empty_like(x)) * 0 + x * 2  # wrong
"""

# torch.manual_seed's code swapped under its wrapper (the attribute still names the same function): the
# harness's seeds no longer reach the generator, and every draw is the same values
SWAPS_MANUAL_SEEDS_CODE = (
    """
def _fixed(seed):
    return default_generator.manual_seed(12345)


_f = torch.manual_seed
while getattr(_f, "__wrapped__", None) is not None:
    _f = _f.__wrapped__
_f.__code__ = _fixed.__code__
"""
    + REPLAY_EQUAL_INPUTS
)


HONEST_MODEL = """

class ModelNew(nn.Module):
    def forward(self, x):
        return relu_into(x.contiguous(), torch.empty_like(x))
"""
# the evaluator's modules reached past the source scan's pattern (an import of a module already loaded
# raises no audit event)
_EVALUATOR = 'importlib.import_module("kb_agent" + ".evalu" + "ator.{}")'

# the side-effect monitor switched off through its own state: frames, files and processes then pass
# unseen; with it, a candidate swapped the reference for a zeros impostor, correct at 27.6x (helper-12).
# It was reached through a module global of the evaluator's and the load_inline wrapper's attribute, both
# gone (helper-18): the candidate below fails to import where it finds it either way
LOOKS_FOR_THE_MONITOR = (
    f"import importlib\nimport torch.utils.cpp_extension as _ce\n_ctx = {_EVALUATOR.format('context')}\n"
    '_found = [n for n, o in (("context", _ctx), ("load_inline", _ce.load_inline)) if any(\n'
    '    type(v).__name__ == "SideEffectMonitor" for v in vars(o).values())]\n'
    'if _found:\n    raise RuntimeError("the side-effect monitor, through " + ", ".join(_found))\n'
    + HONEST_MODEL
)
# a guarded staticmethod given another function in place: the attribute still names the same wrapper
# (timing's CUDA events are this class's; the guard of f4590bc checked the function it held, helper-12)
REINITS_A_STATICMETHOD = (
    """
_held = vars(torch.cuda.Event)["__new__"]
_inner = _held.__func__


def _new(cls, *args, **kwargs):
    return _inner(cls, *args, **kwargs)


staticmethod.__init__(_held, _new)
"""
    + HONEST_MODEL
)
# a threshold of the evaluator's changed in place (the dict, not the attribute)
LOWERS_A_THRESHOLD = (
    f"import importlib\n{_EVALUATOR.format('thresholds')}.REPLAY_FLOOR['cpu'] = 0.0\n" + HONEST_MODEL
)

# the standard library's asdict wrapped at import: every stage's record passes through it, and the
# reported speedup came out 10x (helper-13)
WRAPS_ASDICT = (
    """
import dataclasses as _dc

_asdict = _dc.asdict


def _tenfold(obj, *args, **kwargs):
    d = _asdict(obj, *args, **kwargs)
    if type(obj).__name__ == "TimingInfo" and d.get("speedup"):
        d["speedup"] *= 10.0
    return d


_dc.asdict = _tenfold
"""
    + HONEST_MODEL
)
# the monitor off for one call only (on again before forward returns), long enough to read frames up to
# the evaluation and put a wrong, slow impostor in the reference's place (helper-13: correct at 5.1x)
SWAPS_THE_REFERENCE_WITHIN_ONE_CALL = """
import importlib
import sys

_done = []


class _Impostor(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 0.5


def _swap():
    f = getattr(sys, "_get" + "frame")(1)
    while f is not None:
        if hasattr(f.f_locals.get("ev"), "ref_model"):
            f.f_locals["ev"].ref_model = _Impostor()
            return True
        f = getattr(f, "f_" + "back")


class ModelNew(nn.Module):
    def forward(self, x):
        y = relu_into(x.contiguous(), torch.empty_like(x))
        if not _done:
            _done.append(_swap())
            return y
        return y * 0.5  # wrong, as the impostor is
"""

# a global pre-hook registered at import sees the reference's first call (correctness trial 1 calls the
# reference first) and slows it, and the candidate's first forward removes it, before any check after a
# call of the candidate looked (helper-14: correct at 9,000x its honest speedup)
HOOKS_THE_FIRST_REFERENCE_CALL = """
import time
from torch.nn.modules import module as _module


def _slow(module, args):
    if type(module).__name__ == "Model":
        module.register_forward_pre_hook(lambda m, a: time.sleep(0.01))


_handle = _module.register_module_forward_pre_hook(_slow)


class ModelNew(nn.Module):
    def forward(self, x):
        _handle.remove()
        return relu_into(x.contiguous(), torch.empty_like(x))
"""


@pytest.mark.slow
def test_the_side_effect_monitor_cannot_be_reached_from_the_evaluators_modules_or_load_inline(tmp_path):
    settings = EvalSettings(device="cpu")
    r = evaluate(problem(tmp_path, "return [torch.randn(64, 1024)]"), _helpers.KERNELS + LOOKS_FOR_THE_MONITOR,
                 settings)  # fmt: skip
    assert r.status == Status.CORRECT, r.message
    assert r.strict["checks"]["side_effects"]["passed"]


@pytest.mark.slow
def test_the_reference_swapped_from_a_frame_within_one_call_is_refused(tmp_path):
    """helper-13 swapped ev.ref_model for an impostor from the frames, the monitor switched off for that
    call; with the monitor out of reach, reading the frames is refused (and the swap would be pinned)."""
    r = evaluate(problem(tmp_path, "return [torch.randn(64, 1024)]"),
                 _helpers.KERNELS + SWAPS_THE_REFERENCE_WITHIN_ONE_CALL, EvalSettings(device="cpu"))  # fmt: skip
    assert r.status == Status.REJECTED, r.message
    assert "tried to inspect the interpreter" in r.strict["checks"]["side_effects"]["detail"]


@pytest.mark.slow
@pytest.mark.parametrize("source, found", [
    pytest.param(SHADOWS_COPY, "torch.Tensor.copy_", id="a_tensor_method_shadowed"),
    pytest.param(OVERRIDES_NORMAL, "aten::normal_", id="an_aten_kernel_registered_over_torchs"),
    pytest.param(HOOKS_THE_REFERENCE, "global module hooks", id="global_module_hooks"),
    pytest.param(SWAPS_MANUAL_SEEDS_CODE, "torch.manual_seed (its code)", id="a_functions_code_swapped"),
    pytest.param(REINITS_A_STATICMETHOD, "torch.cuda.Event.__new__ (its code)", id="a_staticmethod_reinit"),
    pytest.param(LOWERS_A_THRESHOLD, "thresholds.REPLAY_FLOOR (its contents)", id="a_threshold_lowered"),
    pytest.param(WRAPS_ASDICT, "dataclasses.asdict", id="the_stdlib_asdict_wrapped"),
    pytest.param(HOOKS_THE_FIRST_REFERENCE_CALL, "global module hooks (_global_forward_pre_hooks) (after its import)",
                 id="a_global_hook_removed_in_the_first_forward"),
])  # fmt: skip
def test_what_the_harness_computes_with_is_guarded(tmp_path, source, found):
    # each passed strict mode (fresh helpers, 2026-12-06), every strict-timing call replayed or, with the
    # hooks, a wrong output: the tamper guard compared only which object each attribute it had snapshot
    # named, and a dispatcher kernel, a global hook or a function's code is no such attribute
    r = evaluate(problem(tmp_path, "return [torch.randn(64, 1024)]"), _helpers.KERNELS + source,
                 EvalSettings(device="cpu"))  # fmt: skip
    assert r.status == Status.REJECTED, r.message
    assert found in r.strict["checks"]["tampering"]["detail"]


@pytest.mark.slow
def test_the_default_device_of_torch_set_default_device_is_no_tampering(tmp_path):
    r = evaluate(problem(tmp_path, "return [torch.randn(64, 1024)]"), _helpers.KERNELS + SETS_THE_DEFAULT_DEVICE,
                 EvalSettings(device="cpu"))  # fmt: skip
    assert r.status == Status.CORRECT, r.message


def test_strict_timings_randomness_is_the_operating_systems_whatever_random_becomes(monkeypatch):
    # a candidate that made random.SystemRandom.getrandbits return 0 fixed every seed and the spot check
    import random

    from kb_agent.evaluator import timing

    monkeypatch.setattr(random.SystemRandom, "getrandbits", lambda self, k: 0)
    assert len({timing.entropy.randrange(2**31) for _ in range(8)}) == 8


LAZY_STATE_REFERENCE = (
    "(self.register_buffer('seen', x.new_zeros(1)) if 'seen' not in self._buffers else None, "
    "setattr(self, 'calls', getattr(self, 'calls', 0) + 1), torch.relu(x))[-1]"
)


@pytest.mark.slow
def test_a_reference_that_sets_up_state_in_its_first_forward_is_no_tampering(tmp_path):
    # the reference's module tree is pinned (strict.PinnedState) at construction and again after its
    # first call: a buffer registered and an attribute set there are the reference's own (helper-14's
    # synthetic problem, rejected for tampering by 0c05539)
    r = run(
        problem(tmp_path, "return [torch.randn(64, 1024)]", forward=LAZY_STATE_REFERENCE),
        _helpers.HONEST_RELU,
    )
    assert r.status == Status.CORRECT, r.message


# a reference with a submodule: what it computes runs through torch.nn.Linear's class and its module
LINEAR_REFERENCE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gemm = nn.Linear(256, 64)

    def forward(self, x):
        return torch.relu(self.gemm(x))


def get_inputs():
    return [torch.randn(32, 256)]


def get_init_inputs():
    return []
"""

# the GEMM left out, the bias alone, relu'd by the kernel: correct only where the reference does the same
BIAS_ONLY = """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.gemm = nn.Linear(256, 64)

    def forward(self, x):
        b = self.gemm.bias.detach().expand(x.shape[0], 64).contiguous()
        return relu_into(b, torch.empty_like(b))
"""

# each at import; each passed strict mode (helper-15, 2026-12-07)
REPLACES_A_MODULE_CLASS_METHOD = """
import torch.nn.modules.linear as _linear

_linear.Linear.forward = lambda self, x: self.bias.expand(x.shape[0], self.out_features)
"""
REPOINTS_A_MODULE_CLASS_GLOBAL = """
import types
import torch.nn.modules.linear as _linear

_linear.F = types.SimpleNamespace(linear=lambda x, w, b: b.expand(x.shape[0], w.shape[0]))
"""
# the reference was built after the candidate's import: its weight was drawn, then zeroed, and pinned so
ZEROES_THE_NEXT_INIT = """
from torch.nn import init as _init

_kaiming = _init.kaiming_uniform_


def _drawn_then_zeroed(tensor, *a, **k):
    _init.kaiming_uniform_ = _kaiming
    out = _kaiming(tensor, *a, **k)
    with torch.no_grad():
        tensor.zero_()
    return out


_init.kaiming_uniform_ = _drawn_then_zeroed
"""


# each through an alias, at import (helper-16, 2026-12-07): the first handed the candidate every module
# the harness called (nn.Module's call asks the tracing state), the reference's too; the second changed
# the reference's torch.norm alone; the third slowed the reference's CPU timing alone
REPLACES_THE_TRACING_STATE = """
import torch._C as _C

_C._get_tracing_state = lambda: None
"""
REPLACES_A_LINALG_FUNCTION = """
import torch.linalg as _linalg

_linalg.vector_norm = lambda *a, **k: torch.tensor(4.0)
"""
CHANGES_THE_THREAD_COUNT = """
torch.set_num_threads(torch.get_num_threads() + 1)
"""
# each slowed the reference's relu 500-650x and passed (helper-17, 2026-12-07): a kernel of the candidate's
# registered over the reference's own aten op, which the dispatch guard's harness ops did not include;
# a function mode disguised as torch.set_default_device's (a subclass of its DeviceContext)
REGISTERS_OVER_THE_REFERENCES_OP = """
_lib = torch.library.Library("aten", "IMPL")
_lib.impl("relu", lambda x: torch.clamp_min(x, 0.0), "CPU")
"""
A_MODE_DISGUISED_AS_THE_DEFAULT_DEVICES = """
from torch.utils._device import DeviceContext


class _Mode(DeviceContext):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs)


_Mode("cpu").__enter__()
"""


@pytest.mark.slow
@pytest.mark.parametrize("source, found", [
    pytest.param(REPLACES_THE_TRACING_STATE, "torch._C._get_tracing_state", id="a_torch_C_function"),
    pytest.param(REPLACES_A_LINALG_FUNCTION, "torch.linalg.vector_norm", id="a_torch_linalg_function"),
    pytest.param(CHANGES_THE_THREAD_COUNT, "torch.get_num_threads()", id="the_thread_count"),
    pytest.param(REGISTERS_OVER_THE_REFERENCES_OP, "kernels of its own for aten::relu", id="a_kernel_over_its_op"),
    pytest.param(A_MODE_DISGUISED_AS_THE_DEFAULT_DEVICES, "torch function or dispatch mode", id="a_disguised_mode"),
    pytest.param(REPLACES_A_MODULE_CLASS_METHOD, "torch.nn.modules.linear.Linear.forward", id="a_module_class_method"),
    pytest.param(REPOINTS_A_MODULE_CLASS_GLOBAL, "torch.nn.modules.linear.F", id="a_module_class_global"),
    pytest.param(ZEROES_THE_NEXT_INIT, None, id="the_next_init_zeroed"),
])  # fmt: skip
def test_what_the_reference_runs_through_is_guarded_and_built_before_the_candidate(tmp_path, source, found):
    path = tmp_path / "problem.py"
    path.write_text(LINEAR_REFERENCE)
    r = evaluate(resolve_one(str(path)), _helpers.KERNELS + source + BIAS_ONLY, EvalSettings(device="cpu"))
    assert r.status != Status.CORRECT, r.message
    if found is not None:
        assert found in r.strict["checks"]["tampering"]["detail"], r.message
