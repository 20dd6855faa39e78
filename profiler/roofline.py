"""`RooflineCostModel`: a step's time from datasheet peaks, before any measured profile exists.

Each part of a forward step (weight GEMMs, LM head, attention, tensor-parallel all-reduces) is
priced on the roofline (Williams, Waterman, Patterson, CACM 2009): the slower of its FLOPs over the
derated compute peak and its bytes over the derated memory bandwidth. A Llama step is the sum of
its parts plus a fixed per-step overhead. Not priced separately: the embedding gather, RMSNorm,
rotary, SiLU and sampling (small element-wise work, left to the overhead and to calibration).

The default efficiencies and overhead below are **assumptions**, not measurements; a measured
profile replaces them (issue "Calibration"):

- `FLOPS_EFFICIENCY = 0.6`: large BF16 GEMMs reach roughly 60-75 % of the dense tensor-core peak
  in cuBLAS [recall, not measured here]; serving shapes (a few hundred to a few thousand rows)
  sit at the low end.
- `BANDWIDTH_EFFICIENCY = 0.8`: memory-bound kernels (decode GEMVs, paged attention) typically
  stream at 75-85 % of the datasheet HBM bandwidth [recall, not measured here].
- `STEP_OVERHEAD_S = 0.5e-3`: CPU work per step outside the kernels (scheduling, input
  preparation, sampling, launch of a CUDA-graph-captured decode).

With these, llama-3-8b on h100-sxm decodes one sequence (context 1000) in about 6.2 ms per step:
the GEMM weights (all but the embedding table, which is gathered, not streamed) take
15.0e9 B / (3.35e12 B/s × 0.8) = 5.6 ms, attention 0.05 ms, the overhead 0.5 ms.
"""
from __future__ import annotations

import numpy as np

from profiler.cost_model import step_arrays
from profiler.device_spec import DeviceSpec
from profiler.model_spec import ModelSpec

FLOPS_EFFICIENCY = 0.6  # assumption, see module docstring
BANDWIDTH_EFFICIENCY = 0.8  # assumption, see module docstring
STEP_OVERHEAD_S = 0.5e-3  # assumption, see module docstring


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
    flops_efficiency: float = FLOPS_EFFICIENCY,
    bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY,
) -> float:
    """Roofline time (s) of an (m × k) @ (k × n) GEMM: m tokens through a k-in, n-out weight.

    FLOPs = 2 m n k (one multiply and one add per MAC). Bytes = (m k + k n + m n) × dtype_bytes:
    the input activations, the weight and the output, each moved once (ideal tiling). The compute
    peak is `device.peak_flops(dtype_bytes)` × flops_efficiency; the bandwidth is
    `device.mem_bandwidth_bytes_per_s` × bandwidth_efficiency.
    """
    flops = 2.0 * m * n * k
    num_bytes = float(m * k + k * n + m * n) * dtype_bytes
    return roofline_time_s(flops, num_bytes, device.peak_flops(dtype_bytes) * flops_efficiency,
                           device.mem_bandwidth_bytes_per_s * bandwidth_efficiency)


def ring_all_reduce_time_s(num_bytes: float, device: DeviceSpec, tp: int) -> float:
    """Time (s) of one ring all-reduce of `num_bytes` over `tp` GPUs; 0 when tp = 1.

    2 (tp − 1) / tp × num_bytes / link bandwidth + latency: a ring reduce-scatter then all-gather,
    each moving (tp − 1) / tp of the buffer through every link (Patarasuk & Yuan, JPDC 2009; the
    "bus bandwidth" factor of nccl-tests). `interconnect_latency_s` stands for the whole
    collective's fixed cost.
    """
    if tp == 1:
        return 0.0
    return (2.0 * (tp - 1) / tp * num_bytes / device.interconnect_bandwidth_bytes_per_s
            + device.interconnect_latency_s)


# Steps with at most this many sequences given as lists are summed in plain Python (cheaper
# than numpy's per-call overhead at that size; the sums are the same integers either way).
_PYTHON_SUMS_MAX_SEQS = 256


