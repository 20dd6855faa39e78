"""Each op of the catalogue as a torch call at one shape, ready for `timing.time_op`.

The ops run as the engine runs them (`gpu_engine/model.py`: fused QKV and gate/up projections,
RMSNorm reduced in float32, neox-style rotary, an index-copy into the paged cache, float32 logits).
Attention and the per-step input preparation are the engine's own functions, imported lazily
here and only here: `gpu_engine.attention.paged_attention_torch` on the CPU, the engine's Triton
kernel (`gpu_engine.triton_attention.paged_attention_triton`) on CUDA, and
`gpu_engine.inputs.prepare_inputs` for `cpu_overhead`. This is the one place the profiler imports
gpu_engine (a deviation from DESIGN.md's import rule, so that the profile times the engine's kernel
rather than a second copy of it); torch and gpu_engine load only when a profile is taken.

Weights are allocated once per op and reused for every shape; inputs are drawn per shape.
"""
from __future__ import annotations

from typing import Callable

from profiler.ops import OpCatalogue, Op

_EPS = 1e-5  # RMSNorm epsilon of Llama 2 and 3 (their config.json `rms_norm_eps`)
# Context of every sequence in the `cpu_overhead` batches: a mid-sized block table (32 blocks of
# 16), an assumption standing in for a typical decode.
_OVERHEAD_CONTEXT_TOKENS = 512


def attention_backend(device_kind: str) -> tuple[Callable, str]:
    """The engine's paged-attention function for this device kind, and its dotted name.

    CUDA uses the Triton kernel when `gpu_engine.triton_attention` exists, else the torch path
    (the caller records which in the profile's sidecar).
    """
    if device_kind == "cuda":
        try:
            from gpu_engine.triton_attention import paged_attention_triton
            return paged_attention_triton, "gpu_engine.triton_attention.paged_attention_triton"
        except ImportError:
            pass
    from gpu_engine.attention import paged_attention_torch
    return paged_attention_torch, "gpu_engine.attention.paged_attention_torch"


