"""`strict.TamperGuard` on its own: what counts as a change of a guarded object, and what does not."""

import functools
import sys
import threading
import types

import pytest
import torch
from kb_agent.evaluator.strict import TamperGuard


def _module() -> types.ModuleType:
    m = types.ModuleType("guarded")

    def helper(x):
        return x + 1

    def seed(x, scale=2):
        return helper(x) * scale

    @functools.wraps(seed)
    def wrapper(*a, **kw):
        return seed(*a, **kw)

    m.helper, m.seed, m.wrapper, m.data = helper, seed, wrapper, [1, 2]
    return m


def test_an_unchanged_module_and_new_attributes_are_no_change():
    m = _module()
    guard = TamperGuard({"m": m})
    m.lazily_loaded = types.ModuleType("sub")
    m.data.append(3)  # data inside an attribute may change; the attribute is the same object
    assert guard.changed() == []


def test_each_way_of_changing_a_function_in_place_is_named():
    def other(x):
        return 0

    def zero():  # a code object with one free variable, as seed's has (helper)
        h = None

        def seed(x, scale=2):
            return h

        return seed.__code__

    changes = {
        "code": lambda m: setattr(m.seed, "__code__", zero()),
        "defaults": lambda m: setattr(m.seed, "__defaults__", (3,)),
        "kwdefaults": lambda m: setattr(m.seed, "__kwdefaults__", {"y": 1}),
        "closure cell": lambda m: setattr(m.seed.__closure__[0], "cell_contents", other),
        "wrapped": lambda m: setattr(m.wrapper, "__wrapped__", other),
    }
    for what, change in changes.items():
        m = _module()
        guard = TamperGuard({"m": m})
        change(m)
        found = guard.changed()
        # the wrapper's chain holds seed, so a change of seed's insides shows under both names
        assert "m.wrapper (its code)" in found, (what, found)
        if what != "wrapped":
            assert "m.seed (its code)" in found, (what, found)


def test_a_replaced_attribute_is_named_once_and_a_shadowing_class_attribute_counts():
    m = _module()

    class Base:
        def copy_(self):
            return 1

    class Child(Base):
        pass

    guard = TamperGuard({"m": m, "Child": Child})
    m.seed = lambda x: 0
    Child.copy_ = lambda self: 2  # a new key of Child, hiding Base's
    assert sorted(guard.changed()) == ["Child.copy_", "m.seed"]


