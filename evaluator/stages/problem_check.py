"""`kb-agent problems check`'s child: flag a degenerate reference (no candidate involved)."""

from __future__ import annotations

from kb_agent.evaluator.context import describe_exception, is_oom, load_module, set_seed, tensors
from kb_agent.evaluator.result import CHECK_FLAGS


def run(ev) -> None:
    """Flag a degenerate reference: it fails under the evaluator's input handling, it does not match
    itself (two instances built with the same seed, called one after the other on the same inputs, so
    dropout or other random draws show), its output holds NaN (nothing can match it), or a zero or
    constant output would pass its correctness check at the tolerance on every trial (the constant is
    the mean of the first trial's output, kept for all trials, so a scalar output that varies with the
    inputs is not flagged by its own value). Sends a "problem_check" part, then the verdict."""
    from kb_agent.evaluator.compare import compare_outputs

    torch, chan = ev.torch, ev.chan
    found = {"reference_fails": None, "nondeterministic": False, "nonfinite_output": False, "zeros_pass": True,
             "constant_pass": True, "details": []}  # fmt: skip
    chan.send("stage", name="build")
    try:
        ref_path = ev.workdir / "reference.py"
        ref_path.write_text(ev.problem["code"])
        ev.ref_mod = load_module(ref_path, "kb_reference")
        set_seed(ev.settings.seed)
        init = ev.prepare(ev.ref_mod.get_init_inputs())
        models = []
        for _ in range(2):
            set_seed(ev.settings.seed)
            models.append(ev.ref_mod.Model(*ev.clone(init)).to(device=ev.device, dtype=ev.dtype))
        chan.send("stage", name="correctness")
        torch.manual_seed(ev.settings.seed)
        seeds = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(ev.settings.correctness_trials)]
        for i, s in enumerate(seeds):
            set_seed(s)
            inputs = ev.draw_inputs()
            with torch.no_grad():
                set_seed(s)
                first = models[0](*ev.clone(inputs))
                second = models[1](
                    *ev.clone(inputs)
                )  # no reseed: a reference that draws random numbers differs
                ev.sync()
            differ = _runs_differ(first, second, ev.atol, ev.rtol)
            if differ:
                found["nondeterministic"] = True
                found["details"].append(f"trial {i + 1}: two runs differ ({differ})")
            outs = [t for t in tensors(first) if t.is_floating_point()]
            nans = sum(int(torch.isnan(t).sum()) for t in outs)
            if nans and not found.get("nonfinite_output"):  # (equal infinities do match: Inf is no flag)
                found["nonfinite_output"] = True  # NaN never passes allclose: no candidate can be correct
                found["details"].append(f"trial {i + 1}: {nans} NaN elements in the reference's output")
            zeros = [torch.zeros((), dtype=t.dtype, device=t.device).expand_as(t) for t in outs]  # no storage
            if i == 0:  # one constant per output, fixed across trials: it must not know the trial's answer
                const_values = [t.float().mean().item() for t in outs]
            consts = [
                torch.full((), v, dtype=t.dtype, device=t.device).expand_as(t)
                for v, t in zip(const_values, outs, strict=False)
            ]
            found["zeros_pass"] &= bool(outs) and compare_outputs(outs, zeros, ev.atol, ev.rtol, i, s).passed
            found["constant_pass"] &= (
                bool(outs) and compare_outputs(outs, consts, ev.atol, ev.rtol, i, s).passed
            )
            del first, second, outs, zeros, consts, inputs
    except BaseException as e:  # noqa: BLE001
        if is_oom(e):  # the machine's limit, not the problem's: no finding to store
            chan.send(
                "done", status="error", message="out of memory (other jobs on this GPU?): " + str(e)[:300]
            )
            return
        found["reference_fails"] = describe_exception(e, str(ev.workdir / "reference.py"), label="reference")
        found["zeros_pass"] = found["constant_pass"] = False  # nothing to judge them on
    flags = [k for k in CHECK_FLAGS if found.get(k)]
    found["flags"] = flags
    chan.send("problem_check", check=found)
    chan.send("done", status="flagged" if flags else "ok", message=", ".join(flags) or "ok")


def _runs_differ(first, second, atol: float, rtol: float) -> str:
    """ "" when two runs of the reference agree (allclose's test, NaN matching NaN in the same place, so a
    reference that always outputs NaN is not called nondeterministic), else how they differ."""
    import torch
    from kb_agent.evaluator.compare import flat_chunks, flatten_outputs

    a, b = flatten_outputs(first), flatten_outputs(second)
    for x, y in zip(a, b, strict=True):
        if not isinstance(x, torch.Tensor):
            if x != y:
                return f"{x!r} then {y!r}"
            continue
        off = 0
        for _, xc, yc in flat_chunks(x, y):
            if x.is_floating_point():
                off += int((~torch.isclose(xc, yc, rtol=rtol, atol=atol, equal_nan=True)).sum())
            else:
                off += int((xc != yc).sum())
        if off:
            return f"{off} of {x.numel()} elements"
    return ""
