"""`kb-agent problems check`'s child: flag a degenerate reference (no candidate involved).

What it measures, on `correctness_trials` trials of fresh inputs (KernelBench's trial seeds):

* the all-element verdicts a cheat could pass on every trial: a zero output (`zeros_pass`), one constant
  per output, the mean of the first trial's output (`constant_pass`), the first trial's output itself,
  cached (`input_independent`: with fixed weights, the output for one seed's inputs matches the output for
  another's);
* the fractions behind them, reported beside the verdicts (`measures`): of the output elements near zero,
  near that constant, unchanged from the first trial, each the least over the trials; above the thresholds
  of `evaluator.thresholds` (METR's KernelBench quality filter) they are flagged `mostly_*`;
* each of those at the check's own tolerance and at every looser tolerance a user may evaluate in
  (`evaluator.settings.TOLERANCES`: fp32 1e-4, fp16/bf16 1e-2); a flag seen only at a looser one gets the
  suffix `_loose` and its finding names the tolerance;
* a reference that does not match itself: two instances built with the same seed, called one after the
  other on the same inputs, so dropout or other random draws show (`nondeterministic`); one instance called
  again on the first trial's inputs after the other trials, with the same seed, so hidden state kept
  between forward calls shows (`state_carried`; not measured when those inputs do not come again from
  the seed, checked by their fingerprint); NaN in the output (`nonfinite_output`);
* a reference that fails under the evaluator's input handling (`reference_fails`), unless the failure
  says the problem cannot be checked here: a package it imports is not installed, or it fetches weights
  or a config (`from_pretrained` and the like; the check downloads nothing). Those are `unchecked`, with
  the reason, and no flag.
"""

from __future__ import annotations

import os
import re
from typing import Any

from kb_agent.evaluator.context import describe_exception, is_oom, load_module, set_seed, tensors
from kb_agent.evaluator.result import CHECK_FLAGS
from kb_agent.evaluator.settings import TOLERANCES
from kb_agent.evaluator.thresholds import (
    MOSTLY_CONSTANT_FRACTION,
    MOSTLY_UNCHANGED_FRACTION,
    MOSTLY_ZEROS_FRACTION,
)

# calls that fetch weights, configs or files over the network; a reference making them is checked with
# the Hugging Face libraries in offline mode, and a failure to build it is a reason, not a flag
_DOWNLOADS = re.compile(  # (a definition of one, "def from_pretrained(", is no call)
    r"(?<!def )\b(from_pretrained|hf_hub_download|snapshot_download|load_state_dict_from_url|download_url_to_file"
    r"|torch\.hub\.load|urlopen|urlretrieve)\s*\("
)
_OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
# what a failed download or a missing cached file says (transformers, huggingface_hub, urllib, requests)
_DOWNLOAD_FAILURE = re.compile(
    r"offline|huggingface|hf_hub|couldn't connect|connection|cached files|cache|urlopen|name resolution"
    r"|EntryNotFound|HTTP|Network",
    re.I,
)

# flag -> (what its fraction measures, the threshold above which `mostly_` flags it)
_MOSTLY = {
    "zeros": ("zeros_fraction", MOSTLY_ZEROS_FRACTION),
    "constant": ("constant_fraction", MOSTLY_CONSTANT_FRACTION),
    "input_independent": ("unchanged_fraction", MOSTLY_UNCHANGED_FRACTION),
}