@pytest.mark.slow  # 4.3 s: torch imported in a child; the op's name is in the default run's test below
def test_a_kernel_registered_over_the_relative_errors_norm_is_found():
    """Strict trials off the declared distribution are judged by `compare.relative_error` alone, whose
    norm is `aten::linalg_vector_norm`: a candidate's kernel for it (returning 0) would pass them. The
    dispatch guard's recording run covers it (in a child: the registration would outlive the test)."""
    import subprocess
    import sys

    code = """
import torch
from kb_agent.evaluator.strict import DispatchGuard
from kb_agent.evaluator.compare import relative_error
guard = DispatchGuard(torch)
assert guard.changed() == []
lib = torch.library.Library("aten", "IMPL")
lib.impl("linalg_vector_norm", lambda x, *a, **k: torch.zeros((), dtype=torch.float64), "CPU")
assert relative_error(torch.ones(4), torch.zeros(4)) is None  # no scale: passes, as an override would
print(guard.changed())  # ...and is named
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "aten::linalg_vector_norm" in out.stdout


def test_kernels_python_kernels_and_dispatch_keys_over_the_comparisons_ops_are_found():
    """In one child (registrations outlive a test; a child costs about 3 s):
    - the exact-output shortcut (`compare._identical_pass`) passes a trial on `aten::equal` (on CUDA,
      `aten::eq` and `aten::all`) and `aten::aminmax`: a candidate's kernel over one of them, answering
      True or finite bounds, would pass wrong or NaN outputs;
    - helper-20 (2026-12-07): Python kernels (`OpOverload.py_impl`) for `aten::equal`, run only while the
      Python dispatcher is on, which the candidate switched on as its forward returned; the dispatcher's
      table shows neither, and a wrong ReLU passed every check;
    - helper-20: comparing a transposed output copies it through `reshape` (`aten::_unsafe_view`); the
      recording ran on contiguous outputs alone, so a candidate's kernel for it went unseen."""
    import subprocess
    import sys

    code = """
import torch
from torch._C import DispatchKey
from kb_agent.evaluator.strict import DispatchGuard
guard = DispatchGuard(torch)
assert guard.changed() == [], guard.changed()
lib = torch.library.Library("aten", "IMPL")
lib.impl("equal", lambda x, y: True, "CPU")
lib.impl("aminmax", lambda x, **k: (torch.zeros(()), torch.zeros(())), "CPU")
lib.impl("eq.Tensor", lambda x, y: torch.ones(x.shape, dtype=torch.bool), "CPU")
lib.impl("all", lambda x: torch.ones((), dtype=torch.bool), "CPU")
print("exact", sorted(guard.changed()))
guard = DispatchGuard(torch)
torch.ops.aten.sub.Tensor.py_impl(DispatchKey.CPU)(lambda x, y, alpha=1: x)
print("kernels", guard.changed())
on = torch._C._EnablePythonDispatcher()
print("on", guard.changed())
del on
guard = DispatchGuard(torch)
lib.impl("_unsafe_view", lambda x, size: x.view(size), "CPU")
print("view", guard.changed())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    for op in ("aten::equal", "aten::aminmax", "aten::eq.Tensor", "aten::all"):
        assert op in lines["exact"], op
    assert "aten::sub.Tensor (Python kernels)" in lines["kernels"] and "dispatch keys" not in lines["kernels"]
    assert "PythonDispatcher" in lines["on"]
    assert "aten::_unsafe_view" in lines["view"]


def test_signal_handlers_timers_and_gc_callbacks_are_interpreter_hooks():
    """helper-21 (2026-12-07): a SIGALRM handler and a gc callback each rewrote a wrong output while the
    comparison ran; each leaves `strict.interpreter_hooks` changed, and putting it back is no change."""
    import gc
    import signal

    from kb_agent.evaluator.strict import interpreter_hooks

    before = interpreter_hooks()
    old = signal.signal(signal.SIGUSR2, lambda *a: None)
    try:
        assert interpreter_hooks()["signal handlers"] != before["signal handlers"]
    finally:
        signal.signal(signal.SIGUSR2, old)
    signal.setitimer(signal.ITIMER_VIRTUAL, 100.0)
    try:
        assert interpreter_hooks()["interval timers"] != before["interval timers"]
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
    cb = lambda *a: None  # noqa: E731
    gc.callbacks.append(cb)
    try:
        assert interpreter_hooks()["gc callbacks"] != before["gc callbacks"]
    finally:
        gc.callbacks.remove(cb)
    assert interpreter_hooks() == before


def test_a_profiler_and_profile_or_trace_functions_left_on_are_seen():
    """helper-31: torch's profiler, entered by the candidate and left running, recorded every op and
    Python call of the reference while it was timed (6x slower on the CPU); each such state is a process
    setting or interpreter hook, and its end is no change."""
    from kb_agent.evaluator.strict import interpreter_hooks, process_settings

    settings, hooks = process_settings(torch), interpreter_hooks()
    with torch.autograd.profiler.profile(with_stack=True):
        assert process_settings(torch)["torch's profiler"] is True
    assert process_settings(torch) == settings
    for set_hook in (sys.setprofile, threading.setprofile, threading.settrace):
        set_hook(lambda *a: None)
        try:
            assert interpreter_hooks()["profile and trace functions"] != hooks["profile and trace functions"]
        finally:
            set_hook(None)
    assert interpreter_hooks() == hooks


def test_torchs_own_lazy_singletons_and_vmap_kernels_are_no_tampering():
    """helper-21 (2026-12-07): honest kernels using `torch.func.vmap` or a jagged nested tensor were
    rejected: torch fills module globals that were None on first use, and registers its vmap
    decompositions under functorch's dispatch keys, which run only inside a transform."""
    from kb_agent.evaluator.strict import _differ, _lazily_made

    assert _lazily_made(None, torch.nn.Identity()) and _lazily_made(None, threading.Lock())
    assert not _lazily_made(None, lambda x: x) and not _lazily_made(torch.nn.Identity(), torch.nn.Identity())

    class Mine:
        pass

    assert not _lazily_made(None, Mine())
    base = "name: aten::addr\nCPU: registered at RegisterCPU.cpp:1 :: (none) [ boxed ]\n"
    vmap = base + "FuncTorchBatched: registered at torch/_functorch/predispatch.py:155 :: (none) [ boxed ]\n"
    assert not _differ(vmap, base)
    assert _differ(base.replace("RegisterCPU.cpp:1", "mine.py:8"), base)


