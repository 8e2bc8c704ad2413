"""Strict mode's custom-kernel rules (issue 11, item 1): the library work rule and the kernel probe,
in-process on the CPU (stand-in "extension functions" are Python functions; Triton runs interpreted)."""

import sys
import types

import pytest
import torch
from kb_agent.evaluator import kernel_probe as kp
from kb_agent.evaluator.strict import library_does_all_the_work, library_work, op_kind


# ------------------------------------------------------------------------------ library work rule
class MatmulScaleResidual(torch.nn.Module):  # KernelBench 2/40 in small
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(16, 8)

    def forward(self, x):
        y = self.linear(x)
        return y * 0.5 + y.clone().detach()


def test_op_kinds_merge_spellings_and_drop_glue():
    assert op_kind("aten::addmm") == op_kind("mm") == "matmul"
    assert op_kind("relu") == op_kind("clamp_min_") == "clamp"
    assert op_kind("_softmax") == "softmax" and op_kind("_log_softmax") == "log_softmax"
    assert op_kind("cudnn_convolution") == "conv"
    assert op_kind("clone") is None and op_kind("empty_like") is None and op_kind("aten::view") is None


def test_a_library_gemm_beside_a_custom_epilogue_is_a_strict_part_of_the_reference():
    ref = MatmulScaleResidual()
    x = torch.randn(4, 16)
    ref_work = library_work(ref, [x])
    assert set(ref_work) == {"matmul", "bias", "mul", "add"} and ref_work["matmul"] == 2 * 4 * 16 * 8
    cand_work = library_work(lambda x: torch.matmul(x, ref.linear.weight.t()), [x])
    assert set(cand_work) == {"matmul"}
    assert library_does_all_the_work(ref_work, cand_work) == []


def test_the_whole_reference_in_library_ops_is_caught_whatever_the_spelling():
    ref = MatmulScaleResidual()
    x = torch.randn(4, 16)

    def respelled(x):
        y = torch.addmm(ref.linear.bias, x, ref.linear.weight.t())
        return y.div(2.0).sub(-y)  # mul as div, add as sub

    ref_work = library_work(ref, [x])
    assert library_does_all_the_work(ref_work, library_work(respelled, [x])) == [
        "add",
        "bias",
        "matmul",
        "mul",
    ]
    relu_work = library_work(torch.relu, [x])
    assert library_does_all_the_work(relu_work, library_work(lambda t: t.clamp_min(0), [x]))


def test_less_of_a_kind_than_the_reference_does_is_a_strict_part():
    x = torch.randn(64, 16)
    half = library_work(lambda t: torch.cat([torch.relu(t[:32]), t[32:] * 0]), [x])
    assert library_does_all_the_work(library_work(torch.relu, [x]), {"clamp": half["clamp"]}) == []


def test_a_reference_of_glue_only_is_never_said_to_be_done_by_the_library():
    x = torch.randn(8, 8)
    assert library_work(lambda t: t.t().contiguous(), [x]) == {}
    assert library_does_all_the_work({}, {"matmul": 1.0}) == []


# ---------------------------------------------------------------------------------- kernel probe
def _ext(probe, **fns):
    """A stand-in extension module: functions routed through the probe as LoadInlineWrapper wraps them."""
    return types.SimpleNamespace(**{n: kp._wrapped(probe, f"ext.{n}", f) for n, f in fns.items()})


def relu_into(x, y):
    y.copy_(torch.relu(x))


def copy_into(x, y):
    y.copy_(x)


def test_outside_a_pass_the_wrapped_function_just_runs():
    probe = kp.KernelProbe(torch)
    ext = _ext(probe, relu_into=relu_into)
    x, y = torch.randn(16), torch.zeros(16)
    ext.relu_into(x, y)
    assert torch.equal(y, torch.relu(x)) and probe.facts.launches == []


def test_observe_tells_a_computing_launch_from_a_copy_and_a_touch():
    probe = kp.KernelProbe(torch)
    ext = _ext(probe, relu_into=relu_into, copy_into=copy_into, scale=lambda y, s: y.mul_(s),
               make=lambda x: torch.relu(x))  # fmt: skip
    x, y = torch.randn(64), torch.empty(64)
    with probe.passing("observe") as facts:
        ext.relu_into(x, y)
        z = torch.zeros(64)
        ext.copy_into(torch.relu(x), z)
        ext.scale(z, 1.0)
        ext.make(x)
    got = [(launch.name, launch.wrote, launch.copy) for launch in facts.launches]
    assert got == [("ext.relu_into", 1, False), ("ext.copy_into", 1, True), ("ext.scale", 0, True),
                   ("ext.make", 1, False)]  # fmt: skip