def run(ev) -> None:
    """Check the reference of `ev.problem` (see the module docstring). Sends a "problem_check" part
    {flags, findings, measures, unchecked, details, and one entry per flag}, then the verdict: "ok",
    "flagged", "unchecked" (the message says why), or "error" for out of memory (the machine's limit,
    not the problem's; the parent may check it again alone)."""
    torch, chan = ev.torch, ev.chan
    code = ev.problem["code"]
    downloads = download_calls(code)
    if downloads:  # never fetch anything: a check reads what is cached or fails, quickly
        os.environ.update(_OFFLINE)
    tolerances = check_tolerances(ev.atol, ev.rtol)
    tally = _Tally(tolerances)
    found: dict[str, Any] = {"reference_fails": None, "details": [], "unchecked": None}
    facts: dict[str, Any] = {"nondeterministic": 0.0, "state_carried": None, "nonfinite_output": 0.0}
    stage = "build"
    chan.send("stage", name="build")
    try:
        ref_path = ev.workdir / "reference.py"
        ref_path.write_text(code)
        ev.ref_mod = load_module(ref_path, "kb_reference")
        set_seed(ev.settings.seed)
        init = ev.prepare(ev.ref_mod.get_init_inputs())
        models = []
        for _ in range(2):
            set_seed(ev.settings.seed)
            models.append(ev.ref_mod.Model(*ev.clone(init)).to(device=ev.device, dtype=ev.dtype))
        stage = "correctness"
        chan.send("stage", name="correctness")
        torch.manual_seed(ev.settings.seed)
        seeds = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(ev.settings.correctness_trials)]
        first_out, prints = None, set()
        for i, s in enumerate(seeds):
            set_seed(s)
            inputs = ev.draw_inputs()
            fingerprint = _fingerprint(inputs)
            prints.add(fingerprint)
            if i == 0:
                first_print = fingerprint
            with torch.no_grad():
                set_seed(s)
                first = models[0](*ev.clone(inputs))
                # no reseed: a reference that draws random numbers differs
                second = models[1](*ev.clone(inputs))
                ev.sync()
            off, total = _differ(first, second, ev.atol, ev.rtol)
            if off:
                facts["nondeterministic"] = max(facts["nondeterministic"], off / max(total, 1))
                found["details"].append(f"trial {i + 1}: two runs differ ({off} of {total} elements)")
            del second
            outs = [t for t in tensors(first) if t.is_floating_point()]
            numel = sum(t.numel() for t in outs)
            nans = sum(int(torch.isnan(t).sum()) for t in outs)
            if nans:  # (equal infinities do match: Inf is no flag)
                if not facts["nonfinite_output"]:  # NaN never passes allclose: no candidate can be correct
                    found["details"].append(f"trial {i + 1}: {nans} NaN elements in the reference's output")
                facts["nonfinite_output"] = max(facts["nonfinite_output"], nans / numel)
            if i == 0:  # one constant per output, fixed across trials: it must not know the trial's answer;
                # the first output kept (a copy: a reference may hand out a buffer it later overwrites)
                const_values = [t.float().mean().item() for t in outs]
                first_out = [t.detach().clone() for t in tensors(first)]
            tally.trial(outs, const_values, tensors(first) if i else None, first_out)
            del first, outs, inputs
        if len(seeds) > 1 and len(prints) == 1:
            found["details"].append("get_inputs() gave the same values for every seed")
        stage = "state"
        if seeds:  # the first trial again, on the instance that has run every trial since
            _state_check(ev, models[0], seeds[0], first_print, first_out, facts, found)
            del first_out
    except BaseException as e:  # noqa: BLE001
        # the machine's limit (the GPU's, or the CPU allocator's), not the problem's: no finding to store
        if is_oom(e):
            chan.send(
                "done", status="error", message="out of memory (other jobs on this GPU?): " + str(e)[:300]
            )
            return
        text = describe_exception(e, str(ev.workdir / "reference.py"), label="reference")
        found["unchecked"] = unchecked_reason(e, text, downloads if stage == "build" else [])
        if found["unchecked"] is None:
            found["reference_fails"] = text
        tally = None  # nothing to judge the outputs on
    if found["unchecked"]:
        found["flags"], found["findings"], found["measures"] = [], [], []
        chan.send("problem_check", check=found)
        chan.send("done", status="unchecked", message=found["unchecked"]["message"])
        return
    findings = judge(
        facts, tally.measures() if tally else [], bool(found["reference_fails"]), ev.atol, ev.rtol
    )
    flags = [k for k in CHECK_FLAGS if k in {f["flag"] for f in findings}]
    found.update({f: True for f in flags if f != "reference_fails"})
    found["flags"] = flags
    found["findings"] = sorted(findings, key=lambda f: CHECK_FLAGS.index(f["flag"]))
    found["measures"] = tally.measures() if tally else []
    chan.send("problem_check", check=found)
    chan.send("done", status="flagged" if flags else "ok", message=", ".join(flags) or "ok")