def test_changes_in_place_that_keep_every_attribute_the_same_object_are_named():
    """helper-12 (2026-12-07): a staticmethod or classmethod given another function in place, a partial
    re-pointed, keyword defaults changed in their dict, a guarded attribute deleted, a guarded module's
    dict of constants changed."""

    class C:
        @staticmethod
        def s(x):
            return x

        @classmethod
        def c(cls, x):
            return x

    def k(x, *, scale=1):
        return x * scale

    def other(cls_or_x, x=None):
        return 0

    def fresh():
        m = types.ModuleType("constants")
        m.part, m.k, m.floors, m.gone = functools.partial(k, 1), k, {"cuda": 0.5}, 1
        return m, C

    changes = {
        "staticmethod": (lambda m, c: staticmethod.__init__(vars(c)["s"], other), "C.s (its code)"),
        "classmethod": (lambda m, c: classmethod.__init__(vars(c)["c"], other), "C.c (its code)"),
        "partial": (lambda m, c: m.part.__setstate__((other, (1,), {}, None)), "m.part (its code)"),
        "kwdefaults": (lambda m, c: m.k.__kwdefaults__.__setitem__("scale", 0), "m.k (its code)"),
        "deleted": (lambda m, c: delattr(m, "gone"), "m.gone"),
        "contents": (lambda m, c: m.floors.__setitem__("cuda", 0.0), "m.floors (its contents)"),
    }
    for what, (change, named) in changes.items():
        m, c = fresh()
        saved = (vars(c)["s"].__func__, vars(c)["c"].__func__, k.__kwdefaults__.copy())
        guard = TamperGuard({"m": m, "C": c}, contents=("m",))
        assert guard.changed() == [], what
        change(m, c)
        try:
            assert named in guard.changed(), (what, guard.changed())
        finally:  # C and k are shared by every case
            staticmethod.__init__(vars(c)["s"], saved[0])
            classmethod.__init__(vars(c)["c"], saved[1])
            k.__kwdefaults__.update(saved[2])


def _pinned_ev():
    import torch
    from kb_agent.evaluator.settings import EvalSettings

    class Reference(torch.nn.Module):  # BatchNorm in training mode and an LSTM-style rebound attribute
        def __init__(self):
            super().__init__()
            self.linear, self.norm = torch.nn.Linear(8, 8), torch.nn.BatchNorm1d(8)
            self.h0 = torch.zeros(8)

        def forward(self, x):
            self.h0 = self.h0.to(x.device) + 0  # rebound, as KernelBench's LSTM references do
            return self.norm(self.linear(x)) + self.h0

    ev = types.SimpleNamespace(ref_model=Reference(), new_model=None, settings=EvalSettings(device="cpu"),
                               torch=torch, atol=1e-4, rtol=1e-4)  # fmt: skip
    return ev, torch


def test_a_reference_forward_that_changes_its_own_state_is_no_change():
    from kb_agent.evaluator.strict import PinnedState

    ev, torch = _pinned_ev()
    pinned = PinnedState(ev)
    ev.ref_model(torch.randn(4, 8))  # running statistics updated, h0 rebound
    assert pinned.moved(ev) == []


def test_the_reference_swapped_hooked_or_its_weights_changed_are_named():
    """helper-13 swapped the reference for an impostor; helper-14 hooked the reference instance and wrote
    into a Linear's weight before its first call (2026-12-07)."""
    from kb_agent.evaluator.strict import PinnedState

    changes = {
        "ev.ref_model": lambda ev, torch: setattr(ev, "ref_model", torch.nn.Identity()),
        "ev.settings (its fields)": lambda ev, torch: setattr(ev.settings, "strict_timed_trials", 1),
        "the reference model": lambda ev, torch: ev.ref_model.register_forward_pre_hook(lambda m, a: None),
        "the reference model's parameter values": lambda ev, torch: ev.ref_model.linear.weight.data.zero_(),
    }
    for named, change in changes.items():
        ev, torch = _pinned_ev()
        pinned = PinnedState(ev)
        change(ev, torch)
        assert named in pinned.moved(ev), named


