"""Device YAML files: the schema, its validation, and the built-ins under `profiler/data/devices/`.

A device file (or an inline `device:` mapping in a config) in datasheet units:

    name: my-l40s                      # required; a built-in's name only with its figures
    description: NVIDIA L40S 48 GB     # optional, free text
    memory_gib: 48
    cuda_total_memory_gib: 44.53       # optional: cudaMemGetInfo's total (what vLLM sizes its pool
                                       #   from); absent: memory_gib
    dense_bf16_tflops: 362             # dense tensor-core peak (not the 2:4-sparse headline)
    dense_fp8_tflops: 724              # null or absent: no FP8 tensor cores (BF16 peak used)
    memory_bandwidth_gb_per_s: 864
    gpu_link: {kind: pcie, gb_per_s_per_direction: 32, latency_us: 20}   # kind nvlink|pcie|xgmi
    host_link: {gb_per_s_per_direction: 32}
    host_memory_gib: 256               # optional: host memory per GPU (the node's / its GPUs), sizes engine.kv_offload
    disk_gb_per_s: 6                   # optional: local disk read/write bandwidth, for a disk KV tier
    efficiency:                        # optional; absent = the assumed defaults;
      gemm_flops: 0.6                  #   `fitted` = the shipped fit for this name
      memory_bandwidth: 0.8
      kernel_latency_us: 3
      fp8_gemm: {flops: 0.5, memory_bandwidth: 0.5, kernel_latency_us: 6}   # FP8 weights' GEMMs
      attention: {flops: 0.5, memory_bandwidth: 0.7, latency_us: 8, per_sequence_us: 0.2}
      all_reduce: {2: {latency_us: 9, link_bandwidth: 0.6}}   # per TP degree, optional
    step_overhead_ms: 0.5              # optional host time per step
    sync_host_us_per_seq: 49           # optional: a synchronous vLLM V1 engine's host time per sequence a step
    sources: ["datasheet URL or title"]

A device may instead start from a built-in and change a few keys, keeping the built-in's measured
kernel tables, SM count and CUDA-visible memory (`DeviceSpec.card`):

    name: my-h100                      # required, not a built-in's name
    base: h100-sxm                     # a built-in (profiler/data/devices/<base>.yaml)
    step_overhead_ms: 0.9              # e.g. a slower host: the measured tables' host time per step
    cuda_total_memory_gib: 78.5        # e.g. memory another process holds

Keys not given are the built-in's. The kernel rates its tables were measured at (`BASE_FIXED_KEYS`:
peaks, memory bandwidth, GPU link) cannot be changed under `base:` (a card with other rates is
another device: describe it without `base:`), nor can `memory_gib` exceed the built-in's (no card of
that kind has more); `cuda_total_memory_gib` never exceeds `memory_gib`. Giving `memory_gib` without
`cuda_total_memory_gib` makes `memory_gib` the CUDA-visible total.

GB is 10^9 bytes and TFLOPS 10^12 FLOP/s, as datasheets print them. Every key is checked; an
unknown or bad key is a `ValueError` naming the file (or "device (inline)"), the key path and,
for an unknown key, the valid ones. A device named like a built-in must have the built-in's figures
(`profiler.device_spec.get_device_spec`: the name selects its KV memory and measured tables).

The fitted efficiencies (`profiler/data/roofline_fits.yaml`) come from `profiler/roofline_fit.py`
over AIConfigurator's measured vLLM tables; that file cites their source, licence and engine.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from profiler.unknown_key import unknown_key_message

DATA_DIR = Path(__file__).resolve().parent / "data"
DEVICES_DIR = DATA_DIR / "devices"
FITS_FILE = DATA_DIR / "roofline_fits.yaml"

# Defaults for a device whose file gives no efficiencies. Assumptions, not measurements:
# - 60 % of the dense tensor-core peak for GEMMs and 80 % of the datasheet bandwidth for
#   memory-bound kernels: the roofline's constants before the fits [recall, not measured]; the
#   fitted devices span 0.64-0.76 and 0.64-0.82 (profiler/data/roofline_fits.yaml).
# - 3 µs per kernel: AIConfigurator's `mem_empirical_constant_latency` in each of its
#   system.yaml files (ai-dynamo/aiconfigurator, Apache-2.0); the fits give 2.3-4.5 µs.
# - 0.5 ms of host work per step outside the kernels (scheduling, input preparation).
# - 49 µs of host work per running sequence per step in vLLM V1 without async scheduling (the
#   scheduler, input preparation and output processing of each request, which the GPU waits for):
#   the handed H100 grid (ai-dynamo/aiconfigurator silicon_sample.csv 095f58a, vLLM 0.12, Qwen3-32B),
#   whose decode-dominated points (ISL 1024, OSL 1024) exceed the kernel-priced TPOT by 0.67 / 1.51 /
#   2.06 / 3.35 / 6.54 ms at 8 / 16 / 32 / 64 / 128 clients, the same at TP 2, 4 and 8 (host, not
#   GPU, time): 49 µs a sequence (benchmarks/bench_h100_grid.py, BENCHMARKS.md).
DEFAULT_GEMM_FLOPS_EFFICIENCY = 0.6
DEFAULT_MEMORY_BANDWIDTH_EFFICIENCY = 0.8
DEFAULT_KERNEL_LATENCY_S = 3e-6
DEFAULT_STEP_OVERHEAD_S = 0.5e-3
DEFAULT_SYNC_HOST_S_PER_SEQ = 49e-6
# One small all-reduce when the file gives no latency: about 10 µs over NVLink/xGMI and 20 µs
# over PCIe (assumptions; vLLM's graph-mode custom all-reduce measures 4-9 µs on small messages
# in the AIConfigurator tables, profiler/data/roofline_fits.yaml).
DEFAULT_LINK_LATENCY_US = {"nvlink": 10.0, "xgmi": 10.0, "pcie": 20.0}

_Positive = Field(gt=0, allow_inf_nan=False)

# Physical bounds of a device's figures (issue 30): a figure beyond them is an error naming the key,
# the largest real card and the bound, not a number that sizes a KV pool of 10^17 blocks
# (memory_gib 1e12 was OOM-killed at 24 GB) or makes every step's time inf (bandwidth 1e-305).
# The largest cards shipping (2025): NVIDIA B300 and AMD Instinct MI355X, 288 GB (268 GiB) of
# HBM3E at 8,000 GB/s, MI355X ~2,500 dense BF16 and ~5,000 dense FP8 TFLOPS, NVLink 5 at
# 900 GB/s per direction, PCIe 6.0 x16 at 128 GB/s (vendors' datasheets [recall; the shipped
# b200.yaml, 180 GiB / 7,700 GB/s / 2,250 / 4,500 TFLOPS, is the largest card with a file here]).
# The upper bounds are about ten times those (what-if devices fit); the lower ones a tenth or less of
# the slowest host described as a device (tests/data/engine/tiny_engine.yaml: a CPU at 0.0688
# TFLOPS and 12.4 GB/s). Each: (low, high, the largest real card's figure as the error says it).
# Efficiencies are fractions of those peaks: at least 0.1 % (the fits span 0.07-1; a fraction of
# 1e-305 divided into a step's FLOPs is inf), and a latency is at most 1 s a call (a step is ms).
_MIN_FRACTION = 0.001
_MAX_LATENCY_US = 1e6
FIGURE_BOUNDS: dict[str, tuple[float, float, str]] = {
    "memory_gib": (0.0625, 4096.0, "268 GiB (288 GB) on B300 / MI355X"),
    "dense_bf16_tflops": (0.001, 25_000.0, "~2,500 on MI355X"),
    "dense_fp8_tflops": (0.001, 50_000.0, "~5,000 on MI355X"),
    "memory_bandwidth_gb_per_s": (1.0, 80_000.0, "8,000 on B300 / MI355X"),
    "gpu_link.gb_per_s_per_direction": (0.1, 10_000.0, "900 for NVLink 5"),
    "host_link.gb_per_s_per_direction": (0.1, 2_000.0, "128 for PCIe 6.0 x16"),
}


def check_figure(key: str, value: float | None) -> float | None:
    """`value` of the device figure `key` (a `FIGURE_BOUNDS` key), or ValueError naming the bounds
    and the largest real card's figure."""
    low, high, largest = FIGURE_BOUNDS[key]
    if value is not None and not low <= value <= high:
        raise ValueError(f"outside what a real device has: give {low:g} to {high:g} (the largest real card has "
                         f"{largest}); check the unit in the key's name")
    return value