# ---------------------------------------------------------------- tolerances and fractions


def check_tolerances(atol: float, rtol: float) -> list[dict[str, Any]]:
    """The tolerances the outputs are judged at: the check's own (atol, rtol) first, then each looser one
    a user may evaluate in (`TOLERANCES`, atol = rtol), tightest first. Each {"atol", "rtol",
    "precisions": the precisions using it, "own": bool}."""
    out = [{"atol": atol, "rtol": rtol, "precisions": [], "own": True}]
    for t in sorted(set(TOLERANCES.values())):
        precisions = [p for p, v in TOLERANCES.items() if v == t]
        if (t, t) == (atol, rtol):
            out[0]["precisions"] = precisions
        elif t >= atol and t >= rtol:
            out.append({"atol": t, "rtol": t, "precisions": precisions, "own": False})
    return out


def _state_check(ev, model, seed: int, first_print: tuple, first_out: list, facts: dict, found: dict) -> None:
    """The first trial again on `model`, the instance that has run every trial since: its output must be
    `first_out` (else `facts["state_carried"]` is the fraction of elements that changed). The inputs are
    drawn again from `seed`; when they are not the first trial's (`first_print`, `_fingerprint`), nothing
    is compared: `state_carried` stays unmeasured (None) and a detail says so."""
    set_seed(seed)
    inputs = ev.draw_inputs()
    if _fingerprint(inputs) != first_print:
        found["details"].append("the first trial's inputs did not come again from its seed: state carried "
                                "between calls not checked")  # fmt: skip
        return
    with ev.torch.no_grad():
        set_seed(seed)
        again = model(*ev.clone(inputs))
        ev.sync()
    off, total = _differ(first_out, tensors(again), ev.atol, ev.rtol)
    facts["state_carried"] = off / max(total, 1)
    if off:
        found["details"].append(
            f"the first trial again on the same instance: {off} of {total} elements changed"
            + (" (the reference is also nondeterministic)" if facts["nondeterministic"] else "")
        )


class _Tally:
    """Per tolerance, the least fraction over the trials of output elements within it of zero, of the
    constant, and of the first trial's output (trials 2..n), counted by allclose's element test
    (|reference - candidate| <= atol + rtol * |candidate|, or equal; NaN never close), and whether every
    element passed on every trial, as `torch.allclose` itself decides (KernelBench's verdict)."""

    def __init__(self, tolerances: list[dict[str, Any]]):
        self.tolerances = tolerances
        self.least: list[dict[str, Any]] = [
            {"zeros_fraction": None, "constant_fraction": None, "unchanged_fraction": None,
             "zeros_pass": None, "constant_pass": None, "unchanged_pass": None}
            for _ in tolerances
        ]  # fmt: skip

    def _keep(self, k: int, key: str, count: int, total: int, passed: bool) -> None:
        least = self.least[k]
        old = least[f"{key}_fraction"]
        least[f"{key}_fraction"] = count / total if old is None else min(old, count / total)
        least[f"{key}_pass"] = passed and least[f"{key}_pass"] is not False

    def trial(self, outs: list, const_values: list[float], later: list | None, first: list | None) -> None:
        """One trial: `outs` its floating-point outputs; `later` all its output tensors when it is not the
        first trial, compared with `first` (the first trial's)."""
        numel = sum(t.numel() for t in outs)
        for k, tol in enumerate(self.tolerances):
            a, r = tol["atol"], tol["rtol"]
            if numel:
                zeros = _close_count(outs, [0.0] * len(outs), a, r)
                consts = _close_count(outs, const_values, a, r)
                self._keep(k, "zeros", *zeros)
                self._keep(k, "constant", *consts)
            if later is not None and first is not None:
                same = _close_count(later, first, a, r)
                if same[1]:
                    self._keep(k, "unchanged", *same)

    def measures(self) -> list[dict[str, Any]]:
        """Per tolerance: {"atol", "rtol", "precisions", "own", "zeros_fraction", "constant_fraction",
        "unchanged_fraction" (fractions 0..1; None where not measured: no floating-point output, or one
        trial only for the unchanged fraction), "zeros_pass", "constant_pass", "unchanged_pass" (every
        element, every trial, by torch.allclose; None where not measured)}."""
        return [{**tol, **least} for tol, least in zip(self.tolerances, self.least, strict=True)]