def test_a_reference_parameter_given_another_class_is_named():
    """helper-15 (2026-12-07): the same Parameter object, its values unchanged, given a `__class__` whose
    `__torch_function__` answered `F.linear` with the bias alone."""
    from kb_agent.evaluator.strict import PinnedState

    ev, torch = _pinned_ev()
    pinned = PinnedState(ev)

    class Answers(torch.nn.Parameter):
        pass

    ev.ref_model.linear.weight.__class__ = Answers
    assert "the reference model" in pinned.moved(ev)


def test_the_reference_models_classes_and_their_modules_are_guarded():
    """What the reference's modules run through (`nn.Linear.forward`, `torch.nn.modules.linear.F`), its
    parameters' class, its own classes once, and no class of a None registered as a bias or buffer."""
    import torch
    from kb_agent.evaluator.strict import guarded_objects

    ev, _ = _pinned_ev()
    ev.ref_model.linear.register_parameter("bias", None)
    reference = types.ModuleType("kb_reference")
    reference.Model = type(ev.ref_model)
    objs = guarded_objects(torch, reference, ev.ref_model)
    assert objs["torch.nn.modules.linear.Linear"] is torch.nn.Linear
    assert objs["torch.nn.modules.linear"] is torch.nn.modules.linear
    assert objs["torch.nn.modules.batchnorm._BatchNorm"] is torch.nn.modules.batchnorm._BatchNorm
    assert objs["torch.nn.Parameter"] is torch.nn.Parameter
    assert "builtins" not in objs and "builtins.NoneType" not in objs
    assert [name for name, obj in objs.items() if obj is reference.Model] == ["reference.Model"]
    assert set(guarded_objects(torch, reference)) < set(objs)  # a build child has no reference model


@pytest.mark.parametrize("batched", [True, False], ids=["one_reduction", "pair_by_pair"])
def test_all_same_values_agrees_pair_by_pair_and_in_one_reduction(batched):
    """`PinnedState.moved`'s comparison of the reference's parameters: on a GPU one reduction and one
    host read for all of them, on the CPU `torch.equal` pair by pair; both must say the same."""
    import torch
    from kb_agent.evaluator.strict import all_same_values

    w, b = torch.randn(8, 8), torch.tensor([0.0, float("nan"), 1.0])

    def same(*pairs):
        return all_same_values(torch, list(pairs), batched=batched)

    assert same() and same((w, w.clone()), (b, b.clone()))  # NaN in both is the same value
    assert same((torch.tensor([-0.0]), torch.tensor([0.0])))
    one_written = w.clone()
    one_written[7, 7] += 1
    assert not same((b, b.clone()), (one_written, w))
    assert not same((torch.tensor([float("nan")]), torch.tensor([1.0])))
    assert not same((w.double(), w))  # a parameter given another dtype, equal by `!=`
    assert not same((w.reshape(64), w))


def test_the_ops_of_the_one_reduction_and_of_the_relative_error_are_under_the_dispatch_guard():
    """The batched comparison runs `ne`, `any` and `stack`, which no other harness step does on the CPU:
    the dispatch guard's recording run must see them, or a kernel registered over `aten::ne` would
    make a changed weight look pinned; likewise the relative error's norm (the test above, in a child)."""
    import torch
    from kb_agent.evaluator.strict import _harness_ops

    assert {"aten::ne.Tensor", "aten::any", "aten::stack", "aten::linalg_vector_norm"} <= _harness_ops(torch)


def test_a_new_attribute_of_a_closed_object_is_named():
    """`torch._VF` answers a missing name from torch's C functions: `torch._VF.lstm = f`, a new attribute,
    would shadow what every nn.LSTM of a reference calls. A new attribute of an open module is none."""
    closed, open_ = types.ModuleType("vf"), types.ModuleType("m")
    guard = TamperGuard({"vf": closed, "m": open_}, closed=("vf",))
    open_.lazily_loaded = 1
    assert guard.changed() == []
    closed.lstm = lambda *a: None
    assert guard.changed() == ["vf.lstm"]


