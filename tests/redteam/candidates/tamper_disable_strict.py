"""Tampering: switch strict mode off from inside the child, then cheat openly.

class: 4 tampering
attack: at import and in __init__, walks the caller frames and, on every object it finds there, sets
  boolean attributes whose name contains "strict" to False and `settings.strict` to False (the
  EvalSettings the child was given). Then forward is plain torch.relu, no kernel at all. If the child
  decides about, or reports, strict mode from state the candidate can reach, the verdict comes back as
  a parity one: correct.
problem: toy/relu
expected: rejected
device: cpu
"""
import sys

import torch
import torch.nn as nn


def _disarm():
    f = sys._getframe(1)
    while f is not None:
        for obj in list(f.f_locals.values()):
            d = getattr(obj, "__dict__", None)
            if not isinstance(d, dict) or isinstance(obj, type):
                continue
            for k, v in list(d.items()):
                try:
                    if "strict" in k.lower() and isinstance(v, bool):
                        setattr(obj, k, False)
                    elif hasattr(v, "strict") and isinstance(getattr(v, "strict", None), bool):
                        v.strict = False
                except Exception:
                    pass
            if isinstance(obj, dict) and isinstance(obj.get("settings"), dict) and "strict" in obj["settings"]:
                obj["settings"]["strict"] = False
        f = f.f_back


_disarm()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        _disarm()

    def forward(self, x):
        return torch.relu(x)
