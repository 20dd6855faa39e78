"""A Llama-family decoder (RMSNorm, rotary, GQA attention, SwiGLU MLP) over a paged KV cache.

Also Mistral's, Qwen2's and gpt-oss's variants of it: sliding-window attention per layer
(`ModelArgs.layer_windows`), q/k/v projection biases (Qwen2; q/k/v/o for gpt-oss), attention sinks and
gpt-oss's MoE (`gpu_engine.moe.GptOssMoE`).

The whole model in one file, as gpt-fast keeps it. Inputs are flat: the tokens of every sequence
of a step, concatenated (prefill chunks, decodes and verify tokens alike), with their positions;
attention reads and writes the paged cache through `AttentionMetadata`. Projections are fused as
vLLM runs them and as `profiler.ModelSpec.layer_gemm_shapes` names them (`qkv_proj`,
`gate_up_proj`); `gpu_engine.checkpoint` maps Hugging Face's separate weights onto them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from gpu_engine.attention import AttentionMetadata, paged_attention_torch
from gpu_engine.kv_cache import KVCache
from gpu_engine.moe import GptOssMoE, SparseMoE
from profiler import ModelSpec

# Rotary base per built-in model (each model's Hugging Face config.json `rope_theta`).
BUILTIN_ROPE_THETA = {"llama-3-8b": 500000.0, "llama-3-70b": 500000.0, "llama-3.1-8b": 500000.0,
                      "mistral-7b": 1000000.0, "mistral-nemo-12b": 1000000.0, "qwen2.5-7b": 1000000.0,
                      "qwen3-8b": 1000000.0, "qwen3-14b": 1000000.0, "qwen3-32b": 1000000.0,
                      "mixtral-8x7b": 1000000.0, "llama-3.1-70b": 500000.0, "llama-3.3-70b": 500000.0,
                      "llama-3.1-405b": 500000.0, "llama-3.1-70b-fp8": 500000.0, "qwen3-32b-fp8": 1000000.0,
                      "qwen3-235b-a22b": 1000000.0, "qwen3-235b-a22b-fp8": 1000000.0, "qwen3-30b-a3b-fp8": 1000000.0,
                      "gpt-oss-20b": 150000.0, "gpt-oss-120b": 150000.0}

# (q, k_cache, v_cache, meta, scale, window, sinks) -> out: `gpu_engine.attention.paged_attention_torch`'s contract.
# Which layers of a built-in with a mixed pattern are windowed: gpt-oss's config.json layer_types
# alternate sliding_attention / full_attention from layer 0.
BUILTIN_WINDOWED_LAYERS = {"gpt-oss-20b": lambda i: i % 2 == 0, "gpt-oss-120b": lambda i: i % 2 == 0}

AttentionFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, AttentionMetadata, float, int, torch.Tensor | None],
                       torch.Tensor]


@dataclass(frozen=True)
class ModelArgs:
    """What the engine needs beyond the shapes of a `ModelSpec`.

    Attributes:
        spec: layer counts and widths (profiler).
        rope_theta: rotary base (10,000 for Llama 2; 500,000 for Llama 3).
        rms_norm_eps: RMSNorm epsilon (1e-5 for Llama 2 and 3).
        layer_windows: per layer, its sliding window in tokens (0: full attention); None derives
            it from the spec where the spec decides it (no windowed layer, or every layer
            windowed); a checkpoint's config.json gives it per layer (`gpu_engine.checkpoint`).
        swiglu_alpha, swiglu_limit: gpt-oss's experts (biased experts, `gpu_engine.moe.GptOssMoE`);
            GptOssConfig's defaults.

    Raises:
        ValueError: a feature of the spec the engine does not implement (named), or windows
            that disagree with the spec (or a mixed pattern the spec alone cannot place).
    """

    spec: ModelSpec
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    layer_windows: tuple[int, ...] | None = None
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0

    def __post_init__(self) -> None:
        # The engine implements the Llama layer (with Qwen2's q/k/v biases and per-layer sliding
        # windows); running another layer as one would time (and, with weights, compute) another
        # model without a word.
        missing = [what for what, present in (("per-head q/k RMSNorm (Qwen3)", self.spec.qk_norm),
                                              ("a shared expert (Qwen2-MoE)", self.spec.moe is not None
                                               and self.spec.moe.shared_expert_intermediate_size > 0),
                                              ("attention logit soft-capping", self.spec.attn_logit_softcapping),
                                              (f"{self.spec.norms_per_layer} norms per layer (Gemma)",
                                               self.spec.norms_per_layer != 2),
                                              ("multi-head latent attention", self.spec.kv_lora_rank),
                                              ("dense layers among the experts", self.spec.num_dense_layers))
                   if present]
        if missing:
            raise ValueError(f"model {self.spec.name!r} has {' and '.join(missing)}, which the engine does not "
                             "implement yet (it runs Llama-architecture models: Llama 2/3, Mistral, Qwen2, Mixtral's "
                             "and gpt-oss's MoE, with full or sliding-window attention per layer)")
        s = self.spec
        if self.layer_windows is None:
            if 0 < s.num_sliding_layers < s.num_layers:
                raise ValueError(f"model {s.name!r}: {s.num_sliding_layers} of {s.num_layers} layers are windowed and "
                                 "the spec does not say which; serve it from a checkpoint folder whose config.json "
                                 "names them (layer_types, sliding_window_pattern or max_window_layers)")
            object.__setattr__(self, "layer_windows", (s.sliding_window if s.num_sliding_layers else 0,) * s.num_layers)
        windows = self.layer_windows
        if (len(windows) != s.num_layers or sum(w > 0 for w in windows) != s.num_sliding_layers
                or any(w not in (0, s.sliding_window) for w in windows)):
            raise ValueError(f"model {s.name!r}: layer_windows {windows} disagree with the spec ({s.num_sliding_layers} "
                             f"of {s.num_layers} layers windowed, window {s.sliding_window})")

    @classmethod
    def for_builtin(cls, spec: ModelSpec) -> "ModelArgs":
        """Args of a built-in `ModelSpec` (rope base from `BUILTIN_ROPE_THETA`, default 10,000; the
        windowed layers of gpt-oss from `BUILTIN_WINDOWED_LAYERS`)."""
        pattern = BUILTIN_WINDOWED_LAYERS.get(spec.name)
        windows = None if pattern is None else tuple(spec.sliding_window if pattern(i) else 0
                                                     for i in range(spec.num_layers))
        return cls(spec, BUILTIN_ROPE_THETA.get(spec.name, 10000.0), layer_windows=windows)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """At least float32: bf16/fp16 reductions run in float32, float64 stays float64."""
    return torch.promote_types(dtype, torch.float32)


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x²) + eps) · weight, reduced in at least float32 (as transformers, vLLM)."""

    def __init__(self, width: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.to(_compute_dtype(x.dtype))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Rotary:
    """Rotary position embedding, "rotate half" layout (Hugging Face Llama checkpoints).

    Frequencies inv_freq_i = 1 / theta^(2i / head_dim) and the angles position · inv_freq are
    computed in float32 exactly as transformers' `LlamaRotaryEmbedding` does, then cast to the
    activations' dtype, so the engine reproduces its numbers bit for bit. Not a module: the
    frequencies must stay float32 whatever dtype the weights are cast to.
    """

    def __init__(self, head_dim: int, theta: float):
        self.head_dim, self.theta = head_dim, theta
        self._inv_freq: dict[torch.device, torch.Tensor] = {}

    def cos_sin(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin of the angles of `positions` (T,), each (T, 1, head_dim) in `dtype`."""
        inv_freq = self._inv_freq.get(positions.device)
        if inv_freq is None:
            exponent = torch.arange(0, self.head_dim, 2, dtype=torch.float32, device=positions.device) / self.head_dim
            inv_freq = self._inv_freq[positions.device] = 1.0 / (self.theta ** exponent)
        angles = positions[:, None].float() * inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)[:, None, :]
        return angles.cos().to(dtype), angles.sin().to(dtype)

    @staticmethod
    def apply(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """Rotate x (T, heads, head_dim) by the angles whose cos and sin are given."""
        return x * cos + _rotate_half(x) * sin


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    """GQA self-attention of one layer: fused QKV (biased for Qwen2 and gpt-oss), rotary, paged KV write
    and read (over the layer's sliding window, if it has one; with gpt-oss's sinks), output projection
    (biased for gpt-oss)."""

    def __init__(self, args: ModelArgs, layer: int):
        super().__init__()
        s = args.spec
        self.num_heads, self.num_kv_heads, self.head_dim = s.num_attention_heads, s.num_key_value_heads, s.head_dim
        self.q_width, self.kv_width = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        self.qkv_proj = nn.Linear(s.hidden_size, self.q_width + 2 * self.kv_width, bias=s.qkv_bias or s.attention_bias)
        self.window = args.layer_windows[layer]  # tokens this layer's query sees; 0: all before it
        # gpt-oss: a learned sink logit per query head (`gpu_engine.attention`)
        self.sinks = nn.Parameter(torch.empty(self.num_heads)) if s.attention_sinks else None
        self.o_proj = nn.Linear(self.q_width, s.hidden_size, bias=s.attention_bias)
        self.scale = self.head_dim ** -0.5

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], meta: AttentionMetadata,
                k_cache: torch.Tensor, v_cache: torch.Tensor, attend: AttentionFn) -> torch.Tensor:
        """x (T, hidden) -> (T, hidden); writes this step's K and V into the layer's cache slots.

        `rope` is (cos, sin) of the tokens' positions (`Rotary.cos_sin`).
        """
        q, k, v = self.qkv_proj(x).split([self.q_width, self.kv_width, self.kv_width], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        q, k = Rotary.apply(q, *rope), Rotary.apply(k, *rope)
        KVCache.store(k, v, k_cache, v_cache, meta.slot_mapping)
        out = attend(q, k_cache, v_cache, meta, self.scale, self.window, self.sinks)
        return self.o_proj(out.reshape(-1, self.q_width))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) · up(x)), gate and up fused."""

    def __init__(self, args: ModelArgs):
        super().__init__()
        s = args.spec
        self.gate_up_proj = nn.Linear(s.hidden_size, 2 * s.intermediate_size, bias=False)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then + mlp(norm(·))."""

    def __init__(self, args: ModelArgs, layer: int):
        super().__init__()
        self.input_layernorm = RMSNorm(args.spec.hidden_size, args.rms_norm_eps)
        self.self_attn = Attention(args, layer)
        self.post_attention_layernorm = RMSNorm(args.spec.hidden_size, args.rms_norm_eps)
        # Mixtral, gpt-oss (biased experts): a sparse MoE block in place of the MLP (gpu_engine/moe.py)
        moe = args.spec.moe
        self.mlp = (MLP(args) if moe is None else GptOssMoE(args.spec.hidden_size, moe, args.swiglu_alpha,
                                                            args.swiglu_limit) if moe.bias
                    else SparseMoE(args.spec.hidden_size, moe))

    def forward(self, x, rope, meta, k_cache, v_cache, attend):
        x = x + self.self_attn(self.input_layernorm(x), rope, meta, k_cache, v_cache, attend)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    """The decoder stack and LM head.

    `attend` is the paged-attention function every layer calls: `paged_attention_torch`
    (reference, any device) or `gpu_engine.triton_attention.paged_attention_triton`.
    """

    def __init__(self, args: ModelArgs, attend: AttentionFn = paged_attention_torch):
        super().__init__()
        s = args.spec
        self.args = args
        self.attend = attend
        self.embed_tokens = nn.Embedding(s.vocab_size, s.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(args, i) for i in range(s.num_layers))
        self.norm = RMSNorm(s.hidden_size, args.rms_norm_eps)
        self.rotary = Rotary(s.head_dim, args.rope_theta)
        self.lm_head = nn.Linear(s.hidden_size, s.vocab_size, bias=False)
        if s.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                kv_cache: KVCache) -> torch.Tensor:
        """Hidden states after the final norm, shape (T, hidden), for the T tokens of a step.

        Args:
            input_ids: int64 (T,), the step's tokens, sequences concatenated in plan order.
            positions: int64 (T,), each token's position in its sequence (0-based).
            meta: where each sequence's queries start and which cache blocks it reads.
            kv_cache: the paged cache; this step's keys and values are written into it.
        """
        x = self.embed_tokens(input_ids)
        rope = self.rotary.cos_sin(positions, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, rope, meta, kv_cache.keys[i], kv_cache.values[i], self.attend)
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits (n, vocab) of the n rows of `hidden` that are sampled, in at least float32."""
        logits = self.lm_head(hidden)
        return logits.to(_compute_dtype(logits.dtype))

    @torch.no_grad()
    def init_random_(self, seed: int, std: float = 0.02) -> "Llama":
        """Fill the weights with seeded N(0, std²) values (norm weights 1), on their own device.

        Deterministic for a given seed, device kind and dtype (transformers' initialiser range is
        0.02). Returns self.
        """
        generator = torch.Generator(device=self.embed_tokens.weight.device).manual_seed(seed)
        for name, param in self.named_parameters():
            if name.endswith("layernorm.weight") or name == "norm.weight":
                param.fill_(1.0)
            else:
                param.normal_(0.0, std, generator=generator)
        return self
