"""The hardware and software record stored with every result."""

from __future__ import annotations

import platform
import subprocess

import torch
from kb_agent.evaluator.result import HardwareInfo


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