class _Strict(BaseModel):
    # strict: YAML `true` is not the number 1, nor the text "1e3" (PyYAML reads exponents without
    # a dot as strings) a number; both are errors naming the key.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class GpuLink(_Strict):
    """GPU-to-GPU link of one GPU: kind, per-direction GB/s, small all-reduce latency (µs)."""

    kind: Literal["nvlink", "pcie", "xgmi"]
    gb_per_s_per_direction: float = _Positive
    latency_us: float | None = Field(default=None, gt=0, le=_MAX_LATENCY_US, allow_inf_nan=False)

    @field_validator("gb_per_s_per_direction")
    @classmethod
    def _physical(cls, value: float) -> float:
        return check_figure("gpu_link.gb_per_s_per_direction", value)


class HostLink(_Strict):
    """GPU-host link (PCIe) per direction, GB/s."""

    gb_per_s_per_direction: float = _Positive

    @field_validator("gb_per_s_per_direction")
    @classmethod
    def _physical(cls, value: float) -> float:
        return check_figure("host_link.gb_per_s_per_direction", value)


class AllReduceTerms(_Strict):
    """One TP degree's all-reduce: latency (µs) and the fraction of the ring bound's bandwidth."""

    latency_us: float = Field(ge=0, le=_MAX_LATENCY_US, allow_inf_nan=False)
    link_bandwidth: float = Field(ge=_MIN_FRACTION, le=2, allow_inf_nan=False)


