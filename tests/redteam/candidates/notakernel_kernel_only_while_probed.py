"""Not a kernel: a real Triton ReLU launched only while the kernel probe watches, torch.relu otherwise.

class: 5 not-a-kernel
attack: the kernel probe's hook on Triton's launcher keeps the probe in its closure; this forward reads
  the probe's `mode` from there and launches its (honest) kernel only during the probe's passes (and
  while its PyTorch ops are counted), and calls torch.relu in every other call, the timed ones included: the parity figure is PyTorch's speed
  credited to a kernel. The probe counts the launches of every call; the calls that are timed must
  launch custom kernels too.
problem: toy/relu
expected: rejected
device: cpu
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def _probed() -> bool:
    from triton.runtime import interpreter, jit

    for cls in (getattr(interpreter, "InterpretedFunction", None), getattr(jit, "JITFunction", None)):
        run = getattr(cls, "__dict__", {}).get("run")
        for cell in getattr(run, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if getattr(value, "mode", None) is not None:
                return True
    return False


class ModelNew(nn.Module):
    def forward(self, x):
        if not (_probed() or torch._C._len_torch_dispatch_stack() > 0):  # nor while its ops are counted
            return torch.relu(x)
        x = x.contiguous()
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
