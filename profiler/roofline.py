"""`RooflineCostModel`: a step's time from a device's datasheet figures and efficiencies, kernel by kernel.

Every kernel of a vLLM Llama forward step is priced on the roofline (Williams, Waterman,
Patterson, CACM 2009) plus a launch latency:

    t = max(FLOPs / (peak × gemm_flops_efficiency), bytes / (bandwidth × memory_bandwidth_efficiency))
        + kernel_latency_s

The kernels, as vLLM 0.19 runs a Llama-family decoder (`vllm/model_executor/models/llama.py`,
`LlamaDecoderLayer.forward` / `LlamaModel.forward`), for T tokens of S sequences at TP degree tp:

- per layer, four GEMMs over all T tokens (`ModelSpec.layer_gemm_shapes`: qkv_proj, o_proj,
  gate_up_proj, down_proj);
- per layer, attention (one kernel for the step's prefill chunks, one for its decodes; FLOPs
  over query-key pairs, bytes = KV read of context + query tokens, Q read and O write), at the
  device's attention terms (`DeviceSpec.attention_terms`: own FLOP/s and bandwidth fractions,
  latency per call and cost per sequence where fitted, else the GEMM terms); a windowed layer
  (`ModelSpec.num_sliding_layers`) over the pairs and KV tokens inside its window
  (`profiler.sliding_window`); logit soft-capping adds `SOFTCAP_FLOPS_PER_LOGIT` and attention
  sinks `SINK_FLOPS_PER_ROW` element-wise FLOPs per head (an assumption: a divide, tanh and
  multiply per logit; an exp and add per softmax row), inside the same kernel;
- per layer, the element-wise kernels, memory-bound (FLOPs negligible), each one launch:
  the two RMSNorms with their residual adds **fused** into them (vLLM `RMSNorm.forward_cuda`
  with a residual calls `fused_add_rms_norm`: read x and residual, write both: 4 × hidden
  elements a token), rotary on q and k in place (read + write), the KV-cache write
  (`reshape_and_cache_flash`: read k and v, write them into the cache), SiLU·mul (read
  2 × ffn/tp, write ffn/tp); per step the embedding gather (read + write a row) and the final
  fused norm; the first layer's input norm has no residual yet (read + write only);
- at tp > 1, two all-reduces per layer (after o_proj and down_proj, RowParallelLinear) and one
  after the vocab-parallel embedding (`VocabParallelEmbedding.forward`), each
  latency + 2 (tp − 1) / tp × T × hidden × dtype bytes / (link bandwidth × link efficiency)
  (ring all-reduce: Patarasuk & Yuan, JPDC 2009; terms per TP degree from `DeviceSpec.all_reduce`);
- the LM head GEMM over S rows (one per sequence; vocab-parallel: vocab / tp columns) and, at
  tp > 1, the all-gather of the logit shards, latency + (tp − 1) / tp × S × vocab × dtype bytes
  / link bandwidth (`LogitsProcessor._gather_logits`);
- the sampler over S × vocab logits (`vllm/v1/sample/sampler.py`: cast to fp32, temperature,
  softmax, exponential-noise sampling and argmax): assumed `SAMPLER_KERNELS` = 6 launches and
  `SAMPLER_FP32_PASSES` = 7 fp32 passes over the logits plus one read in the model dtype;
- a per-step host overhead (`DeviceSpec.step_overhead_s`).

The efficiencies, kernel latency and all-reduce terms come from the `DeviceSpec`: fitted to
AIConfigurator's measured vLLM tables for the devices it covers (`profiler/roofline_fit.py`,
`profiler/data/roofline_fits.yaml`), assumed defaults elsewhere (`profiler/device_file.py`).
"""
from __future__ import annotations

import numpy as np

from profiler.cost_model import step_arrays
from profiler.device_file import (DEFAULT_GEMM_FLOPS_EFFICIENCY, DEFAULT_MEMORY_BANDWIDTH_EFFICIENCY,
                                  DEFAULT_STEP_OVERHEAD_S)
from profiler.device_spec import AttentionFit, DeviceSpec
from profiler.model_spec import ModelSpec
from profiler.quantization import kernel_for, weight_only_gemm_time_s
from profiler.mla import mla_flops
from profiler.sliding_window import windowed_kv_tokens, windowed_pairs