class GemmTerms(_Strict):
    """A GEMM path's own roofline terms: fractions of the peaks and a latency per call (µs)."""

    flops: float = Field(ge=_MIN_FRACTION, le=1, allow_inf_nan=False)
    memory_bandwidth: float = Field(ge=_MIN_FRACTION, le=1, allow_inf_nan=False)
    kernel_latency_us: float = Field(ge=0, le=_MAX_LATENCY_US, allow_inf_nan=False)


class AttentionTerms(_Strict):
    """The attention kernel's own roofline terms: fractions of the peaks, a latency per call (µs)
    and a cost per sequence in the batch (µs: block-table walks, whole KV blocks read)."""

    flops: float = Field(ge=_MIN_FRACTION, le=1, allow_inf_nan=False)
    memory_bandwidth: float = Field(ge=_MIN_FRACTION, le=1, allow_inf_nan=False)
    latency_us: float = Field(ge=0, le=_MAX_LATENCY_US, allow_inf_nan=False)
    per_sequence_us: float = Field(default=0.0, ge=0, le=_MAX_LATENCY_US, allow_inf_nan=False)


class Efficiency(_Strict):
    """Fractions of the datasheet peaks, and latencies; each optional (default: the assumption;
    fp8_gemm absent: FP8 GEMMs at the BF16 GEMM terms; attention absent: the GEMM terms, no
    per-sequence cost)."""

    gemm_flops: float = Field(default=DEFAULT_GEMM_FLOPS_EFFICIENCY, ge=_MIN_FRACTION, le=1, allow_inf_nan=False)
    memory_bandwidth: float = Field(default=DEFAULT_MEMORY_BANDWIDTH_EFFICIENCY, ge=_MIN_FRACTION, le=1,
                                    allow_inf_nan=False)
    kernel_latency_us: float = Field(default=round(DEFAULT_KERNEL_LATENCY_S * 1e6, 9), ge=0, le=_MAX_LATENCY_US,
                                     allow_inf_nan=False)
    fp8_gemm: GemmTerms | None = None
    attention: AttentionTerms | None = None
    all_reduce: dict[int, AllReduceTerms] = {}

    @model_validator(mode="after")
    def _tp_degrees(self) -> "Efficiency":
        bad = [tp for tp in self.all_reduce if tp < 2]
        if bad:
            raise ValueError(f"all_reduce: TP degrees must be >= 2, got {bad}")
        return self