def test_the_dicts_a_module_answers_from_and_its_training_flag_are_pinned():
    """helper-16 (2026-12-07): with the reference's Linear in hand, its `_parameters` swapped for a dict
    subclass answering `weight` with zeros (same items), or its `training` flag flipped."""
    from kb_agent.evaluator.strict import PinnedState

    class Zeros(dict):
        def __getitem__(self, key):
            value = super().__getitem__(key)
            return value * 0 if key == "weight" else value

    changes = [
        lambda m: setattr(m.linear, "_parameters", Zeros(m.linear._parameters)),
        lambda m: m.norm.eval(),
    ]
    for change in changes:
        ev, _ = _pinned_ev()
        pinned = PinnedState(ev)
        change(ev.ref_model)
        assert "the reference model" in pinned.moved(ev)


def test_a_shallow_objects_replaced_function_counts_and_its_rebound_flags_do_not():
    """Every torch module is a shallow object (`strict.torch_modules`): `torch.cuda._initialized`-like
    flags rebound between plain values are state, a function replaced is not; an attribute added
    (lazily loaded) and then one replaced is still found (the one-pass look starts again from there)."""
    import torch

    mod = types.ModuleType("m")
    mod.flag, mod.fn, mod.cache, mod.device = False, len, None, torch.device("cpu")
    guard = TamperGuard({}, shallow={"m": mod})
    mod.flag, mod.lazy, mod.device = True, 1, torch.device("meta")  # torch.set_default_device's, say
    assert guard.changed() == []
    mod.fn = max
    assert guard.changed() == ["m.fn"]
    mod.fn, mod.cache = len, object()
    assert guard.changed() == ["m.cache"]


def test_a_look_without_the_shallow_objects_leaves_them_for_the_next_full_one():
    guarded, shallow = types.ModuleType("g"), types.ModuleType("s")
    guarded.fn = shallow.fn = len
    guard = TamperGuard({"g": guarded}, shallow={"s": shallow})
    shallow.fn = max
    assert guard.changed(shallow=False) == []
    guarded.fn = min
    assert guard.changed(shallow=False) == ["g.fn"]
    assert guard.changed() == ["g.fn", "s.fn"]


# (name, how a candidate flips it at import): settings a fresh reviewer named unguarded (helper-17,
# 2026-12-07) and their kin; each changes how fast, or what, a reference computes
_FLIPS = {
    "torch.backends.cuda.preferred_blas_library()": lambda t: t.backends.cuda.preferred_blas_library("cublaslt"),
    "torch.backends.cuda.preferred_linalg_library()": lambda t: t.backends.cuda.preferred_linalg_library("magma"),
    "torch.backends.cuda.cudnn_sdp_enabled()": lambda t: t.backends.cuda.enable_cudnn_sdp(False),
    "torch.backends.cuda.matmul.allow_fp16_accumulation":
        lambda t: setattr(t.backends.cuda.matmul, "allow_fp16_accumulation", True),
    "torch.backends.cudnn.conv.fp32_precision": lambda t: setattr(t.backends.cudnn.conv, "fp32_precision", "ieee"),
    "torch.backends.opt_einsum.enabled":
        lambda t: setattr(t.backends.opt_einsum, "enabled", not t.backends.opt_einsum.enabled),
    "torch.backends.mha.get_fastpath_enabled()": lambda t: t.backends.mha.set_fastpath_enabled(False),
    "torch.utils.deterministic.fill_uninitialized_memory":
        lambda t: setattr(t.utils.deterministic, "fill_uninitialized_memory", False),
}  # fmt: skip