# The assumed defaults, under the names `roofline_tuning` and `fitted` import.
FLOPS_EFFICIENCY = DEFAULT_GEMM_FLOPS_EFFICIENCY
BANDWIDTH_EFFICIENCY = DEFAULT_MEMORY_BANDWIDTH_EFFICIENCY
STEP_OVERHEAD_S = DEFAULT_STEP_OVERHEAD_S
FP8_ACTIVATION_QUANT_BYTES = 3  # per activation element: 2 read (bf16) + 1 written (fp8)
SAMPLER_KERNELS = 6  # assumption, see module docstring
SAMPLER_FP32_PASSES = 7  # assumption, see module docstring
_FP32_BYTES = 4
SOFTCAP_FLOPS_PER_LOGIT = 3  # assumption, see module docstring
SINK_FLOPS_PER_ROW = 2  # assumption, see module docstring


def roofline_time_s(flops: float, num_bytes: float, flops_per_s: float, bytes_per_s: float) -> float:
    """max(flops / flops_per_s, num_bytes / bytes_per_s), seconds.

    The roofline bound of one kernel (Williams et al., CACM 2009); pass rates already derated by
    the efficiencies.
    """
    return max(flops / flops_per_s, num_bytes / bytes_per_s)


def gemm_time_s(
    m: int,
    n: int,
    k: int,
    device: DeviceSpec,
    dtype_bytes: int = 2,
    flops_efficiency: float | None = None,
    bandwidth_efficiency: float | None = None,
    kernel_latency_s: float | None = None,
) -> float:
    """Time (s) of one (m × k) @ (k × n) GEMM: m tokens through a k-in, n-out weight.

    FLOPs = 2 m n k (one multiply and one add per MAC). Bytes = (m k + k n + m n) × dtype_bytes:
    the input activations, the weight and the output, each moved once (ideal tiling); FP8 weights
    on a device with FP8 tensor cores add the activations' quantisation pass (3 m k bytes). The compute
    peak is `device.peak_flops(dtype_bytes)` × flops_efficiency, the bandwidth
    `device.mem_bandwidth_bytes_per_s` × bandwidth_efficiency, plus kernel_latency_s. Efficiencies
    and latency left None are the device's for that width (`DeviceSpec.gemm_terms`).
    """
    terms = device.gemm_terms(dtype_bytes)
    flops_efficiency = terms.flops_efficiency if flops_efficiency is None else flops_efficiency
    bandwidth_efficiency = terms.bandwidth_efficiency if bandwidth_efficiency is None else bandwidth_efficiency
    kernel_latency_s = terms.latency_s if kernel_latency_s is None else kernel_latency_s
    flops = 2.0 * m * n * k
    num_bytes = float(m * k + k * n + m * n) * dtype_bytes
    bytes_per_s = device.mem_bandwidth_bytes_per_s * bandwidth_efficiency
    time_s = roofline_time_s(flops, num_bytes, device.peak_flops(dtype_bytes) * flops_efficiency,
                             bytes_per_s) + kernel_latency_s
    if dtype_bytes == 1 and device.peak_fp8_flops is not None:
        # W8A8: vLLM quantises the activations first (`Fp8LinearOp.apply` -> `scaled_fp8_quant`,
        # vllm/model_executor/layers/quantization/utils/w8a8_utils.py): read m k bf16, write m k fp8.
        time_s += FP8_ACTIVATION_QUANT_BYTES * m * k / bytes_per_s
    return time_s


def ring_all_reduce_time_s(num_bytes: float, device: DeviceSpec, tp: int) -> float:
    """Time (s) of one all-reduce of `num_bytes` over `tp` GPUs; 0 when tp = 1.

    latency + 2 (tp − 1) / tp × num_bytes / (link bandwidth × link efficiency): a ring
    reduce-scatter then all-gather, each moving (tp − 1) / tp of the buffer through every link
    (Patarasuk & Yuan, JPDC 2009; the "bus bandwidth" factor of nccl-tests). Latency and
    efficiency are `device.all_reduce_terms(tp)`: fitted per TP degree where measured.
    """
    if tp == 1:
        return 0.0
    terms = device.all_reduce_terms(tp)
    return (2.0 * (tp - 1) / tp * num_bytes / (device.interconnect_bandwidth_bytes_per_s
                                               * terms.link_bandwidth_efficiency) + terms.latency_s)


