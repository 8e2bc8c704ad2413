"""The hardware and software record stored with every result, and the GPU's architecture as the harness
reads it without initialising CUDA (`gpu_arch`, for builds on CPU slots).

Importing this module does not import torch (the harness uses `gpu_arch`; the child `hardware_record`).
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kb_agent.evaluator.result import HardwareInfo

if TYPE_CHECKING:
    import torch


def arch_list(capability: tuple[int, int]) -> str:
    """TORCH_CUDA_ARCH_LIST for the detected GPU; Hopper and newer get the `a` variant (sm_90a), so
    architecture-specific instructions (wgmma, TMA) are available to candidates that use them."""
    major, minor = capability
    return f"{major}.{minor}{'a' if major >= 9 else ''}"


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def hardware_record(device: torch.device, precision: str) -> HardwareInfo:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except Exception:
        triton_version = None
    info = HardwareInfo(
        device=str(device),
        cuda=torch.version.cuda,
        torch=torch.__version__,
        triton=triton_version,
        python=platform.python_version(),
        precision=precision,
    )
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        cap = (props.major, props.minor)
        info.gpu_name = props.name
        info.compute_capability = f"{cap[0]}.{cap[1]}"
        info.arch_list = arch_list(cap)
        info.l2_bytes = getattr(props, "L2_cache_size", None)
        info.sm_count = props.multi_processor_count
        info.driver = _driver_version()
    return info


@dataclass(frozen=True)
class GpuArch:
    """The architecture a GPU's extensions are built for, as a build child on a CPU slot needs it.

    Attributes:
        compute_capability: "9.0" (`HardwareInfo.compute_capability`; nvcc's `sm_90`).
        arch_list: the TORCH_CUDA_ARCH_LIST a run child on that GPU sets (`arch_list`: "9.0a").
        name: the GPU's name ("NVIDIA H200"), None when the GPUs it may be differ in name.
        driver: the NVIDIA driver's version, None when unknown.
    """

    compute_capability: str
    arch_list: str
    name: str | None = None
    driver: str | None = None


def gpu_arch(device: str = "cuda") -> GpuArch | None:
    """The architecture of the GPU an evaluation on `device` ("cuda": any visible GPU, which must then
    all be alike; "cuda:N") will run on, read without initialising CUDA in this process. Once per
    process for each device and CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER.

    First `nvidia-smi` (about 0.05 s), where its answer cannot be another GPU's: the GPUs it lists that
    may be the device are all of one capability, or CUDA_VISIBLE_DEVICES names the device by UUID, or
    CUDA_DEVICE_ORDER=PCI_BUS_ID makes CUDA's numbering nvidia-smi's. Otherwise a probe child asks torch
    (a few seconds: it starts CUDA, in a process of its own). None when neither can tell (no GPU, no
    driver, visible GPUs of different architectures for "cuda"): the caller then leaves the build to the
    run child, which detects its GPU itself."""
    return _gpu_arch(device, os.environ.get("CUDA_VISIBLE_DEVICES"), os.environ.get("CUDA_DEVICE_ORDER"))


@functools.lru_cache(maxsize=16)
def _gpu_arch(device: str, visible: str | None, order: str | None) -> GpuArch | None:
    index = int(device.split(":", 1)[1]) if ":" in device else None
    found = _from_nvidia_smi(index, visible, order)
    return found if found is not None else _from_probe_child(index)


def _from_nvidia_smi(index: int | None, visible: str | None, order: str | None) -> GpuArch | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=uuid,pci.bus_id,name,compute_cap,driver_version",
             "--format=csv,noheader"],  # fmt: skip
            capture_output=True, text=True, timeout=20,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [[c.strip() for c in line.split(",")] for line in out.stdout.splitlines() if line.strip()]
    gpus = [r for r in rows if len(r) == 5 and _is_capability(r[3])]
    if out.returncode != 0 or not gpus or len(gpus) != len(rows):
        return None
    # the GPUs the device may be: exactly, where CUDA's numbering can be read; else any of them
    by_bus = sorted(gpus, key=lambda r: r[1].lower())
    entries = None if visible is None else _entries(visible)
    exact = None
    if entries is not None:
        resolved = []
        for e in entries:
            if e.startswith("GPU-"):
                resolved.append(next((r for r in gpus if r[0].startswith(e)), None))
            elif e.isdigit() and order == "PCI_BUS_ID":
                resolved.append(by_bus[int(e)] if int(e) < len(by_bus) else None)
            else:
                resolved.append(None)  # MIG-..., or CUDA's fastest-first numbering
        if index is not None and index < len(resolved):
            exact = resolved[index]
        elif index is None and resolved and all(resolved):
            gpus = resolved
    elif index is not None and order == "PCI_BUS_ID" and index < len(by_bus):
        exact = by_bus[index]
    pool = [exact] if exact is not None else gpus
    caps = {r[3] for r in pool}
    if len(caps) != 1:
        return None
    (cap,) = caps
    names = {r[2] for r in pool}
    major, minor = (int(x) for x in cap.split("."))
    return GpuArch(
        cap, arch_list((major, minor)), names.pop() if len(names) == 1 else None, pool[0][4] or None
    )


def _is_capability(text: str) -> bool:
    """Whether nvidia-smi's compute_cap field is a capability ("9.0"; old drivers print "[N/A]")."""
    major, dot, minor = text.partition(".")
    return bool(dot) and major.isdigit() and minor.isdigit()


def _entries(visible: str) -> list[str]:
    """CUDA_VISIBLE_DEVICES's entries up to the first invalid one, as CUDA reads it ("" or "-1": none)."""
    out = []
    for e in visible.split(","):
        e = e.strip()
        if not e or e.startswith("-"):
            break
        out.append(e)
    return out


_PROBE = """
import json, sys
import torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
print(json.dumps([[torch.cuda.get_device_name(i), *torch.cuda.get_device_capability(i)] for i in range(n)]))
"""


def _from_probe_child(index: int | None) -> GpuArch | None:
    """torch's answer, from a child that starts CUDA (this process must not)."""
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
        found = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    pool = found if index is None else found[index : index + 1]
    caps = {(int(major), int(minor)) for _, major, minor in pool}
    if len(caps) != 1:
        return None
    (cap,) = caps
    names = {name for name, *_ in pool}
    return GpuArch(
        f"{cap[0]}.{cap[1]}", arch_list(cap), names.pop() if len(names) == 1 else None, _driver_version()
    )