@pytest.mark.parametrize("name", list(_FLIPS))
def test_a_process_setting_a_candidate_flips_is_compared(name):
    import torch
    from kb_agent.evaluator.strict import process_settings

    before = process_settings(torch)
    try:
        try:
            _FLIPS[name](torch)
        except RuntimeError as e:  # a CPU build of torch has no cuBLASLt or MAGMA to prefer
            pytest.skip(str(e))
        after = process_settings(torch)
    finally:
        torch.backends.cuda.preferred_blas_library("cublas")
        torch.backends.cuda.preferred_linalg_library("default")
        torch.backends.cuda.enable_cudnn_sdp(True)
        torch.backends.cuda.matmul.allow_fp16_accumulation = False
        torch.backends.cudnn.conv.fp32_precision = before["torch.backends.cudnn.conv.fp32_precision"]
        torch.backends.opt_einsum.enabled = before["torch.backends.opt_einsum.enabled"]
        torch.backends.mha.set_fastpath_enabled(True)
        torch.utils.deterministic.fill_uninitialized_memory = True
    assert {k for k in before if before[k] != after[k]} >= {name}
    assert process_settings(torch) == before


class _EqualToAll:
    def __call__(self, *a):
        return zip(*a, strict=False)

    def __eq__(self, other):
        return True

    __hash__ = object.__hash__


def test_a_guarded_containers_element_replaced_by_one_equal_to_everything_is_named():
    """helper-18: `builtins.zip` replaced by an object whose `__eq__` says True passed a `!=` of the
    evaluator modules' `__builtins__`; then compare_outputs paired the reference's output with itself."""
    m = types.ModuleType("kb_agent_guarded_consts")
    m.table, m.names, m.members = {"zip": zip, "floor": 0.5}, [zip, 1], {zip}
    guard = TamperGuard({"m": m}, contents=("m",))
    m.table["zip"], m.names[0] = _EqualToAll(), _EqualToAll()
    m.members.discard(zip)
    m.members.add(_EqualToAll())
    assert sorted(guard.changed()) == [
        "m.members (its contents)",
        "m.names (its contents)",
        "m.table (its contents)",
    ]


def test_a_guarded_modules_entry_in_sys_modules_swapped_or_one_of_ours_planted_is_named(monkeypatch):
    """helper-18: a copy of `kb_agent.evaluator.compare` put into sys.modules served the stages'
    function-level imports, the original module untouched."""
    import sys

    import kb_agent.evaluator.compare as compare

    guard = TamperGuard({"kb_agent.evaluator.compare": compare})
    assert guard.changed() == []
    monkeypatch.setitem(
        sys.modules, "kb_agent.evaluator.compare", types.ModuleType("kb_agent.evaluator.compare")
    )
    monkeypatch.setitem(sys.modules, "kb_agent.evaluator.not_yet_imported", types.ModuleType("planted"))
    assert guard.changed() == ["sys.modules['kb_agent.evaluator.compare']",
                               "sys.modules['kb_agent.evaluator.not_yet_imported'] (new)"]  # fmt: skip


def test_ctypes_into_the_interpreter_is_told_from_other_foreign_calls():
    """helper-21 (2026-12-07): `ctypes.pythonapi.PyFrame_LocalsToFast` on frames a signal handler was
    handed moved the timing loop's start time; a fork through libc (the process checks' to see, as a C++
    extension's would be) stays allowed."""
    import ctypes

    from kb_agent.evaluator.strict import _reaches_the_interpreter

    assert _reaches_the_interpreter("ctypes.dlsym", (ctypes.pythonapi, "PyFrame_LocalsToFast"))
    assert _reaches_the_interpreter("ctypes.dlsym", (ctypes.CDLL(None), "_PyObject_GC_New"))
    assert _reaches_the_interpreter("ctypes.cdata", (id(5),))
    assert not _reaches_the_interpreter("ctypes.dlsym", (ctypes.CDLL(None), "fork"))
    assert not _reaches_the_interpreter("ctypes.dlopen", (None,))
    # helper-23: libc's memcpy onto id(x) rewrote the evaluator's tolerance floats in place
    assert _reaches_the_interpreter("ctypes.dlsym", (ctypes.CDLL(None), "memcpy"))
    assert _reaches_the_interpreter("ctypes.dlsym", (ctypes.CDLL(None), "dlsym"))


