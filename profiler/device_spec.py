"""`DeviceSpec`: the datasheet figures of an accelerator that a roofline cost model needs.

Figures are from REFERENCE.md §5 (NVIDIA datasheets). Peaks are **dense** tensor-core rates;
NVIDIA's H100/H200 sheets headline the 2:4-sparse figure (1,979 TFLOPS), which is twice the dense one.

Memory assumption: `memory_gib` is the marketed capacity read as GiB. On the 80 GB HBM parts the
device holds 80 GiB (nvidia-smi reports ≈80 GiB, within 1 %); on the others the marketed figure is
likewise taken as GiB. The fixed runtime reserve in `memory.py` absorbs the difference.

Interconnect assumption: `interconnect_bandwidth_bytes_per_s` is the **per-direction** bandwidth of
one GPU's link, i.e. half the bidirectional figure that datasheets print, because a ring
all-reduce sends and receives at the same time and is bound by one direction. The latency is an
assumption (no datasheet gives it): about 10 µs for a small all-reduce over NVLink and 20 µs over
PCIe, to be replaced by a measured profile (issue "Calibration").
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator's datasheet figures.

    Attributes:
        name: built-in key, e.g. "h100-sxm".
        peak_bf16_flops: dense BF16 tensor-core peak, FLOP/s.
        mem_bandwidth_bytes_per_s: device memory (HBM/GDDR) bandwidth, bytes/s.
        memory_gib: device memory, GiB (see the module's memory assumption).
        interconnect_bandwidth_bytes_per_s: GPU-to-GPU link, per direction, bytes/s.
        interconnect_latency_s: fixed latency of one small all-reduce, s (assumption).
        peak_fp8_flops: dense FP8 peak, FLOP/s; None where the tensor cores have no FP8 (Ampere).
        host_link_bandwidth_bytes_per_s: GPU-host link per direction (PCIe), bytes/s; prices KV
            swapping. PCIe Gen4 x16 is 64 GB/s bidirectional (32 per direction: A100, L40S, A40);
            Gen5 x16 128 GB/s (64: H100 SXM, H200), from the same datasheets.
    """

    name: str
    peak_bf16_flops: float
    mem_bandwidth_bytes_per_s: float
    memory_gib: float
    interconnect_bandwidth_bytes_per_s: float
    interconnect_latency_s: float
    peak_fp8_flops: float | None = None
    host_link_bandwidth_bytes_per_s: float = 32e9

    def peak_flops(self, dtype_bytes: int) -> float:
        """Dense tensor-core peak (FLOP/s) for GEMMs whose operands are `dtype_bytes` wide.

        FP8 (1 byte) uses `peak_fp8_flops` where the device has it; without FP8 tensor cores
        (A100, A40) vLLM runs FP8 weights as weight-only and computes in BF16, so the BF16 peak.
        """
        if dtype_bytes == 1 and self.peak_fp8_flops is not None:
            return self.peak_fp8_flops
        return self.peak_bf16_flops


_NVLINK_LATENCY_S = 10e-6  # assumption, see module docstring
_PCIE_LATENCY_S = 20e-6  # assumption, see module docstring

BUILTIN_DEVICES: dict[str, DeviceSpec] = {
    spec.name: spec
    for spec in (
        # A100 SXM 80GB datasheet: 312 TFLOPS BF16 dense, 2,039 GB/s HBM2e, NVLink3 600 GB/s
        # bidirectional. No FP8 tensor cores.
        DeviceSpec("a100-80gb", 312e12, 2.039e12, 80, 300e9, _NVLINK_LATENCY_S),
        # H100 SXM datasheet: 1,979 TFLOPS BF16 *with sparsity* -> 989.5 dense, 3.35 TB/s HBM3,
        # NVLink4 900 GB/s bidirectional. FP8 dense = 2 x BF16 dense (3,958 sparse / 2).
        DeviceSpec("h100-sxm", 989.5e12, 3.35e12, 80, 450e9, _NVLINK_LATENCY_S, 1979e12, 64e9),
        # H200 SXM datasheet: same compute as H100 SXM, 141 GB HBM3e at 4.8 TB/s, NVLink4 900 GB/s.
        DeviceSpec("h200", 989.5e12, 4.8e12, 141, 450e9, _NVLINK_LATENCY_S, 1979e12, 64e9),
        # L40S datasheet: 362 TFLOPS BF16 dense (733 sparse), 48 GB GDDR6 at 864 GB/s, PCIe4 x16
        # 64 GB/s bidirectional, no NVLink. Ada FP8 dense = 2 x BF16 dense.
        DeviceSpec("l40s", 362e12, 864e9, 48, 32e9, _PCIE_LATENCY_S, 724e12),
        # A40 datasheet: 149.7 TFLOPS BF16 dense (299.4 sparse), 48 GB GDDR6 at 696 GB/s, NVLink
        # bridge 112.5 GB/s bidirectional (pairs of GPUs). Ampere: no FP8 tensor cores.
        DeviceSpec("a40", 149.7e12, 696e9, 48, 56.25e9, _NVLINK_LATENCY_S),
    )
}


def get_device_spec(name: str) -> DeviceSpec:
    """The built-in `DeviceSpec` called `name`.

    Raises:
        ValueError: unknown name; the message lists the valid ones.
    """
    if name not in BUILTIN_DEVICES:
        raise ValueError(f"unknown device {name!r}; built-in devices are {sorted(BUILTIN_DEVICES)}")
    return BUILTIN_DEVICES[name]
