"""Tampering: patch the evaluator's worker classes (reached as a module, not through frames or gc).

class: 4 tampering
attack: the child runs the evaluator's worker as the __main__ module, which any candidate can import
  (importlib.import_module on a name assembled at run time; evaluator.worker too, should the worker
  stop being __main__). From it, the class whose instances carry
  the report to the parent (the one with a `send(event, **payload)` method) gets a new send that
  rewrites the report on its way out, before any signing: correctness trials all passed, strict
  checks all passed, a made-up timing report (50x) if the real one never came, done/correct. No frame, no gc, no object of the evaluator's is touched, only a
  class attribute. The candidate itself writes zeros with a Triton kernel.
problem: toy/relu
expected: rejected
accept: incorrect
device: cpu
"""
import importlib

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fill_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.zeros((BLOCK,), dtype=tl.float32), mask=offs < n)


def _all_passed(obj):
    if isinstance(obj, dict):
        for k, v in list(obj.items()):
            if k == "passed" and isinstance(v, bool):
                obj[k] = True
            elif k in ("status", "parity_status") and isinstance(v, str):
                obj[k] = "correct"
            elif k in ("problem", "detail") and isinstance(v, str):
                obj[k] = None if k == "problem" else ""
            elif k == "passed" and isinstance(v, int):
                obj[k] = obj.get("trials", v)
            else:
                _all_passed(v)
    elif isinstance(obj, list):
        for v in obj:
            _all_passed(v)
    return obj


_SENT = set()


def _fake_timing():
    ref = {"mean_ms": 0.5, "median_ms": 0.5, "std_ms": 0.01, "min_ms": 0.49, "max_ms": 0.52, "trials": 100}
    cand = {"mean_ms": 0.01, "median_ms": 0.01, "std_ms": 0.001, "min_ms": 0.009, "max_ms": 0.012, "trials": 100}
    return {"method": "cuda_event", "settings": {}, "reference": ref, "candidate": cand, "speedup": 50.0}


def _modules():
    yield importlib.import_module("__" + "ma" + "in__")
    for name in ("evalu" + "ator.wor" + "ker", "evalu" + "ator.run" + "ner"):
        try:
            yield importlib.import_module(name)
        except Exception:
            pass


def _patch():
    for mod in _modules():
        _patch_module(mod)


def _patch_module(main):
    for name, cls in list(vars(main).items()):
        if isinstance(cls, type) and callable(getattr(cls, "send", None)):
            orig = cls.send

            def send(self, event, _orig=orig, **payload):
                payload = _all_passed(payload)
                _SENT.add(event)
                if event == "done":
                    if "timing" not in _SENT:  # the real run stopped before timing: add a timing report
                        _orig(self, "timing", timing=_fake_timing())
                    payload["status"] = "correct"
                    payload["message"] = "correct"
                return _orig(self, event, **payload)

            cls.send = send


try:
    _patch()
except Exception:
    pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        fill_kernel[(triton.cdiv(y.numel(), 1024),)](y, y.numel(), BLOCK=1024)
        return y
