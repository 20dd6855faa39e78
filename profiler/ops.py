"""The op catalogue: every kernel of one Llama-family forward step, its shape key and its work.

One tensor-parallel rank runs, per step of T tokens over S sequences (vLLM's Llama,
`vllm/model_executor/models/llama.py`, and Vidur's op list, `vidur/profiling/mlp/mlp_impl.py`):

- once per step: `embedding` (T rows), the final `rmsnorm` (T), `lm_head` and `sampler` (one row
  per sequence that samples, S), and `cpu_overhead` (the runner's per-step host work, S sequences);
- per layer: `rmsnorm` ×2, `qkv_proj`, `rotary_emb`, `kv_cache_write`, attention, `o_proj`,
  `all_reduce` ×2 (tp > 1), `gate_up_proj`, `silu_and_mul`, `down_proj`, `residual_add` ×2;
- attention as two kernels: `attention_prefill` per prefill sequence (a query chunk of q tokens
  over c cached tokens), `attention_decode` over a batch of B decoding sequences of c cached tokens.

Each op states its FLOPs and bytes moved (the roofline's inputs) as vectorised functions of its
shape key, one value per row. Element widths are in bytes: `dtype_bytes` for weights and
activations, `kv_dtype_bytes` for the KV cache, and 4 for the fp32 logits the sampler reads.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from profiler.model_spec import ModelSpec

# Which step quantity drives an op's shape key.
TOKENS = "tokens"  # num_tokens = all query tokens of the step (T)
SEQS = "seqs"  # num_tokens = sequences in the step, one logit row or input row each (S)
PREFILL_SEQ = "prefill_seq"  # (query_tokens, context_tokens) per prefill sequence
DECODE_BATCH = "decode_batch"  # (batch_size, context_tokens): the decoding sequences, mean context

FAMILIES = ("linear", "elementwise", "attention_prefill", "attention_decode", "all_reduce",
            "cpu_overhead")
KEYS = {TOKENS: ("num_tokens",), SEQS: ("num_tokens",), PREFILL_SEQ: ("query_tokens", "context_tokens"),
        DECODE_BATCH: ("batch_size", "context_tokens")}
_LOGIT_BYTES = 4  # logits are sampled in fp32 (vLLM `Sampler`)
# Nominal host bytes per sequence for the runner's input preparation (positions, slot mapping and a
# block-table row): an assumption that gives `cpu_overhead` a work term that grows with the batch;
# the fit rescales it.
_HOST_BYTES_PER_SEQ = 256


@dataclass(frozen=True)
class Op:
    """One kernel of the step.

    Attributes:
        name: op name (vLLM's layer names where there is one).
        family: profile CSV the op's timings go to (one of `FAMILIES`).
        driver: which step quantity sets the key (`TOKENS`, `SEQS`, `PREFILL_SEQ`, `DECODE_BATCH`).
        per_layer: calls per layer per step.
        per_step: calls per step outside the layers.
        in_dim, out_dim: GEMM weight shape (k, n) for `linear` ops; 0 otherwise.
        read_per_token, write_per_token, flops_per_token: element-wise work per key row, in
            elements and FLOPs (element-wise ops only).
        element_bytes: bytes per element of the element-wise op (dtype, or 4 for fp32 logits).
    """

    name: str
    family: str
    driver: str
    per_layer: int = 0
    per_step: int = 0
    in_dim: int = 0
    out_dim: int = 0
    read_per_token: float = 0.0
    write_per_token: float = 0.0
    flops_per_token: float = 0.0
    element_bytes: int = 2

    @property
    def key(self) -> tuple[str, ...]:
        """The shape columns of this op's profile rows."""
        return KEYS[self.driver]

    def calls_per_step(self, num_layers: int) -> int:
        """How many times one step runs this op: per_layer × layers + per_step."""
        return self.per_layer * num_layers + self.per_step


@dataclass(frozen=True)
class OpCatalogue:
    """The ops of one model at one tensor-parallel degree, and their work.

    Args:
        model: the model's shapes.
        tp: tensor-parallel degree (shapes are one rank's shards).
        dtype_bytes: bytes per weight/activation element (4 for the CPU's fp32, 2 for bf16).
        kv_dtype_bytes: bytes per KV-cache element.

    Raises:
        ValueError: as `ModelSpec.layer_gemm_shapes` for a tp the model cannot be split by.
    """

    model: ModelSpec
    tp: int = 1
    dtype_bytes: int = 2
    kv_dtype_bytes: int = 2

    @property
    def ops(self) -> tuple[Op, ...]:
        """All ops of a step, in execution order (all_reduce only for tp > 1)."""
        m, tp, d = self.model, self.tp, self.dtype_bytes
        h = m.hidden_size
        q_out = m.num_attention_heads // tp * m.head_dim
        kv_out = m.kv_heads_per_rank(tp) * m.head_dim
        ffn = m.intermediate_size // tp
        gemms = tuple(Op(name, "linear", TOKENS, per_layer=1, in_dim=k, out_dim=n, element_bytes=d)
                      for name, k, n in m.layer_gemm_shapes(tp))
        ops = [
            Op("embedding", "elementwise", TOKENS, per_step=1, read_per_token=h, write_per_token=h,
               element_bytes=d),
            # RMSNorm: x² mean, rsqrt, two multiplies ≈ 4 FLOPs an element.
            Op("rmsnorm", "elementwise", TOKENS, per_layer=2, per_step=1, read_per_token=h,
               write_per_token=h, flops_per_token=4 * h, element_bytes=d),
            gemms[0],
            # Rotary (neox style) on q and k: x cos + rotate(x) sin, 3 FLOPs an element.
            Op("rotary_emb", "elementwise", TOKENS, per_layer=1, read_per_token=q_out + kv_out,
               write_per_token=q_out + kv_out, flops_per_token=3 * (q_out + kv_out), element_bytes=d),
            Op("kv_cache_write", "elementwise", TOKENS, per_layer=1, read_per_token=2 * kv_out,
               write_per_token=2 * kv_out, element_bytes=self.kv_dtype_bytes),
            Op("attention_prefill", "attention_prefill", PREFILL_SEQ, per_layer=1, element_bytes=d),
            Op("attention_decode", "attention_decode", DECODE_BATCH, per_layer=1, element_bytes=d),
            gemms[1],
            gemms[2],
            # SiLU(gate) × up: about 5 FLOPs per output element (exp, add, divide, two multiplies).
            Op("silu_and_mul", "elementwise", TOKENS, per_layer=1, read_per_token=2 * ffn,
               write_per_token=ffn, flops_per_token=5 * ffn, element_bytes=d),
            gemms[3],
            Op("residual_add", "elementwise", TOKENS, per_layer=2, read_per_token=2 * h,
               write_per_token=h, flops_per_token=h, element_bytes=d),
            Op("lm_head", "linear", SEQS, per_step=1, in_dim=h, out_dim=-(-m.vocab_size // tp),
               element_bytes=d),
            # Greedy sampling over fp32 logits: softmax (read, write) and argmax (read).
            Op("sampler", "elementwise", SEQS, per_step=1, read_per_token=2 * m.vocab_size,
               write_per_token=m.vocab_size, flops_per_token=5 * m.vocab_size,
               element_bytes=_LOGIT_BYTES),
            Op("cpu_overhead", "cpu_overhead", SEQS, per_step=1),
        ]
        if tp > 1:
            ops.append(Op("all_reduce", "all_reduce", TOKENS, per_layer=2, element_bytes=d))
        return tuple(ops)

    def op(self, name: str) -> Op:
        """The op called `name`.

        Raises:
            KeyError: no such op in this catalogue (the message lists the names).
        """
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(f"no op {name!r}; ops are {[o.name for o in self.ops]}")

    def work(self, op: Op, keys: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(FLOPs, bytes moved) of one call of `op` at each row of its shape key.

        Args:
            op: an op of this catalogue.
            keys: the op's key columns (`op.key`), each an array of shape (n,).

        Returns:
            Two float64 arrays of shape (n,): FLOPs and bytes (one call, one rank).

        Sources: GEMM 2 m n k FLOPs and (m k + k n + m n) elements, as `roofline.gemm_time_s`;
        attention as `RooflineCostModel._attention_s` without the KV write (its own op here): per
        sequence 4 × heads/tp × head_dim × (q c + q (q + 1) / 2) FLOPs, the KV of c + q tokens read
        and Q read + O written; the all-reduce's bytes are the buffer, tokens × hidden.
        """
        if op.family == "linear":
            rows = np.asarray(keys["num_tokens"], dtype=np.float64)
            flops = 2.0 * rows * op.in_dim * op.out_dim
            num_bytes = (rows * op.in_dim + op.in_dim * op.out_dim + rows * op.out_dim) * op.element_bytes
            return flops, num_bytes
        if op.family == "elementwise":
            rows = np.asarray(keys["num_tokens"], dtype=np.float64)
            elements = (op.read_per_token + op.write_per_token) * rows
            return op.flops_per_token * rows, elements * op.element_bytes
        if op.family == "attention_prefill":
            q = np.asarray(keys["query_tokens"], dtype=np.float64)
            c = np.asarray(keys["context_tokens"], dtype=np.float64)
            return self.attention_work(q * c + q * (q + 1) / 2, c + q, q)
        if op.family == "attention_decode":
            batch = np.asarray(keys["batch_size"], dtype=np.float64)
            kv_tokens = batch * (np.asarray(keys["context_tokens"], dtype=np.float64) + 1)
            return self.attention_work(kv_tokens, kv_tokens, batch)
        if op.family == "all_reduce":
            rows = np.asarray(keys["num_tokens"], dtype=np.float64)
            return np.zeros_like(rows), rows * self.model.hidden_size * self.dtype_bytes
        rows = np.asarray(keys["num_tokens"], dtype=np.float64)  # cpu_overhead: host work only
        return np.zeros_like(rows), rows * _HOST_BYTES_PER_SEQ

    def attention_work(self, pairs: np.ndarray, kv_tokens: np.ndarray,
                       query_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(FLOPs, bytes) of one attention kernel over a group of sequences, from the group's sums.

        Args:
            pairs: Σ (q c + q (q + 1) / 2), query-key pairs (the chunk attends to itself causally).
            kv_tokens: Σ (c + q), KV-cache tokens read.
            query_tokens: Σ q.

        FLOPs = 4 × heads/tp × head_dim × pairs (QKᵀ and PV, 2 each); bytes = the KV read
        (2 × KV heads/tp × head_dim × kv_dtype_bytes a token) + Q read and O written
        (q × heads/tp × head_dim × dtype_bytes each). Source: `RooflineCostModel._attention_s`.
        """
        m, tp = self.model, self.tp
        heads = m.num_attention_heads // tp
        kv_per_token = 2 * m.kv_heads_per_rank(tp) * m.head_dim * self.kv_dtype_bytes
        flops = 4.0 * heads * m.head_dim * np.asarray(pairs, dtype=np.float64)
        num_bytes = (kv_per_token * np.asarray(kv_tokens, dtype=np.float64)
                     + 2.0 * heads * m.head_dim * self.dtype_bytes * np.asarray(query_tokens, dtype=np.float64))
        return flops, num_bytes