class FittedEfficiency(Efficiency):
    """One device's entry in `roofline_fits.yaml`: the efficiencies plus where they come from."""

    system: str
    engine: str
    error: dict[str, float] = {}


class DeviceFile(_Strict):
    """The whole device file (see the module docstring for the keys and units)."""

    name: str = Field(min_length=1)
    base: str | None = None
    description: str = ""
    memory_gib: float = _Positive
    cuda_total_memory_gib: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    dense_bf16_tflops: float = _Positive
    dense_fp8_tflops: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    memory_bandwidth_gb_per_s: float = _Positive
    gpu_link: GpuLink
    host_link: HostLink
    host_memory_gib: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    disk_gb_per_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    efficiency: Efficiency | Literal["fitted"] = Efficiency()
    step_overhead_ms: float = Field(default=round(DEFAULT_STEP_OVERHEAD_S * 1e3, 9), ge=0, le=_MAX_LATENCY_US / 1e3,
                                    allow_inf_nan=False)
    sync_host_us_per_seq: float = Field(default=round(DEFAULT_SYNC_HOST_S_PER_SEQ * 1e6, 9), ge=0, le=10_000,
                                        allow_inf_nan=False)
    sources: list[str] = []

    @field_validator("memory_gib", "dense_bf16_tflops", "dense_fp8_tflops", "memory_bandwidth_gb_per_s")
    @classmethod
    def _physical(cls, value: float | None, info) -> float | None:
        return check_figure(info.field_name, value)

    @model_validator(mode="after")
    def _cuda_total_within_memory(self) -> "DeviceFile":
        if self.cuda_total_memory_gib is not None and self.cuda_total_memory_gib > self.memory_gib:
            raise ValueError(f"cuda_total_memory_gib ({self.cuda_total_memory_gib:g}) exceeds memory_gib "
                             f"({self.memory_gib:g}): the CUDA-visible total is part of the card's memory")
        return self


# What a device with `base:` keeps from its built-in: the rates its measured tables were taken at.
BASE_FIXED_KEYS = ("dense_bf16_tflops", "dense_fp8_tflops", "memory_bandwidth_gb_per_s", "gpu_link")


def looks_like_path(value: str) -> bool:
    """True for a `device:` string meant as a file: ends in .yaml/.yml or holds a '/'."""
    return value.endswith((".yaml", ".yml")) or "/" in value


def device_fields_from_file(path: Path) -> dict[str, Any]:
    """The `DeviceSpec` fields (SI units) of the device YAML file at `path`.

    Raises:
        ValueError: the file is missing, not YAML, not a mapping, or fails validation (the
            message names the file and the key).
    """
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ValueError(f"device file {path}: cannot read it ({exc.strerror})") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"device file {path}: not valid YAML: {exc}") from None
    return device_fields_from_mapping(raw, where=str(path), source=str(path))