def _close_count(actual: list, expected: list, atol: float, rtol: float) -> tuple[int, int, bool]:
    """(elements of the tensors `actual` close to `expected`, all elements, whether torch.allclose passes
    every tensor). `expected` holds tensors, or numbers (one per tensor: compared with every element).
    Integer and bool tensors count equal elements; a tensor of another shape or dtype counts none. The
    count is allclose's element test written out (torch.isclose is 100x slower on the CPU); allclose
    itself is asked only where every element passed."""
    import torch
    from kb_agent.evaluator.compare import flat_chunks

    same = total = 0
    passed = True
    for x, y in zip(actual, expected, strict=True):
        total += x.numel()
        scalar = not isinstance(y, torch.Tensor)
        if not scalar and (x.shape != y.shape or x.dtype != y.dtype):
            passed = False
            continue
        n = 0
        for _, xc, yc in flat_chunks(x, x if scalar else y):
            if not x.is_floating_point():
                n += int((xc == (y if scalar else yc)).sum())
                continue
            xf = xc.float() if xc.element_size() < 4 else xc
            yf = y if scalar else (yc.float() if yc.element_size() < 4 else yc)
            allowed = atol + rtol * (abs(yf) if scalar else yf.abs())
            diff = (xf - yf).abs()  # (an infinite allowance must not make 1 close to Inf)
            n += int((((diff <= allowed) & torch.isfinite(diff)) | (xf == yf)).sum())
        same += n
        if n < x.numel():
            passed = False
        elif x.is_floating_point() and x.numel():
            other = torch.full((), y, dtype=x.dtype, device=x.device).expand_as(x) if scalar else y
            passed = passed and all(
                bool(torch.allclose(xc, oc, rtol=rtol, atol=atol)) for _, xc, oc in flat_chunks(x, other)
            )
    return same, total, passed and total > 0


def judge(
    facts: dict[str, Any], measures: list[dict[str, Any]], fails: bool, atol: float, rtol: float
) -> list[dict[str, Any]]:
    """The findings, each {"flag", "atol", "rtol", "fraction", "threshold", "precisions"}, from what
    was measured. Per tolerance, a weaker flag implied by a stronger one is left out (a zero or constant
    output is unchanged across seeds; an all-element verdict makes its `mostly_` redundant); a flag seen
    at a looser tolerance but not the check's own gets `_loose`, with the tightest tolerance it holds at.
    `fraction` is the share of elements it concerns (0..1), `threshold` the share above which it is
    flagged (1.0: every element, on every trial)."""
    out: list[dict[str, Any]] = []
    base = {"atol": atol, "rtol": rtol, "precisions": measures[0]["precisions"] if measures else []}
    if fails:
        out.append({**base, "flag": "reference_fails", "fraction": None, "threshold": None})
    for flag in ("nondeterministic", "state_carried", "nonfinite_output"):
        if facts.get(flag):
            out.append({**base, "flag": flag, "fraction": facts[flag], "threshold": 0.0})
    seen: set[str] = set()
    for m in measures:
        for flag, fraction, threshold in _tolerance_flags(m):
            if flag in seen:
                continue
            seen.add(flag)
            name = flag if m["own"] else flag + "_loose"
            out.append({"flag": name, "atol": m["atol"], "rtol": m["rtol"], "precisions": m["precisions"],
                        "fraction": fraction, "threshold": threshold})  # fmt: skip
    own = {f["flag"] for f in out}
    return [f for f in out if not f["flag"].endswith("_loose") or f["flag"][: -len("_loose")] not in own]


