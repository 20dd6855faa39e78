"""`DeviceSpec`: the figures of an accelerator that the roofline cost model and the KV pool need.

A device is described by a YAML file (`profiler/device_file.py` holds the schema and the loader);
the built-ins are such files under `profiler/data/devices/`, each citing its datasheet. Figures
here are in SI units (FLOP/s, bytes/s, seconds); the files use TFLOPS, GB/s, µs and ms.

Peaks are **dense** tensor-core rates; NVIDIA's H100/H200 sheets headline the 2:4-sparse figure
(1,979 TFLOPS), which is twice the dense one.

Memory assumption: `memory_gib` is the marketed capacity read as GiB. On the 80 GB HBM parts the
device holds 80 GiB (nvidia-smi reports ≈80 GiB, within 1 %); on the others the marketed figure is
likewise taken as GiB. The KV pool (`memory.py`) uses `cuda_total_memory_gib`, cudaMemGetInfo's
smaller total (79.19 GiB on an H100-80GB, 23.65 on an RTX 4090; each built-in's file cites its
figure), and `memory_gib` for a device that gives none (`DeviceSpec.cuda_total_source` says which).

Interconnect assumption: `interconnect_bandwidth_bytes_per_s` is the **per-direction** bandwidth of
one GPU's link, i.e. half the bidirectional figure that datasheets print, because a ring
all-reduce sends and receives at the same time and is bound by one direction.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from profiler.device_file import (DEFAULT_GEMM_FLOPS_EFFICIENCY, DEFAULT_KERNEL_LATENCY_S,
                                  DEFAULT_MEMORY_BANDWIDTH_EFFICIENCY, DEFAULT_STEP_OVERHEAD_S,
                                  DEFAULT_SYNC_HOST_S_PER_SEQ,
                                  builtin_device_fields, device_fields_from_file,
                                  device_fields_from_mapping, looks_like_path)

@dataclass(frozen=True)
class AllReduceFit:
    """One all-reduce over `tp` GPUs: latency_s + 2 (tp − 1) / tp × bytes / (link bandwidth ×
    link_bandwidth_efficiency). Seconds and a fraction (may exceed 1 where vLLM's one-shot
    custom all-reduce beats the ring bound)."""

    latency_s: float
    link_bandwidth_efficiency: float


@dataclass(frozen=True)
class GemmFit:
    """A GEMM path's roofline: max(FLOPs / (peak × flops_efficiency), bytes / (bandwidth ×
    bandwidth_efficiency)) + latency_s (fractions, s)."""

    flops_efficiency: float
    bandwidth_efficiency: float
    latency_s: float


@dataclass(frozen=True)
class AttentionFit:
    """The attention kernel's roofline: max(FLOPs / (peak × flops_efficiency), bytes /
    (bandwidth × bandwidth_efficiency)) + latency_s + per_sequence_s × sequences (fractions, s)."""

    flops_efficiency: float
    bandwidth_efficiency: float
    latency_s: float
    per_sequence_s: float


@dataclass(frozen=True)
class DeviceSpec:
    """One accelerator: datasheet figures, and the roofline's efficiencies on it.

    Attributes:
        name: key, e.g. "h100-sxm".
        peak_bf16_flops: dense BF16 tensor-core peak, FLOP/s.
        mem_bandwidth_bytes_per_s: device memory (HBM/GDDR) bandwidth, bytes/s.
        memory_gib: device memory, GiB (see the module's memory assumption).
        interconnect_bandwidth_bytes_per_s: GPU-to-GPU link, per direction, bytes/s.
        interconnect_latency_s: fixed latency of one small all-reduce, s, where no per-TP fit
            (`all_reduce`) says otherwise.
        peak_fp8_flops: dense FP8 peak, FLOP/s; None where the tensor cores have no FP8 (Ampere).
        host_link_bandwidth_bytes_per_s: GPU-host link per direction (PCIe), bytes/s; prices KV
            swapping and KV offload loads and stores.
        host_memory_gib: host memory per GPU (the node's divided by its GPUs), GiB; bounds an
            `engine.kv_offload` CPU tier. None: not known (a tier is then an error).
        disk_bandwidth_bytes_per_s: local disk bandwidth, bytes/s, for a disk KV tier; None: not known.
        interconnect_kind: "nvlink", "pcie" or "xgmi" (AMD Infinity Fabric).
        gemm_flops_efficiency: fraction of the dense peak GEMMs and attention reach.
        memory_bandwidth_efficiency: fraction of the bandwidth memory-bound kernels reach.
        kernel_latency_s: fixed time every kernel launch adds (s).
        step_overhead_s: host time per step outside the kernels (s).
        sync_host_s_per_seq: host time per running sequence per step that a synchronous vLLM V1
            engine's GPU waits for (s; `experiments.deployment.host_s_per_seq`).
        fp8_gemm: the FP8 GEMM path's own terms (None: the BF16 GEMM terms at the FP8 peak).
        attention: the attention kernel's own terms (None: the GEMM efficiency, memory
            bandwidth efficiency and kernel latency, no per-sequence cost).
        all_reduce: per TP degree, the fitted all-reduce terms (empty: the link figures with
            efficiency 1).
        source: where the datasheet figures come from (a file, "inline", a built-in's sheet).
        efficiency_source: where the efficiencies come from ("assumed defaults", a fit, a file).
        base: the built-in this device was derived from (a device file's `base:`), else None.
        cuda_total_memory_gib: cudaMemGetInfo's total, GiB, what vLLM's gpu_memory_utilization is
            a fraction of (None: not known, `memory_gib` stands in).
    """

    name: str
    peak_bf16_flops: float
    mem_bandwidth_bytes_per_s: float
    memory_gib: float
    interconnect_bandwidth_bytes_per_s: float
    interconnect_latency_s: float
    peak_fp8_flops: float | None = None
    host_link_bandwidth_bytes_per_s: float = 32e9
    interconnect_kind: str = "nvlink"
    gemm_flops_efficiency: float = DEFAULT_GEMM_FLOPS_EFFICIENCY
    memory_bandwidth_efficiency: float = DEFAULT_MEMORY_BANDWIDTH_EFFICIENCY
    kernel_latency_s: float = DEFAULT_KERNEL_LATENCY_S
    step_overhead_s: float = DEFAULT_STEP_OVERHEAD_S
    sync_host_s_per_seq: float = DEFAULT_SYNC_HOST_S_PER_SEQ
    fp8_gemm: GemmFit | None = None
    attention: AttentionFit | None = None
    all_reduce: tuple[tuple[int, AllReduceFit], ...] = ()  # (tp, fit) pairs: keeps the spec hashable
    source: str = ""
    efficiency_source: str = "assumed defaults"
    host_memory_gib: float | None = None
    disk_bandwidth_bytes_per_s: float | None = None
    base: str | None = None
    cuda_total_memory_gib: float | None = None

    @property
    def card(self) -> str:
        """The built-in card this device is: its `base` when derived from one, else its name. It
        selects the measured tables (`cost_model: auto`), the SM count and the tensor-parallel
        non-torch memory (`profiler.memory`) — what a derived device keeps from its built-in."""
        return self.base or self.name

    @property
    def cuda_total_source(self) -> str:
        """Where the KV pool's total memory comes from, for reports: the CUDA-visible figure, or
        the marketed `memory_gib` standing in for it (then the pool may be ~1–8 % too large)."""
        if self.cuda_total_memory_gib is not None:
            return f"CUDA-visible total {self.cuda_total_memory_gib:g} GiB"
        return (f"memory_gib {self.memory_gib:g} (no CUDA-visible total known for {self.name}: the pool "
                "may be a few % too large; give cuda_total_memory_gib in a device file)")

    def peak_flops(self, dtype_bytes: int) -> float:
        """Dense tensor-core peak (FLOP/s) for GEMMs whose operands are `dtype_bytes` wide.

        FP8 (1 byte) uses `peak_fp8_flops` where the device has it; without FP8 tensor cores
        (A100, A40) vLLM runs FP8 weights as weight-only and computes in BF16, so the BF16 peak.
        """
        if dtype_bytes == 1 and self.peak_fp8_flops is not None:
            return self.peak_fp8_flops
        return self.peak_bf16_flops

    def all_reduce_terms(self, tp: int) -> AllReduceFit:
        """(latency_s, link bandwidth efficiency) of one all-reduce over `tp` GPUs: the fit for
        that TP degree when there is one, else the link's latency at full link bandwidth."""
        fit = dict(self.all_reduce).get(tp)
        return fit if fit is not None else AllReduceFit(self.interconnect_latency_s, 1.0)

    def gemm_terms(self, dtype_bytes: int) -> GemmFit:
        """The GEMM terms for operands `dtype_bytes` wide: the FP8 fit for 1-byte weights where
        there is one (vLLM quantises the activations too: an extra pass and launch), else the
        BF16 terms."""
        if dtype_bytes == 1 and self.fp8_gemm is not None:
            return self.fp8_gemm
        return GemmFit(self.gemm_flops_efficiency, self.memory_bandwidth_efficiency, self.kernel_latency_s)

    def attention_terms(self) -> AttentionFit:
        """The attention kernel's terms: the fit where there is one, else the GEMM terms."""
        if self.attention is not None:
            return self.attention
        return AttentionFit(self.gemm_flops_efficiency, self.memory_bandwidth_efficiency, self.kernel_latency_s, 0.0)

    def describe(self) -> dict[str, Any]:
        """The figures a point was priced with, in the units of a device file, for reports.

        Returns a flat JSON-ready dict: name, base, memory_gib, cuda_total_memory_gib, dense_bf16_tflops, dense_fp8_tflops
        (None without FP8), memory_bandwidth_gb_per_s, gpu_link (kind, gb_per_s_per_direction,
        latency_us), host_link_gb_per_s_per_direction, gemm_flops_efficiency,
        memory_bandwidth_efficiency, kernel_latency_us, fp8_gemm (flops_efficiency,
        bandwidth_efficiency, latency_us), attention (flops_efficiency,
        bandwidth_efficiency, latency_us, per_sequence_us), step_overhead_ms, sync_host_us_per_seq, all_reduce (per TP:
        latency_us, link_bandwidth_efficiency), source, efficiency_source.
        """
        attention, fp8 = self.attention_terms(), self.gemm_terms(1)
        return {
            "name": self.name,
            "base": self.base,
            "memory_gib": self.memory_gib,
            "cuda_total_memory_gib": self.cuda_total_memory_gib,
            "dense_bf16_tflops": self.peak_bf16_flops / 1e12,
            "dense_fp8_tflops": None if self.peak_fp8_flops is None else self.peak_fp8_flops / 1e12,
            "memory_bandwidth_gb_per_s": self.mem_bandwidth_bytes_per_s / 1e9,
            "gpu_link": {"kind": self.interconnect_kind,
                         "gb_per_s_per_direction": self.interconnect_bandwidth_bytes_per_s / 1e9,
                         "latency_us": self.interconnect_latency_s * 1e6},
            "host_link_gb_per_s_per_direction": self.host_link_bandwidth_bytes_per_s / 1e9,
            "gemm_flops_efficiency": self.gemm_flops_efficiency,
            "memory_bandwidth_efficiency": self.memory_bandwidth_efficiency,
            "kernel_latency_us": self.kernel_latency_s * 1e6,
            "fp8_gemm": {"flops_efficiency": fp8.flops_efficiency, "bandwidth_efficiency": fp8.bandwidth_efficiency,
                         "latency_us": fp8.latency_s * 1e6},
            "attention": {"flops_efficiency": attention.flops_efficiency,
                          "bandwidth_efficiency": attention.bandwidth_efficiency,
                          "latency_us": attention.latency_s * 1e6, "per_sequence_us": attention.per_sequence_s * 1e6},
            "step_overhead_ms": self.step_overhead_s * 1e3,
            "sync_host_us_per_seq": self.sync_host_s_per_seq * 1e6,
            "all_reduce": {str(tp): {"latency_us": fit.latency_s * 1e6,
                                     "link_bandwidth_efficiency": fit.link_bandwidth_efficiency}
                           for tp, fit in self.all_reduce},
            "source": self.source,
            "efficiency_source": self.efficiency_source,
        }


def _spec(fields: dict[str, Any]) -> DeviceSpec:
    """A DeviceSpec from the SI fields `profiler.device_file` returns."""
    all_reduce = tuple((tp, AllReduceFit(*terms)) for tp, terms in sorted(fields.pop("all_reduce", {}).items()))
    attention, fp8_gemm = fields.pop("attention", None), fields.pop("fp8_gemm", None)
    return DeviceSpec(**fields, all_reduce=all_reduce, attention=None if attention is None else AttentionFit(*attention),
                      fp8_gemm=None if fp8_gemm is None else GemmFit(*fp8_gemm))


BUILTIN_DEVICES: dict[str, DeviceSpec] = {name: _spec(fields) for name, fields in builtin_device_fields().items()}


def get_device_spec(device: str | Path | Mapping[str, Any] | DeviceSpec,
                    base_dir: str | Path | None = None) -> DeviceSpec:
    """The `DeviceSpec` a config's `device:` value names.

    Args:
        device: a built-in name (`BUILTIN_DEVICES`), a path to a device YAML file (schema:
            `profiler/device_file.py`; relative paths against `base_dir`, else the working
            directory), an inline mapping with the same keys, or a `DeviceSpec` (returned as is).
        base_dir: folder relative paths are read from (the config file's folder).

    Raises:
        ValueError: an unknown name that is no file (the message lists the built-ins), or a file
            or mapping that fails validation (the message names the file and the key).
    """
    if isinstance(device, DeviceSpec):
        return device
    if isinstance(device, Mapping):
        return _not_a_builtin_in_disguise(_spec(device_fields_from_mapping(device, where="device (inline)")),
                                          "device.name")
    text = str(device)
    if text in BUILTIN_DEVICES:
        return BUILTIN_DEVICES[text]
    if looks_like_path(text):
        path = Path(text).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        return _not_a_builtin_in_disguise(_spec(device_fields_from_file(path)), f"{path}: name")
    raise ValueError(f"unknown device {text!r}; built-in devices are {sorted(BUILTIN_DEVICES)}, "
                     "or give a device YAML file (*.yaml) or an inline mapping")


# DeviceSpec fields that say where figures come from, not what they are.
_PROVENANCE = ("source", "efficiency_source")


def _not_a_builtin_in_disguise(spec: DeviceSpec, key: str) -> DeviceSpec:
    """`spec`, unless it takes a built-in's name with other figures. A device's name selects more
    than its label: the built-in's SM count and non-torch memory (`profiler.memory`), its shipped measured tables (`cost_model: auto`,
    `profiler.measured.shipped.shipped_sources`) and the profiles measured on it, so a custom
    device under a built-in's name would be priced and sized as the built-in, its own figures
    silently ignored. The same figures (a copy of the built-in's file) are the built-in.

    Raises:
        ValueError: naming `key`, the figures that differ (file units) and what to do instead.
    """
    builtin = BUILTIN_DEVICES.get(spec.name)
    if builtin is None:
        return spec
    mine, theirs = _figures(spec.describe()), _figures(builtin.describe())
    keys = [k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)]
    if not keys:
        return builtin
    differ = [f"{k} {_figure(mine.get(k))} (built-in: {_figure(theirs.get(k))})" for k in sorted(keys)
              if not _is_efficiency(k)]
    if any(_is_efficiency(k) for k in keys):
        differ.append(f"efficiency (the built-in's: {builtin.efficiency_source})")
    raise ValueError(f"{key}: {spec.name!r} is the name of a built-in device, whose figures differ from these: "
                     f"{'; '.join(differ)}. The name selects the built-in's KV memory and measured tables, so "
                     f"pick another name for this device (e.g. my-{spec.name}; with base: {spec.name} to keep "
                     f"its measured tables and change only the keys you give), or use the built-in by name "
                     f"(device: {spec.name})")


def _figure(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _is_efficiency(key: str) -> bool:
    """A flattened `describe()` key of the roofline's efficiencies (a device file's `efficiency:`)."""
    return key in ("gemm_flops_efficiency", "memory_bandwidth_efficiency", "kernel_latency_us") \
        or key.startswith(("fp8_gemm.", "attention.", "all_reduce."))


def _figures(described: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """`DeviceSpec.describe()` flattened to dotted keys, without the name and `_PROVENANCE`."""
    flat: dict[str, Any] = {}
    for key, value in described.items():
        if not prefix and key in ("name", *_PROVENANCE):
            continue
        if isinstance(value, dict):
            flat.update(_figures(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