def test_tensors_passed_inside_tuples_and_lists_are_observed_and_poisoned():
    # Triton takes a tuple of tensors as one argument (an extension a std::vector): an honest ReLU that
    # wrote `io[1]` of `(x, y)` was read as writing nothing, and rejected (helper-26)
    probe = kp.KernelProbe(torch)
    ext = _ext(
        probe, relu_io=lambda io: relu_into(*io), relu_nested=lambda n, io: relu_into(io[0][0], io[1][0])
    )
    x, y, z = torch.randn(32), torch.zeros(32), torch.zeros(32)
    with probe.passing("observe") as facts:
        ext.relu_io((x, y))
        ext.relu_nested(32, [(x,), [z]])
    assert [(launch.wrote, launch.copy) for launch in facts.launches] == [(1, False), (1, False)]
    y = torch.zeros(32)
    with probe.passing("poison"):
        ext.relu_io((x, y))
    assert torch.isnan(y).all() and not torch.isnan(x).any()


def test_a_copy_whose_source_hides_behind_a_forwarding_object_is_still_a_copy():
    # helper-28: Triton takes any object with data_ptr() as a pointer; one forwarding every lookup to the
    # copy's source kept the source out of the snapshots, and the copy read as computing
    class Forward:
        def __init__(self, t):
            self._t = t

        def __getattr__(self, name):
            if name == "base":
                raise AttributeError(name)
            return getattr(self._t, name)

    probe = kp.KernelProbe(torch)
    ext = _ext(probe, copy_into=lambda src, dst: dst.copy_(src._t))
    x, y = torch.relu(torch.randn(64)), torch.zeros(64)
    with probe.passing("observe") as facts:
        ext.copy_into(Forward(x), y)
    assert [(launch.wrote, launch.copy) for launch in facts.launches] == [(1, True)]


def test_a_chunked_copy_is_still_a_copy():
    probe = kp.KernelProbe(torch)

    def copy_chunk(src, dst, lo, hi):
        dst[lo:hi] = src[lo:hi]

    ext = _ext(probe, copy_chunk=copy_chunk)
    src, dst = torch.randn(100), torch.zeros(100)
    with probe.passing("observe") as facts:
        ext.copy_chunk(src, dst, 0, 50)
        ext.copy_chunk(src, dst, 50, 100)
    assert all(launch.copy for launch in facts.launches)


def test_poison_overwrites_floating_point_writes_and_leaves_indices():
    probe = kp.KernelProbe(torch)
    ext = _ext(probe, relu_into=relu_into, argmax=lambda x: torch.argmax(x).reshape(1))
    x, y = torch.randn(8), torch.zeros(8)
    with probe.passing("poison") as facts:
        ext.relu_into(x, y)
        idx = ext.argmax(x)
    assert torch.isnan(y).all() and not torch.isnan(x).any()
    assert idx.item() == torch.argmax(x).item()
    assert [launch.poisoned for launch in facts.launches] == [1, 0]


def test_a_launch_that_raises_is_counted_as_failed_not_as_a_launch():
    probe = kp.KernelProbe(torch)

    def broken(x):
        raise RuntimeError("no kernel image")

    ext = _ext(probe, broken=broken)
    with probe.passing("observe") as facts:
        with pytest.raises(RuntimeError):
            ext.broken(torch.ones(2))
    assert facts.failed == 1 and facts.launches == []


def _facts(*launches, failed=0):
    return kp.ProbeFacts(launches=list(launches), failed=failed)


def test_verdict_rules():
    real = kp.Launch("k", wrote=1, copy=False, poisoned=1)
    copy = kp.Launch("c", wrote=1, copy=True, poisoned=1)
    assert kp.verdict([_facts(real)], _facts(real), False, False) == (True, "")
    passed, why = kp.verdict([_facts(failed=1)], _facts(), None, False)
    assert not passed and "no custom kernel ran" in why and "raised" in why
    passed, why = kp.verdict([_facts(real)], _facts(real), True, False)
    assert not passed and "does not depend on the custom kernels" in why
    # nothing floating-point was poisoned (an argmax kernel): the reach rule is not applied
    ints = kp.Launch("i", wrote=1, copy=False, poisoned=0)
    assert kp.verdict([_facts(ints)], _facts(ints), True, False) == (True, "")
    passed, why = kp.verdict([_facts(copy), _facts(copy)], _facts(copy), False, False)
    assert not passed and "only copied" in why
    mixed = [_facts(copy), _facts(real)]  # copies on one distribution, computes on another
    assert kp.verdict(mixed, _facts(copy), False, False) == (True, "")
    assert kp.verdict([_facts(copy)], _facts(copy), False, True) == (True, "")  # the reference is an identity