def all_gather_time_s(num_bytes: float, device: DeviceSpec, tp: int) -> float:
    """Time (s) of gathering a `num_bytes` tensor sharded over `tp` GPUs; 0 when tp = 1.

    latency + (tp − 1) / tp × num_bytes / (link bandwidth × link efficiency): each link carries
    the other ranks' shards once (half a ring all-reduce), with the all-reduce's terms.
    """
    if tp == 1:
        return 0.0
    terms = device.all_reduce_terms(tp)
    return ((tp - 1) / tp * num_bytes / (device.interconnect_bandwidth_bytes_per_s
                                         * terms.link_bandwidth_efficiency) + terms.latency_s)


def elementwise_bytes_per_token(model: ModelSpec, tp: int, dtype_bytes: int, kv_dtype_bytes: int) -> float:
    """Bytes one token moves through every element-wise kernel of a step (module docstring):
    per layer 2 fused add-RMSNorms (4 × hidden), rotary (2 × (q + k) widths per rank), the
    KV-cache write (read k, v; write them in the KV dtype), SiLU·mul (3 × ffn / tp); plus the
    embedding gather (2 × hidden) and the final fused norm (4 × hidden), less the first layer's
    missing residual (2 × hidden)."""
    q_width = model.num_attention_heads // tp * model.head_dim
    kv_width = model.kv_heads_per_rank(tp) * model.head_dim
    mlp_width = 0 if model.moe is not None else model.intermediate_size  # MoE: SiLU·mul inside the fused experts
    per_layer = (2 * 4 * model.hidden_size + 2 * (q_width + kv_width)
                 + 3 * mlp_width // tp) * dtype_bytes + 2 * kv_width * (dtype_bytes + kv_dtype_bytes)
    per_step = (2 + 4 - 2) * model.hidden_size * dtype_bytes
    return float(model.num_layers * per_layer + per_step)


ELEMENTWISE_KERNELS_PER_LAYER = 5  # 2 fused add-RMSNorms, rotary, KV-cache write, SiLU·mul
ELEMENTWISE_KERNELS_PER_STEP = 2  # embedding gather, final fused norm

# Steps with at most this many sequences given as lists are summed in plain Python (cheaper
# than numpy's per-call overhead at that size; the sums are the same integers either way).
_PYTHON_SUMS_MAX_SEQS = 256


class RooflineCostModel:
    """Prices one step of a Llama-family model on a device, kernel by kernel (module docstring).

    Implements the `CostModel` protocol (`profiler/cost_model.py`). Per-model constants are
    computed once and the parts that depend only on the step's token or sequence count are
    memoised, so a step costs a few dict lookups and sums (microseconds).

    Args:
        model: the model's shapes.
        device: the device's figures and efficiencies.
        tensor_parallel_size: GPUs the model is sharded over (Megatron-style, as vLLM).
        dtype_bytes: bytes per weight and activation element (2 for bf16, 1 for fp8).
        kv_dtype_bytes: bytes per KV-cache element.
        flops_efficiency, bandwidth_efficiency, kernel_latency_s, step_overhead_s: override the
            device's `gemm_flops_efficiency`, `memory_bandwidth_efficiency`, `kernel_latency_s`
            (s per kernel launch) and `step_overhead_s` (s per step) for every kernel; None keeps
            the device's (its FP8 GEMM terms for the GEMMs of 1-byte weights, where fitted).
        host_s_per_seq: host time per sequence of a step that the GPU waits for (s): a
            synchronous engine's (`experiments.deployment.host_s_per_seq`); 0 by default.

    Raises:
        ValueError: an efficiency outside (0, 1], a negative latency or overhead, or a
            tensor-parallel size the model's heads or FFN width cannot be split by.
    """

    # Pricing a step changes nothing (no step counts): the simulator's windows may price steps
    # they then do not run (`simulator.replica`).
    prices_without_counting = True

    def __init__(
        self,
        model: ModelSpec,
        device: DeviceSpec,
        tensor_parallel_size: int = 1,
        dtype_bytes: int = 2,
        kv_dtype_bytes: int = 2,
        flops_efficiency: float | None = None,
        bandwidth_efficiency: float | None = None,
        step_overhead_s: float | None = None,
        kernel_latency_s: float | None = None,
        host_s_per_seq: float = 0.0,
    ) -> None:
        given = (flops_efficiency, bandwidth_efficiency, kernel_latency_s)
        flops_efficiency = device.gemm_flops_efficiency if flops_efficiency is None else flops_efficiency
        bandwidth_efficiency = device.memory_bandwidth_efficiency if bandwidth_efficiency is None else bandwidth_efficiency
        step_overhead_s = device.step_overhead_s if step_overhead_s is None else step_overhead_s
        kernel_latency_s = device.kernel_latency_s if kernel_latency_s is None else kernel_latency_s
        if not (0 < flops_efficiency <= 1 and 0 < bandwidth_efficiency <= 1):
            raise ValueError(f"efficiencies must be in (0, 1], got flops {flops_efficiency}, "
                             f"bandwidth {bandwidth_efficiency}")
        if step_overhead_s < 0 or kernel_latency_s < 0 or not host_s_per_seq >= 0:
            raise ValueError(f"step_overhead_s and kernel_latency_s must be >= 0, got {step_overhead_s}, "
                             f"{kernel_latency_s}")
        self.model = model
        self.device = device
        self.tensor_parallel_size = tp = tensor_parallel_size
        self.dtype_bytes = dtype_bytes
        self.kv_dtype_bytes = kv_dtype_bytes
        self.flops_efficiency = flops_efficiency
        self.bandwidth_efficiency = bandwidth_efficiency
        self.step_overhead_s = step_overhead_s
        self.host_s_per_seq = host_s_per_seq  # a synchronous engine's host time per sequence (MeasuredCostModel)
        self.kernel_latency_s = kernel_latency_s
        # The GEMMs' own terms: the FP8 path's where the weights are 1 byte and the device has a fit.
        gemm = device.gemm_terms(dtype_bytes)
        self._gemm_terms = tuple(device_value if value is None else value for value, device_value in
                                 zip(given, (gemm.flops_efficiency, gemm.bandwidth_efficiency, gemm.latency_s)))

        self._layer_gemms = model.layer_gemm_shapes(tp)
        # A quantised model's layer GEMMs run its format's kernel (profiler/quantization.py); the LM
        # head stays BF16 (vLLM quantises `LinearBase` layers only, not `ParallelLMHead`).
        self.weight_kernel = (None if model.quantization is None or model.quantization.experts_only
                              else kernel_for(model.quantization, device))  # MXFP4: the experts' only
        if self.weight_kernel in ("fp8", "fp8_block"):
            fp8 = device.gemm_terms(1)
            self._layer_gemm_terms = tuple(d if v is None else v for v, d in
                                           zip(given, (fp8.flops_efficiency, fp8.bandwidth_efficiency, fp8.latency_s)))
        self._lm_head_out = -(-model.vocab_size // tp)  # vocab-parallel LM head: ceil(vocab / tp)
        heads_per_rank = model.num_attention_heads // tp
        # Attention reads Q and writes O in the activation dtype; K and V live in the KV dtype.
        self._attn_flops_per_pair = 4.0 * heads_per_rank * model.head_dim  # QK^T and PV, 2 each
        if model.attn_logit_softcapping:
            self._attn_flops_per_pair += SOFTCAP_FLOPS_PER_LOGIT * heads_per_rank
        # Windowed layers (profiler/sliding_window.py) and sinks take the general path of every method.
        self._full_layers, self._window = model.num_full_layers, model.sliding_window
        self._sink_flops_per_query = SINK_FLOPS_PER_ROW * heads_per_rank if model.attention_sinks else 0.0
        self._plain = not (self._window or self._sink_flops_per_query or model.kv_lora_rank)
        # MLA (profiler/mla.py): FLOPs per pair by path, as multiples of `_attn_flops_per_pair`, and the
        # pairs' worth of a prefill's context up-projection per context token.
        self._pair_scale, self._context_pairs = (1.0, 1.0), 0.0
        if model.kv_lora_rank:
            prefill, decode, context = mla_flops(model, tp)
            self._pair_scale = (prefill / self._attn_flops_per_pair, decode / self._attn_flops_per_pair)
            self._context_pairs = context / self._attn_flops_per_pair
        # A mixture of experts' leading dense layers (DeepSeek first_k_dense_replace): their MLP GEMMs.
        self._dense_mlp_gemms = model.mlp_gemm_shapes(tp) if model.num_dense_layers else ()
        self._qo_bytes_per_token = 2.0 * heads_per_rank * model.head_dim * dtype_bytes
        self._kv_bytes_per_token_layer = model.kv_bytes_per_token(kv_dtype_bytes, tp) / model.num_layers
        # Attention runs in BF16 even with FP8 weights (vLLM dequantises an FP8 KV cache).
        # The attention kernel has its own terms where the device has them fitted.
        attention = device.attention_terms() if device.attention is not None else AttentionFit(
            flops_efficiency, bandwidth_efficiency, kernel_latency_s, 0.0)
        self._attn_flops_per_s = device.peak_bf16_flops * attention.flops_efficiency
        self._attn_bytes_per_s = device.mem_bandwidth_bytes_per_s * attention.bandwidth_efficiency
        self._attn_latency_s = attention.latency_s
        self._attn_per_seq_s = attention.per_sequence_s
        self._bytes_per_s = device.mem_bandwidth_bytes_per_s * bandwidth_efficiency
        self._elementwise_bytes_per_token = elementwise_bytes_per_token(model, tp, dtype_bytes, kv_dtype_bytes)
        self._elementwise_launch_s = (model.num_layers * (ELEMENTWISE_KERNELS_PER_LAYER - (model.moe is not None))
                                      + ELEMENTWISE_KERNELS_PER_STEP) * kernel_latency_s
        self._num_all_reduces = 2 * model.num_layers + 1  # o_proj, down_proj per layer; embedding
        self._token_cache: dict[int, float] = {}
        self._seq_cache: dict[int, float] = {}

    def predict_step_s(self, query_tokens: np.ndarray, context_tokens: np.ndarray,
                       is_prefill: np.ndarray) -> float:
        """Duration (s) of one step; 0.0 for an empty batch. Arrays as in `CostModel`.

        The same sum as `breakdown`, without building its dict: this runs once per simulated step.
        """
        num_seqs = len(query_tokens)
        if not len(context_tokens) == num_seqs == len(is_prefill):
            return sum(self.breakdown(query_tokens, context_tokens, is_prefill).values())  # raises, naming shapes
        if num_seqs == 0:
            return 0.0
        if not self._plain:
            q = np.asarray(query_tokens, dtype=np.float64)
            attention_s = sum(self._attention_s(q, np.asarray(context_tokens, dtype=np.float64),
                                                np.asarray(is_prefill, dtype=bool)))
            return self._token_s(int(q.sum())) + self._seq_s(num_seqs) + attention_s + self.step_overhead_s
        if isinstance(query_tokens, list) and num_seqs <= _PYTHON_SUMS_MAX_SEQS:
            num_tokens, attention_s = self._attention_from_lists(query_tokens, context_tokens, is_prefill)
        else:
            query_tokens = np.asarray(query_tokens)
            num_tokens = int(query_tokens.sum())
            if num_tokens == num_seqs and not np.any(is_prefill):
                # Plain decodes (q = 1 each): q c + q (q + 1) / 2 = c + 1 pairs, c + q KV tokens read.
                context = float(np.asarray(context_tokens).sum())
                attention_s = self._attention_group_s(context + num_seqs, context + num_seqs, num_seqs, num_seqs)
            else:
                q = np.asarray(query_tokens, dtype=np.float64)
                c = np.asarray(context_tokens, dtype=np.float64)
                attention_s = sum(self._attention_s(q, c, np.asarray(is_prefill, dtype=bool)))
        return self._token_s(num_tokens) + self._seq_s(num_seqs) + attention_s + self.step_overhead_s

    def _attention_from_lists(self, query_tokens: list, context_tokens: list, is_prefill: list) -> tuple[int, float]:
        """(tokens in the step, attention seconds) from plain lists with integer sums, which
        equal the numpy path's float sums exactly (every term is an integer below 2**53): for a
        step's few dozen sequences, cheaper than a dozen small-array numpy calls."""
        num_seqs = len(query_tokens)
        num_tokens = sum(query_tokens)
        if num_tokens == num_seqs and not any(is_prefill):
            context = float(sum(context_tokens))
            return num_tokens, self._attention_group_s(context + num_seqs, context + num_seqs, num_seqs, num_seqs)
        prefill_pairs = prefill_kv = prefill_q = prefill_c = 0
        prefills = [i for i, prefill in enumerate(is_prefill) if prefill]  # a mixed step: usually one
        for i in prefills:
            q, c = query_tokens[i], context_tokens[i]
            prefill_pairs += q * c + q * (q + 1) // 2
            prefill_kv += c + q
            prefill_q += q
            prefill_c += c
        num_decodes = num_seqs - len(prefills)
        decode_q = num_tokens - prefill_q
        decode_c = sum(context_tokens) - prefill_c
        decode_kv = decode_c + decode_q
        if decode_q == num_decodes:  # plain decodes (q = 1): c + 1 pairs each
            decode_pairs = decode_c + num_decodes
        else:  # verifies among them
            decode_pairs = 0
            for q, c, prefill in zip(query_tokens, context_tokens, is_prefill):
                if not prefill:
                    decode_pairs += q * c + q * (q + 1) // 2
        if not prefill_q:
            return num_tokens, self._attention_group_s(decode_pairs, decode_kv, decode_q, num_decodes)
        return num_tokens, (self._attention_group_s(prefill_pairs, prefill_kv, prefill_q, len(prefills))
                            + self._attention_group_s(decode_pairs, decode_kv, decode_q, num_decodes))

    def predict_decode_steps_s(self, context_tokens, num_steps: int, first_step: int = 0) -> list[float]:
        """Durations (s) of consecutive plain-decode steps of the same sequences.

        Entry j is the step `predict_step_s(ones, context_tokens + first_step + j, zeros)`
        would price, and equals that float exactly (the same operations in the same order): the
        simulator's decode windows price a run of steps in one call.

        Args:
            context_tokens: ints, shape (num_seqs,): KV tokens of each sequence at step 0.
            num_steps: how many steps to price, from `first_step`.

        Returns:
            A list of `num_steps` floats.
        """
        num_seqs = len(context_tokens)
        if num_seqs == 0:
            return [0.0] * num_steps
        if not self._plain:
            ones, zeros, c = [1] * num_seqs, [False] * num_seqs, np.asarray(context_tokens, dtype=np.int64)
            return [self.predict_step_s(ones, c + j, zeros) for j in range(first_step, first_step + num_steps)]
        base_s = self._token_s(num_seqs) + self._seq_s(num_seqs)
        context0 = float(sum(context_tokens) if isinstance(context_tokens, list) else np.asarray(context_tokens).sum())
        layers, per_pair, flops_per_s = self.model.num_layers, self._attn_flops_per_pair, self._attn_flops_per_s
        kv_per_token, bytes_per_s, latency_s = self._kv_bytes_per_token_layer, self._attn_bytes_per_s, self._attn_latency_s
        qo_bytes = self._qo_bytes_per_token * float(num_seqs)
        per_seq_s = self._attn_per_seq_s * num_seqs
        durations = []
        for j in range(first_step, first_step + num_steps):
            tokens = context0 + num_seqs * j + num_seqs  # exact: integers; pairs = KV tokens = c + 1 each
            attention_s = layers * (max(per_pair * tokens / flops_per_s,
                                        (kv_per_token * tokens + qo_bytes) / bytes_per_s) + latency_s + per_seq_s)
            durations.append(base_s + attention_s + self.step_overhead_s)
        return durations

    def breakdown(self, query_tokens: np.ndarray, context_tokens: np.ndarray,
                  is_prefill: np.ndarray) -> dict[str, float]:
        """Seconds per part of one step, all layers: keys `linear_s`, `elementwise_s`,
        `all_reduce_s`, `attention_prefill_s`, `attention_decode_s`, `lm_head_s`,
        `logits_gather_s`, `sampler_s`, `overhead_s`; all 0.0 for an empty batch.

        Args: aligned arrays of shape (num_seqs,), as in `CostModel.predict_step_s`.

        Raises:
            ValueError: the arrays differ in length.
        """
        q, c, prefill = step_arrays(query_tokens, context_tokens, is_prefill)
        names = ("linear_s", "elementwise_s", "all_reduce_s", "attention_prefill_s", "attention_decode_s",
                 "lm_head_s", "logits_gather_s", "sampler_s", "overhead_s")
        if q.size == 0:
            return dict.fromkeys(names, 0.0)
        num_tokens, num_seqs = int(q.sum()), q.size
        attention_prefill_s, attention_decode_s = self._attention_s(q, c, prefill)
        parts = (*self._token_parts(num_tokens), attention_prefill_s, attention_decode_s,
                 *self._seq_parts(num_seqs), self.step_overhead_s + self.host_s_per_seq * num_seqs)
        return dict(zip(names, parts))

    def _gemm_s(self, m: int, n: int, k: int) -> float:
        return gemm_time_s(m, n, k, self.device, self.dtype_bytes, *self._gemm_terms)

    def _layer_gemm_s(self, m: int, n: int, k: int) -> float:
        """One decoder-layer GEMM: `_gemm_s`, or the quantised format's path (W8A8 FP8 at the FP8
        peak and terms; weight-only at the BF16 terms with the packed weight bytes)."""
        if self.weight_kernel is None:
            return self._gemm_s(m, n, k)
        if self.weight_kernel == "weight_only":
            return weight_only_gemm_time_s(m, n, k, self.device, self.model.quantization.bytes_per_param,
                                           *self._gemm_terms)
        return gemm_time_s(m, n, k, self.device, 1, *self._layer_gemm_terms)

    def _token_parts(self, num_tokens: int) -> tuple[float, float, float]:
        """(linear_s, elementwise_s, all_reduce_s) of a step of `num_tokens` tokens, all layers."""
        layers = self.model.num_layers
        linear_s = layers * sum(self._layer_gemm_s(num_tokens, out_dim, in_dim) for _, in_dim, out_dim in self._layer_gemms)
        if self._dense_mlp_gemms:  # a mixture of experts' dense layers
            linear_s += self.model.num_dense_layers * sum(self._layer_gemm_s(num_tokens, out_dim, in_dim)
                                                          for _, in_dim, out_dim in self._dense_mlp_gemms)
        elementwise_s = self._elementwise_bytes_per_token * num_tokens / self._bytes_per_s + self._elementwise_launch_s
        all_reduce_bytes = num_tokens * self.model.hidden_size * self.dtype_bytes
        all_reduce_s = self._num_all_reduces * ring_all_reduce_time_s(all_reduce_bytes, self.device,
                                                                      self.tensor_parallel_size)
        return linear_s, elementwise_s, all_reduce_s

    def _token_s(self, num_tokens: int) -> float:
        """Everything that scales with the step's token count, memoised on it: a simulation asks
        for the same few thousand counts over and over."""
        cached = self._token_cache.get(num_tokens)
        if cached is None:
            cached = self._token_cache[num_tokens] = sum(self._token_parts(num_tokens))
        return cached

    def _seq_parts(self, num_seqs: int) -> tuple[float, float, float]:
        """(lm_head_s, logits_gather_s, sampler_s) over one logit row per sequence.

        Only a sequence that emits a token needs logits: every decode, and a prefill chunk only
        when it is the prompt's last. The arrays do not say which chunk is last, so every prefill
        chunk is counted: an upper bound, off by one row per non-final chunk.
        """
        vocab_shard, vocab = self._lm_head_out, self.model.vocab_size
        lm_head_s = self._gemm_s(num_seqs, vocab_shard, self.model.hidden_size)
        logits_gather_s = all_gather_time_s(num_seqs * vocab * self.dtype_bytes, self.device, self.tensor_parallel_size)
        sampler_bytes = num_seqs * vocab * (self.dtype_bytes + SAMPLER_FP32_PASSES * _FP32_BYTES)
        sampler_s = sampler_bytes / self._bytes_per_s + SAMPLER_KERNELS * self.kernel_latency_s
        return lm_head_s, logits_gather_s, sampler_s

    def _seq_s(self, num_seqs: int) -> float:
        cached = self._seq_cache.get(num_seqs)
        if cached is None:
            cached = self._seq_cache[num_seqs] = sum(self._seq_parts(num_seqs)) + self.host_s_per_seq * num_seqs
        return cached

    def _attention_s(self, q: np.ndarray, c: np.ndarray, prefill: np.ndarray) -> tuple[float, float]:
        """Attention of all layers, prefill sequences priced as one kernel and decodes as another
        (a group with no sequence costs nothing).

        Per sequence and layer: FLOPs = 4 × heads/tp × head_dim × (q c + q (q + 1) / 2), the
        query attending to its context and causally to itself; bytes = KV read of (c + q) tokens
        (KV bytes per token per layer / tp each) + Q read and O write (q × 2 × heads/tp ×
        head_dim × dtype bytes). The KV write is the cache-write kernel's (`elementwise_s`).
        """
        if not self._plain:
            return self._windowed_attention_s(q, c, prefill)
        pairs = q * c + q * (q + 1) / 2  # query-key pairs, causal within the chunk
        kv_tokens = c + q
        if not prefill.any():  # decode-only step: the common case, one group
            return 0.0, self._attention_group_s(pairs.sum(), kv_tokens.sum(), q.sum(), q.size)
        decode = ~prefill
        decode_s = (self._attention_group_s(pairs[decode].sum(), kv_tokens[decode].sum(), q[decode].sum(),
                                            int(decode.sum())) if decode.any() else 0.0)
        return (self._attention_group_s(pairs[prefill].sum(), kv_tokens[prefill].sum(), q[prefill].sum(),
                                        int(prefill.sum())), decode_s)

    def _windowed_attention_s(self, q: np.ndarray, c: np.ndarray, prefill: np.ndarray) -> tuple[float, float]:
        """`_attention_s` of a model with windowed layers, sinks or MLA: the full layers over every
        pair, the windowed ones over `windowed_pairs` / `windowed_kv_tokens`, each group's sink
        FLOPs added as pairs' worth (`_sink_flops_per_query` per query token); MLA's pairs at its
        prefill or decode FLOPs and a prefill's context up-projection (`profiler.mla`)."""
        sink_pairs = q * (self._sink_flops_per_query / self._attn_flops_per_pair)
        groups = [(self._full_layers, q * c + q * (q + 1) / 2 + sink_pairs, c + q)]
        if self._window:
            window = self._window
            groups.append((self.model.num_sliding_layers, windowed_pairs(q, c, window) + sink_pairs,
                           windowed_kv_tokens(q, c, window)))
        parts = [0.0, 0.0]
        for index, mask in enumerate((prefill, ~prefill)):
            if not mask.any():
                continue
            scale = self._pair_scale[index]
            extra = self._context_pairs * c[mask].sum() if index == 0 else 0.0  # MLA: context up-projection
            for layers, pairs, kv_tokens in groups:
                if layers:
                    parts[index] += layers / self.model.num_layers * self._attention_group_s(
                        scale * pairs[mask].sum() + extra, kv_tokens[mask].sum(), q[mask].sum(), int(mask.sum()))
        return parts[0], parts[1]

    def _attention_group_s(self, pairs: float, kv_tokens: float, query_tokens: float, num_seqs: int) -> float:
        """All layers of one attention kernel over a group of `num_seqs` sequences, from the
        group's sums: the roofline at the attention terms (`DeviceSpec.attention_terms`) + the
        call's latency + a cost per sequence; 0 for an empty group."""
        if not query_tokens:
            return 0.0
        flops = self._attn_flops_per_pair * float(pairs)
        num_bytes = (self._kv_bytes_per_token_layer * float(kv_tokens)
                     + self._qo_bytes_per_token * float(query_tokens))
        return self.model.num_layers * (roofline_time_s(flops, num_bytes, self._attn_flops_per_s, self._attn_bytes_per_s)
                                        + self._attn_latency_s + self._attn_per_seq_s * num_seqs)
