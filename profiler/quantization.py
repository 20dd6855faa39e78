"""Quantized weights and KV cache as vLLM 0.19 serves them: what a checkpoint's
`quantization_config` (or `--quantization`) makes vLLM run, how many bytes a weight and a KV
element take, and which GEMM kernel family prices it.

Read from vLLM's source (vllm-project/vllm, `vllm/model_executor/layers/quantization/`, files as
stored by the search index; the 0.19 code paths named are the ones cited):

- `fp8` (`fp8.py`, `Fp8Config.from_config`): `quant_method` containing "fp8" means an FP8 checkpoint
  (`--quantization fp8` on a BF16 checkpoint quantises it at load, per tensor); `activation_scheme`
  (dynamic | static); `weight_block_size` [128, 128] selects block-wise FP8 (DeepSeek-style, dynamic
  per-token-group activations only). `Fp8LinearMethod` runs W8A8 FP8 GEMMs (CUTLASS `scaled_mm`) on
  FP8 tensor cores (sm89+); without them (Ampere) it runs FP8 weight-only Marlin (`use_marlin`).
  Only `LinearBase` layers are quantised: the embedding and LM head (`VocabParallelEmbedding`,
  `ParallelLMHead`) stay BF16.
- `fbgemm_fp8` (`fbgemm_fp8.py`): per-channel FP8 weights, dynamic per-token FP8 activations (W8A8).
- `modelopt` (`modelopt.py`, `ModelOptFp8Config`: `quant_algo` FP8, per-tensor static scales,
  W8A8) and `modelopt_fp4` / `quant_algo: NVFP4` (`ModelOptNvFp4Config`: FP4 E2M1 weights in groups
  of 16 with FP8 E4M3 scales; FP4 tensor cores on Blackwell, FP4 Marlin weight-only elsewhere,
  `marlin_utils_fp4.py`, `FP4_MARLIN_SUPPORTED_GROUP_SIZES = [16]`).
- `compressed-tensors` (`compressed_tensors/compressed_tensors.py`, `_get_scheme_from_parts`):
  per `config_groups.*`, `weights` {num_bits, type float|int, strategy tensor|channel|block|group,
  group_size} and `input_activations` (None for weight-only): `_is_fp8_w8a8` (float 8-bit weights
  and activations, tensor / channel / block strategy) → `CompressedTensorsW8A8Fp8`;
  `_is_wNa16_group_channel` (int 4/8-bit weights, no activation quantisation) →
  `CompressedTensorsWNA16` (Marlin); `_is_fp8_w8a16` → `CompressedTensorsW8A16Fp8` (FP8 Marlin);
  `_is_fp4a4_nvfp4` (`format: nvfp4-pack-quantized`) → `CompressedTensorsW4A4Fp4`.
- `awq` / `awq_marlin` (`awq_marlin.py`): 4-bit weights in groups (`group_size`, with 4-bit zero
  points, `zero_point: true`), BF16 activations, Marlin kernels (`marlin_utils.py`,
  `MARLIN_SUPPORTED_GROUP_SIZES = [-1, 32, 64, 128]`).
- `gptq` / `gptq_marlin` (`gptq_marlin.py`): 4- or 8-bit weights (`bits`), groups as AWQ,
  symmetric, Marlin.
- `mxfp4` (`mxfp4.py`, `Mxfp4Config.get_quant_method`): only `FusedMoE` experts are MXFP4; every
  `LinearBase` layer falls back to `UnquantizedLinearMethod`.

What is priced (`WeightFormat.kernel`): "fp8" (W8A8 per tensor / channel: AIConfigurator's `fp8`
GEMM rows), "fp8_block" (its `fp8_block` rows), "weight_only" (W4A16 / W8A16 Marlin: the roofline
with BF16 compute and the packed weight bytes, labelled), "mxfp4" (a mixture of experts' experts
only, 0.53125 bytes a weight, the fused-MoE roofline with BF16 compute — vLLM runs MXFP4 experts as
W4A16 (Marlin / Triton matmul_ogs) on Hopper and earlier — labelled; attention and the rest BF16).
Everything else — INT8 W8A8, NVFP4 W4A4 on an FP4 tensor-core card, MXFP4 on a dense model,
other quantised mixture-of-experts experts, several schemes in one
checkpoint, a group size Marlin has no kernel for — is a `ValueError` naming the field; nothing is
priced as BF16.

KV cache (`vllm/config/cache.py`, `CacheDType`: auto, bfloat16, fp8, fp8_e4m3, fp8_e5m2, ...):
the FP8 kinds take 1 byte per element; `auto` is the model dtype (BF16 here) except for a ModelOpt
checkpoint that names its KV quantisation (`vllm/utils/torch_utils.py`,
`resolve_kv_cache_dtype_string` / `get_kv_cache_quant_algo_string`: `quant_method` modelopt*,
`kv_cache_scheme` or `kv_cache_quant_algo` FP8 → fp8), where `auto` is FP8 (`resolved_kv_cache_dtype`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

# engine.kv_cache_dtype values → bytes per element. "bf16" (the default) is this project's older
# spelling of vLLM's `auto`; "bfloat16" is BF16 whatever the checkpoint says (vLLM's value).
KV_CACHE_DTYPE_BYTES = {"auto": 2, "bf16": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
AUTO_KV_CACHE_DTYPES = ("auto", "bf16")
# engine.quantization values: vLLM's `--quantization` methods that quantise a BF16 checkpoint at
# load (only `fp8`: `Fp8Config` with is_checkpoint_fp8_serialized false) or that must match the
# checkpoint's own method (vLLM `ModelConfig._verify_quantization` refuses a mismatch).
ENGINE_QUANTIZATIONS = ("fp8", "fbgemm_fp8", "modelopt", "modelopt_fp4", "compressed-tensors", "awq", "awq_marlin",
                        "gptq", "gptq_marlin", "mxfp4")
METHODS = ENGINE_QUANTIZATIONS  # quant_method values read from a config.json
MARLIN_GROUP_SIZES = (-1, 32, 64, 128)  # vLLM marlin_utils.py MARLIN_SUPPORTED_GROUP_SIZES
_BF16_SCALE_BYTES = 2  # AWQ / GPTQ / WNA16 group scales: fp16 / bf16
_FP32_SCALE_BYTES = 4  # FP8 block scales: fp32 per 128 × 128 block
MXFP4_BLOCK = 32  # OCP Microscaling spec v1.0: 32 FP4 (E2M1) elements share one E8M0 scale


@dataclass(frozen=True)
class WeightFormat:
    """How the linear layers' weights are stored and multiplied.

    Attributes:
        method: vLLM's quantization method (`quant_method` or `--quantization`).
        kernel: "fp8" (W8A8 FP8, per tensor / channel scales), "fp8_block" (W8A8 FP8 with
            128 × 128 weight blocks), "weight_only" (low-bit weights dequantised to BF16 inside the
            GEMM: Marlin); what prices the GEMMs.
        weight_bits: bits per weight element (8, 4).
        group_size: weights per scale along k for group-wise formats (AWQ / GPTQ / NVFP4), 0 for
            per-tensor / per-channel / block formats (their scales are < 0.1 % of the weight).
        scale_bytes_per_group: bytes of scale (and zero point) per group (`group_size` > 0).
        source: where it was read (config.json's file and key, or `engine.quantization`).
        kv_cache_dtype: the KV-cache dtype the checkpoint asks for ("fp8": a ModelOpt checkpoint's
            `kv_cache_quant_algo` FP8), which vLLM's `auto` takes; None: the model dtype.
    """

    method: str
    kernel: str
    weight_bits: int
    group_size: int = 0
    scale_bytes_per_group: float = 0.0
    source: str = ""
    kv_cache_dtype: str | None = None

    @property
    def bytes_per_param(self) -> float:
        """Bytes one quantised weight takes with its share of the scales: bits / 8 (+ scale bytes
        / group_size for grouped formats; + 4 / 128² for FP8 blocks' fp32 scales).
        E.g. FP8 1.0; AWQ 4-bit g128 with fp16 scales and 4-bit zeros 0.5 + (2 + 0.5) / 128 = 0.51953125."""
        value = self.weight_bits / 8
        if self.group_size > 0:
            value += self.scale_bytes_per_group / self.group_size
        if self.kernel == "fp8_block":
            value += _FP32_SCALE_BYTES / 128 ** 2
        return value

    @property
    def experts_only(self) -> bool:
        """Only the mixture-of-experts experts are quantised (MXFP4: vLLM `Mxfp4Config` quantises
        `FusedMoE` layers only; every `LinearBase` layer stays BF16)."""
        return self.kernel == "mxfp4"

    @property
    def label(self) -> str:
        """Short description for reports: e.g. "fp8 W8A8 (fp8)", "awq W4A16 g128 (Marlin, roofline)"."""
        group = f" g{self.group_size}" if self.group_size > 0 else ""
        if self.kernel == "weight_only":
            return f"{self.method} W{self.weight_bits}A16{group} (Marlin weight-only, roofline)"
        if self.experts_only:
            return f"{self.method} W4A16{group} experts only (BF16 attention; roofline)"
        return f"{self.method} W8A8 FP8{' block 128x128' if self.kernel == 'fp8_block' else ''}"


def resolved_kv_cache_dtype(kv_cache_dtype: str, quantization: WeightFormat | None) -> str:
    """`engine.kv_cache_dtype` as vLLM resolves it: `auto` (and this project's `bf16`) becomes the
    checkpoint's KV quantisation where it names one (`WeightFormat.kv_cache_dtype`), else stays."""
    if kv_cache_dtype in AUTO_KV_CACHE_DTYPES and quantization is not None and quantization.kv_cache_dtype:
        return quantization.kv_cache_dtype
    return kv_cache_dtype


def kv_cache_dtype_bytes(kv_cache_dtype: str, device=None) -> int:
    """Bytes per KV-cache element of `engine.kv_cache_dtype` (module docstring).

    Args:
        device: a `DeviceSpec`; an FP8 KV cache on one without FP8 (`peak_fp8_flops` None) is refused.

    Raises:
        ValueError: an unknown value (listing the valid ones), or FP8 on a card without FP8.
    """
    if kv_cache_dtype not in KV_CACHE_DTYPE_BYTES:
        raise ValueError(f"engine.kv_cache_dtype {kv_cache_dtype!r} is unknown; valid: {', '.join(KV_CACHE_DTYPE_BYTES)}")
    size = KV_CACHE_DTYPE_BYTES[kv_cache_dtype]
    if size == 1 and device is not None and getattr(device, "peak_fp8_flops", None) is None:
        raise ValueError(f"engine.kv_cache_dtype {kv_cache_dtype!r}: device {device.name!r} has no FP8 support "
                         "(dense_fp8_tflops null in its device file); the measured FP8-KV attention kernels run "
                         "on FP8 cards (Ada, Hopper, Blackwell); use auto")
    return size


def online_format(method: str) -> WeightFormat:
    """The format `engine.quantization: METHOD` gives a BF16 checkpoint (vLLM `--quantization`).

    Only `fp8` quantises at load (`Fp8Config`, per-tensor dynamic scales: the `fp8` GEMM table).

    Raises:
        ValueError: another method (they need a pre-quantised checkpoint) or an unknown one.
    """
    if method == "fp8":
        return WeightFormat("fp8", "fp8", 8, source="engine.quantization")
    if method in ENGINE_QUANTIZATIONS:
        raise ValueError(f"engine.quantization {method!r} needs a checkpoint quantised with it (its config.json "
                         "quantization_config); vLLM quantises a BF16 checkpoint at load only with fp8")
    raise ValueError(f"engine.quantization {method!r} is unknown; valid: {', '.join(ENGINE_QUANTIZATIONS)}")


def read_quantization_config(config: Any, path: Path | str) -> WeightFormat:
    """The `WeightFormat` of a config.json's `quantization_config` (module docstring).

    Raises:
        ValueError: not a mapping, no or unknown `quant_method`, or a scheme the tool cannot
            price (naming the file, the field, its value and what is valid).
    """
    where = f"{path}: quantization_config"
    if not isinstance(config, dict):
        raise ValueError(f"{where} must be a mapping, got {config!r}")
    method = config.get("quant_method")
    reader = _READERS.get(str(method).lower() if isinstance(method, str) else method)
    if reader is None:
        raise ValueError(f"{where}.quant_method {method!r} is not a method this tool prices; valid: "
                         f"{', '.join(sorted(_READERS))} (vLLM 0.19 quantization methods)")
    fmt = reader(config, where)
    return WeightFormat(fmt.method, fmt.kernel, fmt.weight_bits, fmt.group_size, fmt.scale_bytes_per_group,
                        source=f"{path} quantization_config", kv_cache_dtype=_modelopt_kv(config, where))


def _only_lm_head_skipped(skipped: Any, where: str) -> None:
    """Layers left unquantised beyond the LM head and embedding (always BF16 here) make a
    mixed-format model."""
    # The router (`mlp.gate`, Qwen2-MoE's `shared_expert_gate`) is BF16 here too (`ModelSpec.linear_params`).
    others = [name for name in (skipped or []) if not str(name).split(":")[-1].endswith(
        ("lm_head", "embed_tokens", "mlp.gate", "shared_expert_gate"))]
    if others:
        raise ValueError(f"{where}: layers left unquantised ({others[:4]}{' ...' if len(others) > 4 else ''}); "
                         "mixed per-layer formats are not priced (only lm_head, embed_tokens and the MoE router gate may be left out)")


def _fp8(config: dict, where: str) -> WeightFormat:
    _only_lm_head_skipped(config.get("ignored_layers") or config.get("modules_to_not_convert"),
                          f"{where}.ignored_layers")
    scheme = config.get("activation_scheme", "dynamic")
    if scheme not in ("dynamic", "static"):
        raise ValueError(f"{where}.activation_scheme {scheme!r}; valid: dynamic, static (vLLM Fp8Config)")
    block = config.get("weight_block_size")
    if block is None:
        return WeightFormat("fp8", "fp8", 8)
    if block != [128, 128]:
        raise ValueError(f"{where}.weight_block_size {block!r}: the measured fp8_block GEMMs are 128 x 128 blocks; "
                         "other block sizes are not priced")
    return WeightFormat("fp8", "fp8_block", 8)


def _fbgemm_fp8(config: dict, where: str) -> WeightFormat:
    return WeightFormat("fbgemm_fp8", "fp8", 8)


def _modelopt(config: dict, where: str) -> WeightFormat:
    algo = config.get("quant_algo")
    if algo is None and isinstance(config.get("quantization"), dict):
        algo = config["quantization"].get("quant_algo")
    if isinstance(algo, str) and algo.upper() == "FP8":
        return WeightFormat("modelopt", "fp8", 8)
    if isinstance(algo, str) and algo.upper() == "NVFP4":
        return _nvfp4("modelopt", where)
    raise ValueError(f"{where}.quant_algo {algo!r}: priced are FP8 (W8A8) and NVFP4")


def _modelopt_kv(config: dict, where: str) -> str | None:
    """The KV dtype a ModelOpt checkpoint asks `auto` to take (vLLM `get_kv_cache_quant_algo_string`:
    only `quant_method` modelopt*; its `kv_cache_scheme` or `kv_cache_quant_algo`, top level or under
    `quantization`); None for other methods or none named.

    Raises:
        ValueError: a KV quantisation other than FP8 (naming the field): vLLM would serve it, this
            tool has no kernel table for it.
    """
    if not str(config.get("quant_method", "")).startswith("modelopt"):
        return None
    inner = config.get("quantization") if isinstance(config.get("quantization"), dict) else config
    algo = (inner.get("kv_cache_scheme") or config.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
            or config.get("kv_cache_quant_algo"))
    if algo is None:
        return None
    if isinstance(algo, dict) and algo.get("dynamic") is False and algo.get("num_bits") == 8 and algo.get("type") == "float":
        return "fp8"
    if isinstance(algo, str) and algo.lower() in ("fp8", "fp8_e4m3"):
        return "fp8"
    raise ValueError(f"{where}.kv_cache_quant_algo {algo!r}: an FP8 KV cache is priced; other KV formats are not")


def _modelopt_fp4(config: dict, where: str) -> WeightFormat:
    return _nvfp4("modelopt_fp4", where)


def _nvfp4(method: str, where: str) -> WeightFormat:
    # FP4 E2M1 weights, one FP8 E4M3 scale per 16; priced as vLLM's FP4 Marlin (weight-only) path.
    # On a card with FP4 tensor cores (Blackwell) vLLM runs W4A4 instead: `kernel_for` refuses that.
    return WeightFormat(method, "weight_only", 4, 16, 1.0)


def _marlin_group(group: Any, where: str, key: str = "group_size") -> int:
    if group not in MARLIN_GROUP_SIZES:
        raise ValueError(f"{where}.{key} {group!r}: vLLM's Marlin kernels take group sizes "
                         f"{', '.join(map(str, MARLIN_GROUP_SIZES))} (marlin_utils.py MARLIN_SUPPORTED_GROUP_SIZES)")
    return group


def _awq(config: dict, where: str) -> WeightFormat:
    bits = config.get("bits", config.get("w_bit"))
    if bits != 4:
        raise ValueError(f"{where}.bits {bits!r}: AWQ checkpoints vLLM serves with Marlin are 4-bit")
    group = _marlin_group(config.get("group_size", config.get("q_group_size")), where)
    zero = config.get("zero_point", True)
    # Per group: an fp16 scale and (zero_point) a 4-bit zero.
    return _grouped("awq", 4, group, _BF16_SCALE_BYTES + (0.5 if zero else 0.0))


def _gptq(config: dict, where: str) -> WeightFormat:
    bits = config.get("bits")
    if bits not in (4, 8):
        raise ValueError(f"{where}.bits {bits!r}: vLLM's GPTQ Marlin takes 4 or 8 bits")
    if config.get("sym", True) is not True:
        raise ValueError(f"{where}.sym {config.get('sym')!r}: GPTQ Marlin takes symmetric checkpoints only "
                         "(gptq_marlin.py); asymmetric GPTQ runs a kernel this tool does not price")
    return _grouped("gptq", bits, _marlin_group(config.get("group_size"), where), _BF16_SCALE_BYTES)


def _grouped(method: str, bits: int, group: int, scale_bytes: float) -> WeightFormat:
    # group_size -1: one scale per output channel (scales < 0.1 % of the weight, not counted).
    return WeightFormat(method, "weight_only", bits, max(group, 0), scale_bytes if group > 0 else 0.0)


def _mxfp4(config: dict, where: str) -> WeightFormat:
    # OCP MX FP4: E2M1 values in blocks of 32 with one E8M0 (1-byte) scale: 0.5 + 1/32 bytes a weight.
    return WeightFormat("mxfp4", "mxfp4", 4, MXFP4_BLOCK, 1.0, source=f"{where}.quant_method")


def _compressed_tensors(config: dict, where: str) -> WeightFormat:
    groups = config.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ValueError(f"{where}.config_groups must be a non-empty mapping of quantisation schemes")
    _only_lm_head_skipped(config.get("ignore"), f"{where}.ignore")
    formats = {name: _ct_scheme(scheme, f"{where}.config_groups.{name}", config.get("format"))
               for name, scheme in groups.items()}
    if len(set(formats.values())) > 1:
        raise ValueError(f"{where}.config_groups: several schemes ({', '.join(f'{n}: {f.label}' for n, f in formats.items())}); "
                         "mixed per-layer formats are not priced")
    return next(iter(formats.values()))


def _ct_scheme(scheme: Any, where: str, fmt: Any) -> WeightFormat:
    if not isinstance(scheme, dict) or not isinstance(scheme.get("weights"), dict):
        raise ValueError(f"{where}.weights must be a mapping (num_bits, type, strategy)")
    weights, inputs = scheme["weights"], scheme.get("input_activations")
    bits, kind, strategy = weights.get("num_bits"), weights.get("type"), weights.get("strategy")
    if kind == "float" and bits == 4 or fmt == "nvfp4-pack-quantized":
        if weights.get("group_size") != 16:
            raise ValueError(f"{where}.weights.group_size {weights.get('group_size')!r}: NVFP4 groups are 16")
        return _nvfp4("compressed-tensors", where)
    if kind == "float" and bits == 8:
        if strategy == "block":
            block = weights.get("block_structure")
            if block != [128, 128]:
                raise ValueError(f"{where}.weights.block_structure {block!r}: priced FP8 blocks are [128, 128]")
            kernel = "fp8_block"
        elif strategy in ("tensor", "channel"):
            kernel = "fp8"
        else:
            raise ValueError(f"{where}.weights.strategy {strategy!r}: FP8 weights are priced per tensor, channel or block")
        if inputs is None:  # `_is_fp8_w8a16`: FP8 Marlin, weight-only
            return WeightFormat("compressed-tensors", "weight_only", 8)
        if not (isinstance(inputs, dict) and inputs.get("type") == "float" and inputs.get("num_bits") == 8):
            raise ValueError(f"{where}.input_activations {inputs!r}: with FP8 weights priced are FP8 activations "
                             "(W8A8) or none (W8A16)")
        return WeightFormat("compressed-tensors", kernel, 8)
    if kind == "int" and bits in (4, 8):
        if inputs is not None:
            raise ValueError(f"{where}.input_activations {inputs!r}: integer W{bits}A8 (INT8 activations) is not "
                             "priced; weight-only int4/int8 (no input_activations) is")
        if strategy not in ("group", "channel"):
            raise ValueError(f"{where}.weights.strategy {strategy!r}: integer weights are priced per group or channel")
        group = _marlin_group(weights.get("group_size") if strategy == "group" else -1, where, "weights.group_size")
        return _grouped("compressed-tensors", bits, group, _BF16_SCALE_BYTES + (0 if weights.get("symmetric", True) else bits / 8))
    raise ValueError(f"{where}.weights: type {kind!r}, num_bits {bits!r} is not priced; priced: float 8 "
                     "(FP8), float 4 (NVFP4), int 4 / 8 weight-only")


_READERS = {"fp8": _fp8, "fbgemm_fp8": _fbgemm_fp8, "modelopt": _modelopt, "modelopt_fp4": _modelopt_fp4,
            "compressed-tensors": _compressed_tensors, "awq": _awq, "awq_marlin": _awq, "gptq": _gptq,
            "gptq_marlin": _gptq, "mxfp4": _mxfp4}


def kernel_for(fmt: WeightFormat, device) -> str:
    """The GEMM path vLLM runs `fmt` with on `device`: `fmt.kernel`, except FP8 W8A8 on a card
    without FP8 tensor cores, which vLLM runs as FP8 Marlin weight-only (`Fp8LinearMethod.use_marlin`).

    Raises:
        ValueError: NVFP4 on a card with FP4 tensor cores (compute capability 10.x: b200), where
            vLLM runs W4A4 FP4 GEMMs this tool has no peak or table for.
    """
    if fmt.kernel in ("fp8", "fp8_block") and getattr(device, "peak_fp8_flops", None) is None:
        return "weight_only"
    if fmt.weight_bits == 4 and fmt.group_size == 16 and getattr(device, "name", "") in FP4_TENSOR_CORE_DEVICES:
        raise ValueError(f"{fmt.source}: NVFP4 on {device.name} runs W4A4 FP4 tensor-core GEMMs (vLLM "
                         "ModelOptNvFp4LinearMethod / CompressedTensorsW4A4Fp4); no FP4 peak or table is known: not priced")
    return fmt.kernel


FP4_TENSOR_CORE_DEVICES = frozenset({"b200"})


def weight_only_gemm_time_s(m: float, n: float, k: float, device, bytes_per_param: float,
                            flops_efficiency: float, bandwidth_efficiency: float, kernel_latency_s: float) -> float:
    """Time (s) of one weight-only quantised GEMM (Marlin W4A16 / W8A16: vLLM `marlin_utils.py`
    `apply_gptq_marlin_linear`, `apply_awq_marlin_linear`; FP8 / FP4 Marlin the same way): the
    packed weights are read once and dequantised to BF16 in registers, the MMA runs on BF16
    tensor cores.

    max(2 m n k / (BF16 peak × flops_efficiency), (2 m k + bytes_per_param k n + 2 m n) /
    (bandwidth × bandwidth_efficiency)) + kernel_latency_s: memory-bound decodes read
    bytes_per_param per weight instead of 2; large prefills are compute-bound at the BF16 peak.
    An assumption, labelled in reports: no measured Marlin table, the device's BF16 GEMM
    efficiencies (Marlin's dequantisation may make large-m GEMMs slower than cuBLAS BF16).
    """
    flops = 2.0 * m * n * k
    num_bytes = 2.0 * m * k + bytes_per_param * k * n + 2.0 * m * n
    return max(flops / (device.peak_bf16_flops * flops_efficiency),
               num_bytes / (device.mem_bandwidth_bytes_per_s * bandwidth_efficiency)) + kernel_latency_s


FP8_BLOCK = 128  # the block edge of the priced block-FP8 format (weight_block_size [128, 128])


def block_fp8_shape_problem(model, tensor_parallel_size: int, moe_tensor_parallel_size: int = 1) -> str | None:
    """Why vLLM would refuse a block-FP8 `model` at these degrees, or None.

    vLLM checks every weight partition against the 128 × 128 blocks (`validate_fp8_block_shape`,
    vllm/model_executor/layers/quantization/utils/fp8_utils.py: a column-parallel layer's output
    partitions and a row-parallel layer's input partition must be multiples of block_n / block_k;
    the fused-MoE weights the same, `Fp8MoEMethod.create_weights`: the per-rank expert width must
    be a multiple of block_n). E.g. Qwen3-235B-A22B-FP8 (expert width 1536) at MoE TP 8 leaves 192.

    Args:
        model: a `ModelSpec` whose `quantization.kernel` is fp8_block (others: None).
        moe_tensor_parallel_size: ranks each expert's width is split over (1 with expert parallelism).
    """
    fmt = model.quantization
    if fmt is None or fmt.kernel != "fp8_block":
        return None
    tp = tensor_parallel_size
    q_out = model.num_attention_heads // tp * model.head_dim
    partitions = {"q_proj output": q_out, "k_proj / v_proj output": model.kv_heads_per_rank(tp) * model.head_dim,
                  "o_proj input": q_out}
    if model.moe is None:
        partitions["gate_up_proj output / down_proj input"] = model.intermediate_size // tp
    else:
        partitions["expert width"] = model.moe.expert_intermediate_size // moe_tensor_parallel_size
    bad = [f"{name} {size}" for name, size in partitions.items() if size % FP8_BLOCK]
    if not bad:
        return None
    return (f"{model.name}'s block-FP8 weights ({fmt.source}) split over tensor_parallel_size {tp}"
            f"{f' (MoE width over {moe_tensor_parallel_size})' if model.moe is not None else ''} leave per-rank "
            f"{', '.join(bad)}, not multiples of the {FP8_BLOCK}-wide blocks: vLLM refuses this "
            "(fp8_utils.validate_fp8_block_shape); choose another degree or enable_expert_parallel")
