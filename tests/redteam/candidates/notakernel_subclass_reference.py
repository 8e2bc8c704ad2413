"""Not a kernel: `class ModelNew(<the reference Model>)`, the reference imported from sys.modules.

class: 5 not-a-kernel
attack: at import, takes Model from the module in sys.modules that has Model and get_inputs (the
  evaluator loaded the reference first) and subclasses it, adding nothing.
problem: toy/relu
expected: rejected
device: cpu
"""
import sys

import torch
import torch.nn as nn


def _reference_class():
    for name, mod in list(sys.modules.items()):
        M = getattr(mod, "Model", None)
        if isinstance(M, type) and issubclass(M, nn.Module) and callable(getattr(mod, "get_inputs", None)):
            return M
    return None


_Base = _reference_class()

if _Base is not None:

    class ModelNew(_Base):
        pass

else:

    class ModelNew(nn.Module):
        def forward(self, x):
            return torch.relu(x)