class TorchOpBench:
    """Builds a zero-argument callable that runs one op once at one shape.

    Args:
        catalogue: the ops and their shapes (one tensor-parallel rank).
        device: "cpu" or "cuda".
        dtype_name: "float32" (CPU) or "bfloat16" (CUDA).
        block_size: KV-cache tokens per block (the scheduler's).
        seed: seeds the random inputs.
    """

    def __init__(self, catalogue: OpCatalogue, device: str, dtype_name: str, block_size: int = 16,
                 seed: int = 0) -> None:
        import torch

        self.torch = torch
        self.catalogue = catalogue
        self.device = torch.device(device)
        self.dtype = getattr(torch, dtype_name)
        self.block_size = block_size
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        self.attend, self.attention_backend = attention_backend(self.device.type)
        self._weights: dict[str, object] = {}

    def callable(self, op: Op, shape: dict[str, int]) -> Callable[[], object]:
        """A callable running `op` once at `shape` (its key columns → ints).

        Raises:
            KeyError: `shape` lacks one of the op's key columns.
        """
        if op.family == "linear":
            return self._linear(op, shape["num_tokens"])
        if op.family in ("attention_prefill", "attention_decode"):
            return self._attention(op, shape)
        if op.family == "cpu_overhead":
            return self._prepare_inputs(shape["num_tokens"])
        return getattr(self, f"_{op.name}")(shape["num_tokens"])

    def release(self) -> None:
        """Drop the cached weights (frees the memory of the largest ops, e.g. the LM head)."""
        self._weights.clear()

    # -- helpers ---------------------------------------------------------------------------

    def _randn(self, *shape: int, dtype=None):
        t = self.torch.randn(*shape, generator=self.generator, dtype=self.torch.float32)
        return t.to(device=self.device, dtype=dtype or self.dtype)

    def _weight(self, name: str, *shape: int):
        if name not in self._weights:
            w = self.torch.empty(*shape, device=self.device, dtype=self.dtype)
            self._weights[name] = w.uniform_(-0.05, 0.05)  # values do not change the timing
        return self._weights[name]

    # -- ops -------------------------------------------------------------------------------

    def _linear(self, op: Op, rows: int) -> Callable[[], object]:
        f = self.torch.nn.functional
        w, x = self._weight(op.name, op.out_dim, op.in_dim), self._randn(rows, op.in_dim)
        if op.name == "lm_head":
            return lambda: f.linear(x, w).float()  # logits are sampled in float32
        return lambda: f.linear(x, w)

    def _embedding(self, rows: int) -> Callable[[], object]:
        m = self.catalogue.model
        table = self._weight("embedding", m.vocab_size, m.hidden_size)
        ids = self.torch.randint(m.vocab_size, (rows,), generator=self.generator).to(self.device)
        return lambda: self.torch.nn.functional.embedding(ids, table)

    def _rmsnorm(self, rows: int) -> Callable[[], object]:
        h = self.catalogue.model.hidden_size
        x, w = self._randn(rows, h), self._weight("rmsnorm", h)

        def rmsnorm():
            xf = x.float()
            return (xf * self.torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + _EPS)).to(x.dtype) * w
        return rmsnorm

    def _rotary_emb(self, rows: int) -> Callable[[], object]:
        m, tp = self.catalogue.model, self.catalogue.tp
        d = m.head_dim
        q = self._randn(rows, m.num_attention_heads // tp, d)
        k = self._randn(rows, m.kv_heads_per_rank(tp), d)
        cos, sin = self._randn(rows, 1, d), self._randn(rows, 1, d)

        def rotate(x):
            half = x.shape[-1] // 2
            return x * cos + self.torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin
        return lambda: (rotate(q), rotate(k))

    def _kv_cache_write(self, rows: int) -> Callable[[], object]:
        m, tp = self.catalogue.model, self.catalogue.tp
        heads, d = m.kv_heads_per_rank(tp), m.head_dim
        num_blocks = -(-rows // self.block_size)
        k_cache = self.torch.zeros(num_blocks * self.block_size, heads, d, device=self.device, dtype=self.dtype)
        v_cache = self.torch.zeros_like(k_cache)
        k, v = self._randn(rows, heads, d), self._randn(rows, heads, d)
        slots = self.torch.randperm(num_blocks * self.block_size, generator=self.generator)[:rows].to(self.device)
        return lambda: (k_cache.index_copy_(0, slots, k), v_cache.index_copy_(0, slots, v))

    def _silu_and_mul(self, rows: int) -> Callable[[], object]:
        ffn = self.catalogue.model.intermediate_size // self.catalogue.tp
        x = self._randn(rows, 2 * ffn)
        return lambda: self.torch.nn.functional.silu(x[:, :ffn]) * x[:, ffn:]

    def _residual_add(self, rows: int) -> Callable[[], object]:
        h = self.catalogue.model.hidden_size
        a, b = self._randn(rows, h), self._randn(rows, h)
        return lambda: a + b

    def _sampler(self, rows: int) -> Callable[[], object]:
        logits = self._randn(rows, self.catalogue.model.vocab_size, dtype=self.torch.float32)
        return lambda: self.torch.softmax(logits, dim=-1).argmax(dim=-1)

    def _attention(self, op: Op, shape: dict[str, int]) -> Callable[[], object]:
        """Paged attention through the engine's function: one prefill sequence of
        (query_tokens, context_tokens), or `batch_size` decodes of `context_tokens` each."""
        from gpu_engine.inputs import prepare_inputs

        m, tp = self.catalogue.model, self.catalogue.tp
        if op.family == "attention_prefill":
            seqs = [(shape["query_tokens"], shape["context_tokens"])]
        else:
            seqs = [(1, shape["context_tokens"])] * shape["batch_size"]
        work = self._work(seqs)
        meta = prepare_inputs(work, self.block_size, self.device).meta
        num_blocks = sum(len(w.block_table) for w in work)
        heads, kv_heads, d = m.num_attention_heads // tp, m.kv_heads_per_rank(tp), m.head_dim
        k_cache = self._randn(num_blocks, self.block_size, kv_heads, d)
        v_cache = self._randn(num_blocks, self.block_size, kv_heads, d)
        q = self._randn(sum(s[0] for s in seqs), heads, d)
        scale = d ** -0.5
        return lambda: self.attend(q, k_cache, v_cache, meta, scale)

    def _prepare_inputs(self, batch_size: int) -> Callable[[], object]:
        """The engine's per-step host work for `batch_size` decodes (tensors built and copied)."""
        from gpu_engine.inputs import prepare_inputs

        work = self._work([(1, _OVERHEAD_CONTEXT_TOKENS)] * batch_size)
        return lambda: prepare_inputs(work, self.block_size, self.device)

    def _work(self, seqs: list[tuple[int, int]]) -> list:
        """`SequenceWork` of sequences (query_tokens, context_tokens), disjoint block tables."""
        from gpu_engine.inputs import SequenceWork

        work, next_block = [], 0
        for i, (q, c) in enumerate(seqs):
            blocks = -(-(q + c) // self.block_size)
            work.append(SequenceWork(request_id=i, token_ids=[1] * q, context_len=c,
                                     block_table=list(range(next_block, next_block + blocks)),
                                     num_logits=1))
            next_block += blocks
        return work