def _tolerance_flags(m: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(flag, fraction, threshold) at one tolerance's measures: an all-element verdict where allclose
    passed every trial, else its `mostly_` flag above the threshold. A zero or constant output is not
    also called (mostly) input-independent: it is, within twice the tolerance."""
    flags = []
    for name, verdict, passed in (("zeros", "zeros_pass", "zeros_pass"),
                                  ("constant", "constant_pass", "constant_pass"),
                                  ("input_independent", "input_independent", "unchanged_pass")):  # fmt: skip
        key, threshold = _MOSTLY[name]
        fraction = m.get(key)
        if name == "input_independent" and (m.get("zeros_pass") or m.get("constant_pass")):
            continue
        if m.get(passed):
            flags.append((verdict, fraction, 1.0))
        elif fraction is not None and fraction > threshold:
            flags.append(("mostly_" + name, fraction, threshold))
    return flags


# ---------------------------------------------------------------- failures that are reasons


def download_calls(code: str) -> list[str]:
    """The calls in a reference's source that fetch weights, configs or files ("from_pretrained (line
    9)"), in source order; comments are skipped."""
    calls = []
    for n, line in enumerate(code.splitlines(), 1):
        text = line.split("#", 1)[0]
        calls += [f"{m.group(1)} (line {n})" for m in _DOWNLOADS.finditer(text)]
    return calls


def unchecked_reason(e: BaseException, text: str, downloads: list[str]) -> dict[str, str] | None:
    """Why a reference that failed while it was imported or built cannot be checked here, or None when
    the failure is the reference's own: {"reason": "package" and/or "downloads" (comma-joined),
    "message": one line}."""
    reasons, parts = [], []
    if isinstance(e, ModuleNotFoundError) and e.name:
        reasons.append("package")
        parts.append(f"needs the package {e.name.split('.')[0]!r} (not installed here)")
    if downloads and (reasons or isinstance(e, OSError) or _DOWNLOAD_FAILURE.search(text)):
        reasons.append("downloads")
        where = "" if "HF_HOME" in os.environ else " (the check's HOME is a folder of its own)"
        parts.append(
            f"fetches weights or a config with {', '.join(downloads[:2])}, and the check downloads nothing: "
            f"set HF_HOME to a Hugging Face cache that holds them{where}"
        )
    if not reasons:
        return None
    return {"reason": ",".join(reasons), "message": "; ".join(parts) + f" ({text.splitlines()[0][:200]})"}


# ---------------------------------------------------------------- comparisons of two runs


def _fingerprint(inputs: list) -> tuple:
    """A cheap summary of one trial's inputs (sums of the tensors, other values as they are), to tell
    whether `get_inputs()` gives the same values for every seed."""
    import torch

    return tuple(
        float(v.double().sum()) if isinstance(v, torch.Tensor) else repr(v) for v in inputs
    )  # fmt: skip


def _differ(first, second, atol: float, rtol: float) -> tuple[int, int]:
    """(elements that differ, elements) between two runs of the reference: allclose's test, NaN matching
    NaN in the same place (a reference that always outputs NaN is not called nondeterministic); a
    non-tensor output counts as one element."""
    import torch
    from kb_agent.evaluator.compare import flat_chunks, flatten_outputs

    off = total = 0
    for x, y in zip(flatten_outputs(first), flatten_outputs(second), strict=True):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor) or x.shape != y.shape:
            total += x.numel() if isinstance(x, torch.Tensor) else 1
            off += (x.numel() if isinstance(x, torch.Tensor) else 1) if not _same_value(x, y) else 0
            continue
        total += x.numel()
        for _, xc, yc in flat_chunks(x, y):
            if x.is_floating_point():
                off += int((~torch.isclose(xc, yc, rtol=rtol, atol=atol, equal_nan=True)).sum())
            else:
                off += int((xc != yc).sum())
    return off, total


def _same_value(x, y) -> bool:
    try:
        return bool(x == y)
    except Exception:  # noqa: BLE001 - tensors of different shapes, odd objects
        return False