class RooflineCostModel:
    """Prices one step of a Llama-family model on a device from datasheet figures.

    Implements the `CostModel` protocol (`profiler/cost_model.py`). All per-model constants are
    computed here once, so that a step costs a handful of numpy reductions (microseconds).

    Args:
        model: the model's shapes.
        device: the device's datasheet figures.
        tensor_parallel_size: GPUs the model is sharded over (Megatron-style, as vLLM).
        dtype_bytes: bytes per weight and activation element (2 for bf16, 1 for fp8).
        kv_dtype_bytes: bytes per KV-cache element.
        flops_efficiency, bandwidth_efficiency: fractions of the datasheet peaks that kernels
            reach (assumptions until calibrated; see the module docstring).
        step_overhead_s: fixed CPU/launch time per step, seconds.

    Raises:
        ValueError: an efficiency outside (0, 1], a negative overhead, or a tensor-parallel size
            the model's heads or FFN width cannot be split by.
    """

    def __init__(
        self,
        model: ModelSpec,
        device: DeviceSpec,
        tensor_parallel_size: int = 1,
        dtype_bytes: int = 2,
        kv_dtype_bytes: int = 2,
        flops_efficiency: float = FLOPS_EFFICIENCY,
        bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY,
        step_overhead_s: float = STEP_OVERHEAD_S,
    ) -> None:
        if not (0 < flops_efficiency <= 1 and 0 < bandwidth_efficiency <= 1):
            raise ValueError(f"efficiencies must be in (0, 1], got flops {flops_efficiency}, "
                             f"bandwidth {bandwidth_efficiency}")
        if step_overhead_s < 0:
            raise ValueError(f"step_overhead_s must be >= 0, got {step_overhead_s}")
        self.model = model
        self.device = device
        self.tensor_parallel_size = tp = tensor_parallel_size
        self.dtype_bytes = dtype_bytes
        self.kv_dtype_bytes = kv_dtype_bytes
        self.flops_efficiency = flops_efficiency
        self.bandwidth_efficiency = bandwidth_efficiency
        self.step_overhead_s = step_overhead_s

        self._layer_gemms = model.layer_gemm_shapes(tp)
        self._lm_head_out = -(-model.vocab_size // tp)  # vocab-parallel LM head: ceil(vocab / tp)
        heads_per_rank = model.num_attention_heads // tp
        # Attention reads Q and writes O in the activation dtype; K and V live in the KV dtype.
        self._attn_flops_per_pair = 4.0 * heads_per_rank * model.head_dim  # QK^T and PV, 2 each
        self._qo_bytes_per_token = 2.0 * heads_per_rank * model.head_dim * dtype_bytes
        self._kv_bytes_per_token_layer = model.kv_bytes_per_token(kv_dtype_bytes, tp) / model.num_layers
        # Attention runs in BF16 even with FP8 weights (vLLM dequantises an FP8 KV cache).
        self._attn_flops_per_s = device.peak_bf16_flops * flops_efficiency
        self._bytes_per_s = device.mem_bandwidth_bytes_per_s * bandwidth_efficiency
        self._linear_cache: dict[int, float] = {}
        self._lm_head_cache: dict[int, float] = {}
        self._all_reduce_cache: dict[int, float] = {}

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
        if isinstance(query_tokens, list) and num_seqs <= _PYTHON_SUMS_MAX_SEQS:
            num_tokens, attention_s = self._attention_from_lists(query_tokens, context_tokens, is_prefill)
        else:
            query_tokens = np.asarray(query_tokens)
            num_tokens = int(query_tokens.sum())
            if num_tokens == num_seqs and not np.any(is_prefill):
                # Plain decodes (q = 1 each): q c + q (q + 1) / 2 = c + 1 pairs, c + 2 q KV tokens.
                context = float(np.asarray(context_tokens).sum())
                attention_s = self._attention_group_s(context + num_seqs, context + 2 * num_seqs, num_seqs)
            else:
                q = np.asarray(query_tokens, dtype=np.float64)
                c = np.asarray(context_tokens, dtype=np.float64)
                attention_s = sum(self._attention_s(q, c, np.asarray(is_prefill, dtype=bool)))
        return (self._linear_s(num_tokens) + self._lm_head_s(num_seqs) + attention_s
                + self._all_reduce_s(num_tokens) + self.step_overhead_s)

    def _attention_from_lists(self, query_tokens: list, context_tokens: list, is_prefill: list) -> tuple[int, float]:
        """(tokens in the step, attention seconds) from plain lists with integer sums, which
        equal the numpy path's float sums exactly (every term is an integer below 2**53): for a
        step's few dozen sequences, cheaper than a dozen small-array numpy calls."""
        num_seqs = len(query_tokens)
        num_tokens = sum(query_tokens)
        if num_tokens == num_seqs and not any(is_prefill):
            context = float(sum(context_tokens))
            return num_tokens, self._attention_group_s(context + num_seqs, context + 2 * num_seqs, num_seqs)
        prefill_pairs = prefill_kv = prefill_q = prefill_c = 0
        prefills = [i for i, prefill in enumerate(is_prefill) if prefill]  # a mixed step: usually one
        for i in prefills:
            q, c = query_tokens[i], context_tokens[i]
            prefill_pairs += q * c + q * (q + 1) // 2
            prefill_kv += c + 2 * q
            prefill_q += q
            prefill_c += c
        num_decodes = num_seqs - len(prefills)
        decode_q = num_tokens - prefill_q
        if decode_q == num_decodes:  # plain decodes (q = 1): c + 1 pairs and c + 2 KV tokens each
            decode_c = sum(context_tokens) - prefill_c
            decode_pairs, decode_kv = decode_c + num_decodes, decode_c + 2 * num_decodes
        else:  # verifies among them
            decode_pairs = decode_kv = 0
            for q, c, prefill in zip(query_tokens, context_tokens, is_prefill):
                if not prefill:
                    decode_pairs += q * c + q * (q + 1) // 2
                    decode_kv += c + 2 * q
        if not prefill_q:
            return num_tokens, self._attention_group_s(decode_pairs, decode_kv, decode_q)
        return num_tokens, (self._attention_group_s(prefill_pairs, prefill_kv, prefill_q)
                            + self._attention_group_s(decode_pairs, decode_kv, decode_q))

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
        base_s = self._linear_s(num_seqs) + self._lm_head_s(num_seqs)
        after_s = self._all_reduce_s(num_seqs)
        context0 = float(sum(context_tokens) if isinstance(context_tokens, list) else np.asarray(context_tokens).sum())
        layers, per_pair, flops_per_s = self.model.num_layers, self._attn_flops_per_pair, self._attn_flops_per_s
        kv_per_token, bytes_per_s = self._kv_bytes_per_token_layer, self._bytes_per_s
        qo_bytes = self._qo_bytes_per_token * float(num_seqs)
        durations = []
        for j in range(first_step, first_step + num_steps):
            context = context0 + num_seqs * j  # exact: integers
            attention_s = layers * max(per_pair * (context + num_seqs) / flops_per_s,
                                       (kv_per_token * (context + 2 * num_seqs) + qo_bytes) / bytes_per_s)
            durations.append(base_s + attention_s + after_s + self.step_overhead_s)
        return durations

    def breakdown(self, query_tokens: np.ndarray, context_tokens: np.ndarray,
                  is_prefill: np.ndarray) -> dict[str, float]:
        """Seconds per part of one step: keys `linear_s`, `lm_head_s`, `attention_prefill_s`,
        `attention_decode_s`, `all_reduce_s`, `overhead_s`; all 0.0 for an empty batch.

        Args: aligned arrays of shape (num_seqs,), as in `CostModel.predict_step_s`.

        Raises:
            ValueError: the arrays differ in length.
        """
        q, c, prefill = step_arrays(query_tokens, context_tokens, is_prefill)
        names = ("linear_s", "lm_head_s", "attention_prefill_s", "attention_decode_s",
                 "all_reduce_s", "overhead_s")
        if q.size == 0:
            return dict.fromkeys(names, 0.0)
        num_tokens = int(q.sum())
        attention_prefill_s, attention_decode_s = self._attention_s(q, c, prefill)
        parts = (
            self._linear_s(num_tokens),
            self._lm_head_s(q.size),
            attention_prefill_s,
            attention_decode_s,
            self._all_reduce_s(num_tokens),
            self.step_overhead_s,
        )
        return dict(zip(names, parts))

    def _gemm_s(self, m: int, n: int, k: int) -> float:
        return gemm_time_s(m, n, k, self.device, self.dtype_bytes, self.flops_efficiency,
                           self.bandwidth_efficiency)

    def _linear_s(self, num_tokens: int) -> float:
        """The four weight GEMMs of every layer, all tokens of the step in one GEMM each.

        Memoised on the token count: a simulation asks for the same few thousand counts over and
        over, and each miss costs four roofline evaluations.
        """
        cached = self._linear_cache.get(num_tokens)
        if cached is None:
            per_layer = sum(self._gemm_s(num_tokens, out_dim, in_dim)
                            for _, in_dim, out_dim in self._layer_gemms)
            cached = self._linear_cache[num_tokens] = self.model.num_layers * per_layer
        return cached

    def _lm_head_s(self, num_seqs: int) -> float:
        """LM head over one row per sequence.

        Only a sequence that emits a token needs logits: every decode, and a prefill chunk only
        when it is the prompt's last. The arrays do not say which chunk is last, so every prefill
        chunk is counted: an upper bound, off by one GEMV row per non-final chunk.
        """
        cached = self._lm_head_cache.get(num_seqs)
        if cached is None:
            cached = self._lm_head_cache[num_seqs] = self._gemm_s(num_seqs, self._lm_head_out, self.model.hidden_size)
        return cached

    def _attention_s(self, q: np.ndarray, c: np.ndarray, prefill: np.ndarray) -> tuple[float, float]:
        """Attention of all layers, prefill sequences priced as one kernel and decodes as another.

        Per sequence and layer: FLOPs = 4 × heads/tp × head_dim × (q c + q (q + 1) / 2), the
        query attending to its context and causally to itself; bytes = KV read of (c + q) tokens
        + KV write of q tokens (KV bytes per token per layer / tp each) + Q read and O write
        (q × 2 × heads/tp × head_dim × dtype bytes).
        """
        pairs = q * c + q * (q + 1) / 2  # query-key pairs, causal within the chunk
        kv_tokens = c + 2 * q  # KV read of c + q tokens and write of q
        if not prefill.any():  # decode-only step: the common case, one group
            return 0.0, self._attention_group_s(pairs.sum(), kv_tokens.sum(), q.sum())
        decode = ~prefill
        return (self._attention_group_s(pairs[prefill].sum(), kv_tokens[prefill].sum(), q[prefill].sum()),
                self._attention_group_s(pairs[decode].sum(), kv_tokens[decode].sum(), q[decode].sum()))

    def _attention_group_s(self, pairs: float, kv_tokens: float, query_tokens: float) -> float:
        """All layers of one attention kernel over a group of sequences, from the group's sums."""
        flops = self._attn_flops_per_pair * float(pairs)
        num_bytes = (self._kv_bytes_per_token_layer * float(kv_tokens)
                     + self._qo_bytes_per_token * float(query_tokens))
        return self.model.num_layers * roofline_time_s(flops, num_bytes, self._attn_flops_per_s,
                                                       self._bytes_per_s)

    def _all_reduce_s(self, num_tokens: int) -> float:
        """Two all-reduces per layer (after o_proj and after down_proj) of tokens × hidden."""
        cached = self._all_reduce_cache.get(num_tokens)
        if cached is None:
            num_bytes = num_tokens * self.model.hidden_size * self.dtype_bytes
            cached = self._all_reduce_cache[num_tokens] = 2 * self.model.num_layers * ring_all_reduce_time_s(
                num_bytes, self.device, self.tensor_parallel_size)
        return cached
