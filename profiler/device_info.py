"""What a profile was measured on: device name and memory, library versions, and the device's
measured GEMM and copy rates (the scale of the fitted model's roofline features).

torch is imported lazily (only when a profile is taken).
"""
from __future__ import annotations

import platform
import re
import subprocess
import sys
from pathlib import Path

from profiler.device_spec import BUILTIN_DEVICES
from profiler.timing import cuda_event_clock, host_clock, thread_cpu_clock, time_op

# `torch.cuda.get_device_name()` patterns -> built-in DeviceSpec (datasheet figures), most specific
# first: "L4" must not match an L40S, nor "A100" a PCIe A100 (another bandwidth, no NVLink).
_GPU_NAMES = (
    (r"H200", "h200"), (r"H100 PCIe", "h100-pcie"), (r"H100 80GB HBM3|H100 SXM", "h100-sxm"),
    (r"A100-SXM4-80GB", "a100-80gb"), (r"A100-SXM4-40GB", "a100-40gb"), (r"\bB200\b", "b200"),
    (r"\bL40S\b", "l40s"), (r"\bL4\b", "l4"), (r"\bA40\b", "a40"), (r"RTX 4090", "rtx-4090"),
    (r"RTX PRO 6000 Blackwell Server", "rtx-pro-6000"), (r"MI300X", "mi300x"),
)


def builtin_spec_name(device_name: str) -> str | None:
    """The built-in `DeviceSpec` key for a CUDA device name ("NVIDIA H100 80GB HBM3" →
    "h100-sxm"), or None when none matches (the CPU, unknown GPUs, variants without a built-in
    such as the A100 PCIe or H100 NVL)."""
    for pattern, key in _GPU_NAMES:
        if re.search(pattern, device_name):
            return key
    return None


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True)
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def _cpu_name_and_memory_gib() -> tuple[str, float]:
    name = platform.processor() or platform.machine()
    cpuinfo, meminfo = Path("/proc/cpuinfo"), Path("/proc/meminfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    memory_gib = float("nan")
    if meminfo.exists():
        first = meminfo.read_text().splitlines()[0]  # "MemTotal:  24552116 kB"
        memory_gib = int(first.split()[1]) / 2**20
    return name, memory_gib


def describe_device(device_kind: str) -> dict:
    """Name, memory and versions of the device a profile runs on, for the sidecar JSON.

    Returns:
        {"kind", "name", "memory_gib", "spec_name", "num_threads", "versions": {...}}; versions
        are python, numpy, scikit-learn, torch, triton (None when absent), CUDA and driver (CUDA
        only).
    """
    import numpy
    import sklearn
    import torch

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    versions = {"python": sys.version.split()[0], "numpy": numpy.__version__,
                "scikit-learn": sklearn.__version__, "torch": torch.__version__, "triton": triton_version}
    if device_kind == "cuda":
        props = torch.cuda.get_device_properties(0)
        name, memory_gib = props.name, props.total_memory / 2**30
        versions.update(cuda=torch.version.cuda, driver=_nvidia_driver())
    else:
        name, memory_gib = _cpu_name_and_memory_gib()
    return {"kind": device_kind, "name": name, "memory_gib": memory_gib,
            "spec_name": builtin_spec_name(name) if device_kind == "cuda" else None,
            "num_threads": torch.get_num_threads(), "versions": versions}


def measure_rates(device_kind: str, dtype_name: str) -> dict:
    """Measured GEMM FLOP/s and memory copy bytes/s of the device, in the profile's dtype.

    A square GEMM (1,024 on the CPU, 8,192 on CUDA: 2 n³ FLOPs) and a copy of a 64 MiB (CPU) or
    1 GiB (CUDA) buffer (read + write = 2 × size bytes), each timed with `time_op`. On a GPU with
    a built-in spec the datasheet peaks are used for the features instead (`rates_source`), so
    profiles of one GPU kind share a scale; these measured figures are recorded beside them.

    Returns:
        {"peak_flops", "mem_bandwidth_bytes_per_s", "measured_flops", "measured_bandwidth_bytes_per_s",
         "rates_source"}.
    """
    import torch

    dtype = getattr(torch, dtype_name)
    cuda = device_kind == "cuda"
    n, copy_bytes = (8192, 1 << 30) if cuda else (1024, 64 << 20)
    clock = cuda_event_clock if cuda else (thread_cpu_clock if torch.get_num_threads() == 1 else host_clock)
    a = torch.randn(n, n, device=device_kind).to(dtype)
    gemm = time_op(lambda: a @ a, clock, num_samples=3)
    src = torch.empty(copy_bytes // a.element_size(), device=device_kind, dtype=dtype).fill_(1)
    dst = torch.empty_like(src)
    copy = time_op(lambda: dst.copy_(src), clock, num_samples=3)
    measured_flops = 2.0 * n**3 / gemm.median_s
    measured_bw = 2.0 * copy_bytes / copy.median_s
    spec = BUILTIN_DEVICES.get(builtin_spec_name(torch.cuda.get_device_name(0)) or "") if cuda else None
    if spec is not None:
        return {"peak_flops": spec.peak_bf16_flops, "mem_bandwidth_bytes_per_s": spec.mem_bandwidth_bytes_per_s,
                "measured_flops": measured_flops, "measured_bandwidth_bytes_per_s": measured_bw,
                "rates_source": f"datasheet ({spec.name})"}
    return {"peak_flops": measured_flops, "mem_bandwidth_bytes_per_s": measured_bw,
            "measured_flops": measured_flops, "measured_bandwidth_bytes_per_s": measured_bw,
            "rates_source": "measured"}