def test_output_unchanged_and_identity_helpers():
    e = torch.randn(4)
    assert kp.output_unchanged(torch, e.clone(), e, 1e-5, 1e-5)
    assert not kp.output_unchanged(torch, torch.full_like(e, float("nan")), e, 1e-5, 1e-5)
    assert not kp.output_unchanged(torch, e + 1, e, 1e-5, 1e-5)
    x = torch.rand(4)
    assert kp.output_is_an_input(torch, torch.relu(x), [x])
    assert not kp.output_is_an_input(torch, torch.relu(x - 0.5), [x])


def test_triton_launches_are_hooked_for_good_and_counted_in_every_call(monkeypatch):
    # helper-31, helper-34: a hook put on for each pass and taken off after it was a tell (a candidate
    # compared the launcher's `run` with the one it saw at import, and launched its kernel only while
    # probed); it stays on, and counts every launch
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    triton = pytest.importorskip("triton")
    import triton.language as tl

    @triton.jit
    def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)

    cls = type(relu_kernel)
    before = cls.__dict__["run"]
    monkeypatch.setattr(cls, "run", before)  # the class as it was, after this test
    probe = kp.KernelProbe(torch)
    probe.install_triton(sys.modules)
    hooked = cls.__dict__["run"]
    assert hooked is not before and hooked._kb_probe is probe
    x, y = torch.randn(100), torch.empty(100)
    with probe.passing("poison") as facts:
        relu_kernel[(1,)](x, y, 100, BLOCK=128)
    assert [launch.name for launch in facts.launches] == ["triton:relu_kernel"]
    assert torch.isnan(y).all()
    assert cls.__dict__["run"] is hooked  # still on: no tell between a pass and any other call
    relu_kernel[(1,)](x, y, 100, BLOCK=128)  # outside a pass: counted, untouched
    assert torch.equal(y, torch.relu(x)) and probe.launches == 2
    probe.install_triton(sys.modules)  # once is enough
    assert cls.__dict__["run"] is hooked


def test_wrap_extension_routes_a_modules_builtin_functions_through_the_probe():
    probe = kp.KernelProbe(torch)
    mod = types.ModuleType("ext")
    mod.relu = torch.relu  # a builtin function, as pybind11 exports them
    mod.version = "1"
    kp.wrap_extension(mod, probe, "ext")
    assert mod.version == "1"
    x = torch.randn(8)
    with probe.passing("observe") as facts:
        y = mod.relu(x)
    assert [launch.name for launch in facts.launches] == ["ext.relu"] and torch.equal(y, torch.relu(x))
    mod.relu(x)  # outside a pass: counted too (the timing stage's calls are held to the probe's)
    assert probe.launches == 2


def test_no_observed_launch_is_judged_by_the_profiles_kernel_names():
    graphs_only = kp.ProbeFacts(graph_replays=1)
    passed, why = kp.verdict([graphs_only], graphs_only, None, False, unseen_custom=False)
    assert not passed and "CUDA graphs" in why  # a captured torch.relu replayed
    assert kp.verdict([graphs_only], graphs_only, None, False, unseen_custom=True) == (True, "")


def test_an_honest_relu_into_a_zeroed_buffer_is_no_copy():
    # the failing input (CI, a fresh process): torch.empty gave zeroed memory, so the changed elements of
    # relu(x) were exactly the positive x and the launch read as a copy of its input
    probe = kp.KernelProbe(torch)
    ext = _ext(probe, relu_into=relu_into)
    x, y = torch.randn(64), torch.zeros(64)
    with probe.passing("observe") as facts:
        ext.relu_into(x, y)
    assert [(launch.wrote, launch.copy) for launch in facts.launches] == [(1, False)]


def test_the_chunked_comparisons_give_the_whole_tensors_answer(monkeypatch):
    # a probe on tensors of gigabytes compares them chunk by chunk (kernel_probe.CHUNK_ELEMENTS); chunks of 7
    # elements here, so that every rule crosses chunk boundaries
    monkeypatch.setattr(kp, "CHUNK_ELEMENTS", 7)
    x = torch.randn(50)
    x[3] = float("nan")
    y = x.clone()
    assert kp.copied_from(torch, y, None, [x])  # bitwise: NaN equals NaN
    y[48] = 1.0 if x[48] != 1.0 else 2.0
    assert not kp.copied_from(torch, y, None, [x])
    mask = torch.ones(50, dtype=torch.bool)
    mask[48] = False
    assert kp.copied_from(torch, y, mask, [x])  # the one differing element is outside the mask
    assert torch.equal(kp.changed_mask(torch, y, x), torch.arange(50) == 48)
    assert not kp.changed_mask(torch, x.view(5, 10), x.clone().view(5, 10)).any()
    z = torch.complex(x, torch.zeros(50)).view(5, 10)  # found by a new user: a complex argument raised
    w = z.clone()
    w[2, 3] = 7 + 1j
    assert kp.changed_mask(torch, w, z).shape == (5, 10, 2) and kp.changed_mask(torch, w, z).sum() == 2
    assert kp.copied_from(torch, w, None, [w.clone()]) and not kp.copied_from(torch, w, None, [z])
    test_observe_tells_a_computing_launch_from_a_copy_and_a_touch()
    test_a_chunked_copy_is_still_a_copy()
    test_an_honest_relu_into_a_zeroed_buffer_is_no_copy()