def device_fields_from_mapping(raw: Any, where: str, source: str | None = None) -> dict[str, Any]:
    """The `DeviceSpec` fields (SI units) of one device description.

    Args:
        raw: the parsed YAML mapping.
        where: how errors name it (a file path, or "device (inline)").
        source: recorded as the spec's `source` (default: the mapping's `sources`, else `where`).

    Raises:
        ValueError: "<where>: <key path>: <problem>" for every key that fails, one per line.
    """
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: a device is a mapping of keys (name, memory_gib, dense_bf16_tflops, "
                         f"memory_bandwidth_gb_per_s, gpu_link, host_link, ...), got {type(raw).__name__}")
    base = raw.get("base")
    if base is not None:
        raw = _on_base(raw, base, where)
    try:
        spec = DeviceFile.model_validate(dict(raw))
    except ValidationError as exc:
        errors = _one_efficiency_branch(exc.errors(), raw.get("efficiency"))
        raise ValueError("\n".join(_error_line(where, err) for err in errors)) from None
    card = spec.base or spec.name
    if spec.efficiency == "fitted":
        fits = shipped_fits()
        if card not in fits:
            raise ValueError(f"{where}: efficiency: 'fitted' but no fit is shipped for device {card!r} "
                             f"(fitted devices: {sorted(fits)}); give the efficiencies as a mapping, or "
                             "omit the key for the assumed defaults")
        efficiency: Efficiency = fits[card]
        efficiency_source = (f"fitted to AIConfigurator {fits[card].system} tables "
                             f"({fits[card].engine}; profiler/data/roofline_fits.yaml)")
    else:
        efficiency = spec.efficiency
        efficiency_source = f"given in {where}" if "efficiency" in raw else "assumed defaults"
    link = spec.gpu_link
    latency_us = link.latency_us if link.latency_us is not None else DEFAULT_LINK_LATENCY_US[link.kind]
    return {
        "name": spec.name,
        "base": spec.base,
        "cuda_total_memory_gib": spec.cuda_total_memory_gib,
        "peak_bf16_flops": spec.dense_bf16_tflops * 1e12,
        "mem_bandwidth_bytes_per_s": spec.memory_bandwidth_gb_per_s * 1e9,
        "memory_gib": spec.memory_gib,
        "interconnect_bandwidth_bytes_per_s": link.gb_per_s_per_direction * 1e9,
        "interconnect_latency_s": latency_us / 1e6,
        "peak_fp8_flops": None if spec.dense_fp8_tflops is None else spec.dense_fp8_tflops * 1e12,
        "host_link_bandwidth_bytes_per_s": spec.host_link.gb_per_s_per_direction * 1e9,
        "host_memory_gib": spec.host_memory_gib,
        "disk_bandwidth_bytes_per_s": None if spec.disk_gb_per_s is None else spec.disk_gb_per_s * 1e9,
        "interconnect_kind": link.kind,
        "gemm_flops_efficiency": efficiency.gemm_flops,
        "memory_bandwidth_efficiency": efficiency.memory_bandwidth,
        "kernel_latency_s": efficiency.kernel_latency_us / 1e6,
        "fp8_gemm": (None if efficiency.fp8_gemm is None else
                     (efficiency.fp8_gemm.flops, efficiency.fp8_gemm.memory_bandwidth,
                      efficiency.fp8_gemm.kernel_latency_us / 1e6)),
        "attention": (None if efficiency.attention is None else
                      (efficiency.attention.flops, efficiency.attention.memory_bandwidth,
                       efficiency.attention.latency_us / 1e6, efficiency.attention.per_sequence_us / 1e6)),
        "step_overhead_s": spec.step_overhead_ms / 1e3,
        "sync_host_s_per_seq": spec.sync_host_us_per_seq / 1e6,
        "all_reduce": {tp: (terms.latency_us / 1e6, terms.link_bandwidth)
                       for tp, terms in efficiency.all_reduce.items()},
        "source": source or "; ".join(spec.sources) or where,
        "efficiency_source": efficiency_source,
    }