def test_a_guarded_number_rewritten_in_place_is_named():
    """helper-23 (2026-12-07): libc's memcpy onto `id(TOLERANCES["fp32"]) + 16` made the float 10.0,
    the object (and ev.atol, the same object) unchanged by identity: a 0.5x ReLU passed every check.
    The guard now keeps the evaluator's numbers and short strings by value too."""
    import ctypes
    import struct

    m = types.ModuleType("kb_agent_guarded_numbers")
    m.TOLERANCES, m.FLOOR, m.NAMES = {"fp32": float("1e-4") * 1.0}, 0.25 * 1.0, ("cuda", "cpu")
    guard = TamperGuard({"m": m}, contents=("m",))
    assert guard.changed() == []
    f = m.TOLERANCES["fp32"]
    ctypes.memmove(id(f) + 16, struct.pack("d", 10.0), 8)  # PyFloatObject: refcount, type, the double
    try:
        assert m.TOLERANCES["fp32"] is f and f == 10.0
        assert guard.changed() == ["m.TOLERANCES[fp32] (its value, 0.0001 -> 10.0)"]
    finally:
        ctypes.memmove(id(f) + 16, struct.pack("d", 1e-4), 8)
    assert guard.changed() == []


def test_the_collector_is_off_after_the_constructor_and_a_candidate_switching_it_on_is_seen():
    """helper-22 (2026-12-07): a collection started by the harness's own allocations right after the
    forward ran the candidate's `__del__` (or a one-shot gc callback) before any check, and it put a wrong
    output right; strict mode collects once after the constructor and then keeps the collector off."""
    import gc
    import types

    from kb_agent.evaluator.strict import interpreter_hooks, pause_collections

    ev = types.SimpleNamespace(hooks_before=interpreter_hooks())
    was = gc.isenabled()
    try:
        pause_collections(ev)
        assert not gc.isenabled() and ev.hooks_before == interpreter_hooks()
        gc.enable()
        assert interpreter_hooks()["gc enabled"] != ev.hooks_before["gc enabled"]
    finally:
        (gc.enable if was else gc.disable)()


def test_a_thread_started_through_thread_module_is_seen_alive():
    """helper-23 (2026-12-07): a thread from `_thread.start_new_thread` is never in
    threading.enumerate(); one that wrote torch.relu(x) into the output after forward returned passed
    every check with a forged speedup. `live_threads` now reads every thread running Python code."""
    import _thread
    import threading

    from kb_agent.evaluator.strict import live_threads, thread_idents

    before = thread_idents()
    go, started = threading.Event(), threading.Event()

    def wait():
        started.set()
        go.wait(10)

    _thread.start_new_thread(wait, ())
    started.wait(10)
    try:
        (found,) = live_threads(before)
        assert "_thread" in found
    finally:
        go.set()
    named = threading.Thread(target=go.wait, args=(10,), name="of-its-own")
    go.clear()
    named.start()
    try:
        assert "of-its-own" in live_threads(before)
    finally:
        go.set()
        named.join()


def test_a_guarded_functions_constants_rewritten_in_place_are_named():
    """helper-24 (2026-12-07): ctypes.memmove pointed a slot of `compare._margin_pass`'s constants from
    False to True, the function and its code unchanged by identity, and a 0.5x ReLU passed. The guard
    keeps each guarded function's defaults and constants (nested code objects' too) slot by slot, and
    their floats by value."""
    import ctypes
    import struct

    def f(x, scale=1.5):
        return [x * 0.25 for _ in range(2)] if x else False

    m = types.ModuleType("kb_agent_guarded_code")
    m.f = f
    guard = TamperGuard({"m": m})
    assert guard.changed() == []
    consts = f.__code__.co_consts
    i = consts.index(False)
    ctypes.memmove(id(consts) + 24 + 8 * i, struct.pack("Q", id(True)), 8)  # PyTupleObject's ob_item[i]
    try:
        assert f.__code__.co_consts[i] is True and guard.changed() == ["m.f (its code)"]
    finally:
        ctypes.memmove(id(consts) + 24 + 8 * i, struct.pack("Q", id(False)), 8)
    assert guard.changed() == []
    inner = next(c for c in consts if isinstance(c, types.CodeType))  # the comprehension's code (3.11)
    quarter = next(k for k in inner.co_consts if k == 0.25)
    ctypes.memmove(id(quarter) + 16, struct.pack("d", 2.5), 8)  # the float itself, in place
    try:
        assert guard.changed() == ["m.f (its code)"]
    finally:
        # (not the literal 0.25: this test's code shares that very object)
        ctypes.memmove(id(quarter) + 16, struct.pack("d", float("0.25")), 8)
    assert guard.changed() == []