def test_snapshots_of_cpu_tensors_are_plain_copies():
    x = torch.randn(8)
    (snap,) = kp.snapshot(torch, [x])
    assert torch.equal(snap, x) and snap.data_ptr() != x.data_ptr()


@torch.library.custom_op("kbtest::relu", mutates_args=())
def _own_relu(x: torch.Tensor) -> torch.Tensor:
    return x.clamp_min(0.0)


@_own_relu.register_fake
def _(x):
    return torch.empty_like(x)


def test_a_kernel_registered_as_an_op_of_its_own_namespace_is_no_library_work():
    """A candidate's kernel registered with torch.library under its own name (`kbtest::relu`) was counted
    as aten's relu by its bare name, so the reference's relu looked done by a library (helper-17)."""
    x = torch.randn(64)
    assert set(library_work(torch.relu, [x])) == {"clamp"}
    assert library_work(lambda t: torch.ops.kbtest.relu(t), [x]) == {}


def test_a_bias_inside_a_gemm_or_convolution_is_work_a_custom_epilogue_may_do():
    # helper-32: torch.mm (or a conv without bias), then a Triton kernel adding the bias, was "all of the
    # reference's work" against nn.Linear (addmm) and nn.Conv2d, whose bias add counted for nothing
    linear, conv = torch.nn.Linear(16, 8), torch.nn.Conv2d(3, 4, 3)
    x, image = torch.randn(4, 16), torch.randn(1, 3, 8, 8)
    ref_work = library_work(linear, [x])
    assert ref_work == {"matmul": 2 * 4 * 16 * 8, "bias": 4 * 8}
    mm = lambda t: torch.mm(t, linear.weight.t())  # noqa: E731
    assert library_does_all_the_work(ref_work, library_work(mm, [x])) == []
    everything = ["bias", "matmul"]
    assert library_does_all_the_work(ref_work, library_work(linear, [x])) == everything
    assert library_does_all_the_work(ref_work, library_work(lambda t: mm(t) + linear.bias, [x])) == everything

    # helper-34: the bias folded into the GEMM as a column of ones (x | 1) @ (W | b)^T is the library doing
    # all of it too: its GEMM does two FLOPs more an output element
    def folded(t):
        return torch.mm(
            torch.cat([t, torch.ones(4, 1)], 1), torch.cat([linear.weight, linear.bias[:, None]], 1).t()
        )

    assert torch.allclose(folded(x), linear(x), atol=1e-6)
    assert library_does_all_the_work(ref_work, library_work(folded, [x])) == everything
    conv_work = library_work(conv, [image])
    assert conv_work["bias"] == 4 * 6 * 6
    without_bias = library_work(lambda t: torch.nn.functional.conv2d(t, conv.weight), [image])
    assert "bias" not in without_bias and library_does_all_the_work(conv_work, without_bias) == []
    assert "bias" not in library_work(lambda t: torch.addmm(linear.bias, t, linear.weight.t(), beta=0), [x])


def test_a_gemm_spelled_as_another_library_kind_is_still_the_librarys():
    # helper-34: A @ B as F.conv1d(A[:, :, None], B.t()[:, :, None]) read as "conv", and the reference's
    # "matmul" looked left to the custom kernels
    a, b = torch.randn(16, 8), torch.randn(8, 4)
    as_conv = lambda a, b: torch.nn.functional.conv1d(a[:, :, None], b.t()[:, :, None])[:, :, 0]  # noqa: E731
    assert torch.allclose(as_conv(a, b), a @ b, atol=1e-5)
    ref_work = library_work(torch.matmul, [a, b])
    assert library_does_all_the_work(ref_work, library_work(as_conv, [a, b])) == ["matmul"]
    assert library_does_all_the_work(ref_work, library_work(lambda a, b: as_conv(a[:8], b), [a, b])) == []