def _on_base(raw: Mapping, base: Any, where: str) -> dict[str, Any]:
    """`raw` over the built-in `base`'s own file: the keys `raw` gives replace the built-in's
    (`sources` and `description` included), the rest are the built-in's.

    Raises:
        ValueError: `base` names no built-in; `raw` changes a `BASE_FIXED_KEYS` rate; `memory_gib`
            exceeds the built-in's; a device named like its base (each message names `where` and the key).
    """
    path = DEVICES_DIR / f"{base}.yaml" if isinstance(base, str) and base else None
    if path is None or not path.is_file():
        names = sorted(p.stem for p in DEVICES_DIR.glob("*.yaml"))
        raise ValueError(f"{where}: base: {base!r} is not a built-in device; valid: {', '.join(names)}")
    card = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if raw.get("name") == base:
        raise ValueError(f"{where}: name: a device with base: {base} needs a name of its own (e.g. my-{base}); "
                         f"the built-in itself is device: {base}")
    for key in BASE_FIXED_KEYS:
        if key in raw and raw[key] != card.get(key):
            raise ValueError(f"{where}: {key}: {raw[key]!r} differs from the built-in {base}'s {card.get(key)!r}; "
                             f"a device with base: keeps {base}'s measured kernel tables, taken at its rates. A card "
                             "with other rates is another device: describe it without base:")
    memory = raw.get("memory_gib")
    if isinstance(memory, (int, float)) and not isinstance(memory, bool) and memory > card["memory_gib"]:
        raise ValueError(f"{where}: memory_gib: {memory:g} exceeds the built-in {base}'s {card['memory_gib']:g} GiB; "
                         f"no {base} has more. A larger card is another device: describe it without base:")
    merged = {k: v for k, v in card.items() if k != "sources"}
    if "memory_gib" in raw and "cuda_total_memory_gib" not in raw:
        merged.pop("cuda_total_memory_gib", None)  # the given memory is the CUDA-visible total
    merged.update(raw)
    merged.setdefault("sources", [f"{where} over the built-in {base} ({path.name})"])
    return merged


def _one_efficiency_branch(errors: list[dict], efficiency: Any) -> list[dict]:
    """The errors of the `efficiency` form the user wrote: pydantic reports both forms of the
    union (`Efficiency | "fitted"`), so a mapping with a bad key would also read "Input should be
    'fitted'". A mapping keeps the mapping's errors; anything else one error saying both forms."""
    def of_efficiency(err: dict) -> bool:
        return err["loc"][:1] == ("efficiency",)

    if isinstance(efficiency, Mapping):
        return [e for e in errors if not (of_efficiency(e) and e["type"] == "literal_error")]
    kept = [e for e in errors if not of_efficiency(e)]
    said = {"loc": ("efficiency",), "type": "efficiency_form", "input": efficiency,
            "msg": f"must be 'fitted' (the shipped fit of this device name) or a mapping of "
                   f"{', '.join(Efficiency.model_fields)}"}
    return kept + [said] if len(kept) < len(errors) else errors


def _error_line(where: str, err: dict) -> str:
    loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-", "literal[")))
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        message = unknown_key_message(DeviceFile, err["loc"])
    elif "input" in err and not isinstance(err["input"], (dict, list)):
        message += f" (got {err['input']!r})"
        if err["type"] == "float_type" and isinstance(err["input"], str):
            message += "; YAML reads an exponent without a dot as text: write 1.0e+3 or 1000"
    return f"{where}: {loc or '<root>'}: {message}"


@lru_cache(maxsize=1)
def shipped_fits() -> dict[str, FittedEfficiency]:
    """The fitted efficiencies per device name from `profiler/data/roofline_fits.yaml`
    (empty when the file is absent).

    Raises:
        ValueError: an entry fails validation (names the file and the key).
    """
    if not FITS_FILE.is_file():
        return {}
    raw = yaml.load(FITS_FILE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    fits = {}
    for name, entry in (raw.get("devices") or {}).items():
        try:
            fits[name] = FittedEfficiency.model_validate(entry)
        except ValidationError as exc:
            raise ValueError("\n".join(_error_line(f"{FITS_FILE}: devices.{name}", e) for e in exc.errors())) from None
    return fits


def builtin_device_fields() -> dict[str, dict[str, Any]]:
    """The `DeviceSpec` fields of every built-in, keyed by name (one file per device under
    `profiler/data/devices/`, named `<name>.yaml`).

    Raises:
        ValueError: a file fails validation, or its `name` differs from its file name.
    """
    devices = {}
    for path in sorted(DEVICES_DIR.glob("*.yaml")):
        raw = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        fields = device_fields_from_mapping(raw, where=str(path))
        if fields["name"] != path.stem:
            raise ValueError(f"{path}: name {fields['name']!r} differs from the file name {path.stem!r}")
        devices[fields["name"]] = fields
    return devices
