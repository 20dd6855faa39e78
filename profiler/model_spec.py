"""`ModelSpec`: the shapes of a dense Llama-family decoder, its parameter count and its KV-cache size.

The built-in shapes come from REFERENCE.md §5 (sources there: vidur `model_config.py`, the models'
Hugging Face `config.json`) and the public `config.json` files cited at `BUILTIN_MODELS`; any other
model is read from its Hugging Face `config.json` (`profiler.hf_config`, which refuses
the architectures this spec cannot describe: mixture of experts, sliding-window attention, MLA, ...).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from profiler.hf_config import read_config_json, spec_fields
from profiler.mla import mla_gemm_shapes, mla_kv_bytes_per_token
from profiler.moe import MoESpec
from profiler.quantization import WeightFormat, online_format


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of a dense Llama-family decoder (RMSNorm, GQA full attention, SwiGLU MLP).

    Attributes are counts (layers, heads) or widths in elements; `max_model_len` is in tokens.
    `tie_word_embeddings` means the LM head reuses the embedding matrix (no extra parameters).
    `qkv_bias`: the q, k and v projections carry biases (Qwen2/2.5: `Qwen2Attention` in
    transformers and vLLM `qwen2.py`, `QKVParallelLinear(bias=True)`); `qk_norm`: an RMSNorm of
    width head_dim over every query and key head before rotary (Qwen3: `Qwen3Attention.q_norm`,
    `k_norm`; vLLM `qwen3.py`). Both add parameters (counted in `num_params`) and element-wise work,
    not GEMM shapes.

    Raises:
        ValueError: a count is not positive, or the query heads are not a multiple of the
            key/value heads (GQA groups must be whole).
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_model_len: int
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    qk_norm: bool = False
    moe: MoESpec | None = None  # a mixture-of-experts block replaces the MLP in every layer
    # The decoder layers' linear weights as quantised (config.json quantization_config or
    # engine.quantization; profiler/quantization.py); None: BF16. Embedding, LM head, norms and
    # biases stay BF16 (vLLM quantises `LinearBase` layers only).
    quantization: WeightFormat | None = None
    # Sliding-window attention (profiler/sliding_window.py): `num_sliding_layers` of the layers attend
    # to the last `sliding_window` tokens only (the query's own included: vLLM's flash-attention
    # window (sliding_window - 1, 0)); 0 and 0: full attention everywhere.
    sliding_window: int = 0
    num_sliding_layers: int = 0
    # A learned sink logit per query head and layer in the softmax's denominator (gpt-oss `sinks`:
    # heads parameters per layer); priced as a small element-wise cost of the attention kernel.
    attention_sinks: bool = False
    # Attention logit soft-capping cap · tanh(logit / cap) (Gemma-2 `attn_logit_softcapping`); 0: none.
    attn_logit_softcapping: float = 0.0
    # Norm weights of hidden width per layer: 2 for Llama (input, post-attention), 4 for Gemma-2/3
    # (`pre_feedforward_layernorm`, `post_feedforward_layernorm` besides).
    norms_per_layer: int = 2
    # Biases on every attention projection (q, k, v and o: gpt-oss `attention_bias: true`).
    attention_bias: bool = False
    # Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2; profiler/mla.py): the KV cache holds one
    # latent of kv_lora_rank + qk_rope_head_dim a token and layer; queries pass a q_lora_rank
    # low-rank projection (0: none); values are v_head_dim wide; head_dim is qk_nope + qk_rope.
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # A mixture of experts whose first `num_dense_layers` layers have a dense MLP of
    # `intermediate_size` (DeepSeek `first_k_dense_replace`).
    num_dense_layers: int = 0

    def __post_init__(self) -> None:
        for field_name in ("num_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                           "head_dim", "intermediate_size", "vocab_size", "max_model_len"):
            if getattr(self, field_name) <= 0:
                raise ValueError(f"model {self.name!r}: {field_name} must be > 0, "
                                 f"got {getattr(self, field_name)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"model {self.name!r}: num_attention_heads {self.num_attention_heads} is "
                             f"not a multiple of num_key_value_heads {self.num_key_value_heads}")
        if not 0 <= self.num_sliding_layers <= self.num_layers or (self.sliding_window > 0) != (self.num_sliding_layers > 0):
            raise ValueError(f"model {self.name!r}: num_sliding_layers {self.num_sliding_layers} must be from 1 to "
                             f"num_layers {self.num_layers} with a sliding_window > 0 (got {self.sliding_window}), "
                             "or both 0")
        if self.kv_lora_rank and not (0 < self.qk_rope_head_dim < self.head_dim and self.v_head_dim > 0):
            raise ValueError(f"model {self.name!r}: multi-head latent attention needs 0 < qk_rope_head_dim < head_dim "
                             f"and v_head_dim > 0, got {self.qk_rope_head_dim}, {self.head_dim}, {self.v_head_dim}")
        if not 0 <= self.num_dense_layers < self.num_layers or (self.num_dense_layers and self.moe is None):
            raise ValueError(f"model {self.name!r}: num_dense_layers {self.num_dense_layers} must be below num_layers "
                             "and only on a mixture of experts")
        if self.quantization is not None and self.quantization.experts_only and self.moe is None:
            raise ValueError(f"model {self.name!r}: {self.quantization.method} (from {self.quantization.source}) "
                             "quantises mixture-of-experts experts only; this model has none")
        if (self.moe is not None and self.quantization is not None
                and self.quantization.kernel not in ("fp8", "fp8_block", "mxfp4")):
            raise ValueError(f"model {self.name!r}: quantised mixture-of-experts weights ({self.quantization.label}, "
                             f"from {self.quantization.source}) are not priced yet: the fused-MoE tables are BF16 and FP8")

    def to_fields(self) -> dict:
        """The spec as a JSON-ready dict (`dataclasses.asdict`), without `quantization` when it is
        None: a BF16 model's dict (and its `profile_data.model_hash`) is what it was before
        quantised models existed. `from_fields` reads it back."""
        fields = asdict(self)
        if fields["quantization"] is None:
            del fields["quantization"]
        if fields["moe"] is not None and not fields["moe"]["bias"]:
            del fields["moe"]["bias"]
        for name, default in _NEW_FIELD_DEFAULTS.items():  # unchanged dicts for the models before them
            if fields[name] == default:
                del fields[name]
        return fields

    @property
    def num_full_layers(self) -> int:
        """Layers with full (causal, unwindowed) attention."""
        return self.num_layers - self.num_sliding_layers

    @classmethod
    def from_fields(cls, fields: dict) -> "ModelSpec":
        """The spec `to_fields` (or `asdict`) wrote.

        Raises:
            TypeError / ValueError: unknown or missing keys, bad counts (as the constructor).
        """
        fields = dict(fields)
        if isinstance(fields.get("moe"), dict):
            fields["moe"] = MoESpec(**fields["moe"])
        if isinstance(fields.get("quantization"), dict):
            fields["quantization"] = WeightFormat(**fields["quantization"])
        return cls(**fields)

    def kv_heads_per_rank(self, tp: int = 1) -> int:
        """Key/value heads each tensor-parallel rank stores.

        Source: vLLM `QKVParallelLinear` — KV heads are split across ranks when tp divides them and
        replicated (one per rank) when tp is a multiple of them.

        Raises:
            ValueError: tp does not divide the query heads, or neither tp nor the KV heads divides
                the other (vLLM refuses both).
        """
        if tp <= 0 or self.num_attention_heads % tp:
            raise ValueError(f"model {self.name!r}: tensor_parallel_size {tp} must divide "
                             f"num_attention_heads {self.num_attention_heads}")
        kv = self.num_key_value_heads
        if kv % tp and tp % kv:
            raise ValueError(f"model {self.name!r}: tensor_parallel_size {tp} and "
                             f"num_key_value_heads {kv} must divide one another")
        return max(kv // tp, 1)

    def layer_gemm_shapes(self, tp: int = 1) -> tuple[tuple[str, int, int], ...]:
        """Per-layer weight GEMMs as one tensor-parallel rank runs them: (name, in_dim, out_dim).

        Fused as vLLM's Llama runs them (`vllm/model_executor/models/llama.py`): `qkv_proj`
        (QKVParallelLinear), `o_proj` (RowParallelLinear), `gate_up_proj`
        (MergedColumnParallelLinear), `down_proj` (RowParallelLinear). Column-parallel layers
        split their output dimension over tp, row-parallel ones their input dimension.
        A mixture-of-experts model has only `qkv_proj` and `o_proj` here: its experts and router
        are one fused MoE block (`moe`, priced by `profiler.moe_cost`; vLLM `FusedMoE`).

        Raises:
            ValueError: as `kv_heads_per_rank`, or tp does not divide `intermediate_size`.
        """
        if self.kv_lora_rank:
            attention = mla_gemm_shapes(self, tp)
            return attention if self.moe is not None else attention + self.mlp_gemm_shapes(tp)
        if self.moe is not None:
            q_out = self.num_attention_heads // tp * self.head_dim
            kv_out = self.kv_heads_per_rank(tp) * self.head_dim
            return (("qkv_proj", self.hidden_size, q_out + 2 * kv_out), ("o_proj", q_out, self.hidden_size))
        if self.intermediate_size % tp:
            raise ValueError(f"model {self.name!r}: tensor_parallel_size {tp} must divide "
                             f"intermediate_size {self.intermediate_size}")
        q_out = self.num_attention_heads // tp * self.head_dim
        kv_out = self.kv_heads_per_rank(tp) * self.head_dim
        ffn = self.intermediate_size // tp
        return (
            ("qkv_proj", self.hidden_size, q_out + 2 * kv_out),
            ("o_proj", q_out, self.hidden_size),
            ("gate_up_proj", self.hidden_size, 2 * ffn),
            ("down_proj", ffn, self.hidden_size),
        )

    def mlp_gemm_shapes(self, tp: int = 1) -> tuple[tuple[str, int, int], ...]:
        """The dense SwiGLU MLP's GEMMs on one rank (`gate_up_proj`, `down_proj`): a dense model's
        every layer, a mixture of experts' first `num_dense_layers`.

        Raises:
            ValueError: tp does not divide `intermediate_size`.
        """
        if self.intermediate_size % tp:
            raise ValueError(f"model {self.name!r}: tensor_parallel_size {tp} must divide "
                             f"intermediate_size {self.intermediate_size}")
        ffn = self.intermediate_size // tp
        return (("gate_up_proj", self.hidden_size, 2 * ffn), ("down_proj", ffn, self.hidden_size))

    @property
    def num_moe_layers(self) -> int:
        """Layers with a sparse MoE block (0 for a dense model)."""
        return 0 if self.moe is None else self.num_layers - self.num_dense_layers

    @property
    def num_params(self) -> int:
        """Parameter count (elements).

        embedding (vocab × hidden) + per layer (QKV, O, gate, up, down weights + 2 RMSNorm
        weights of hidden, + the q/k/v biases with `qkv_bias`, + 2 × head_dim with `qk_norm`)
        + final RMSNorm (hidden) + LM head (vocab × hidden) unless tied; `norms_per_layer` norms
        (4 for Gemma), q/k/v/o biases with `attention_bias`, one sink per head with `attention_sinks`.
        Source: transformers `LlamaForCausalLM`, `Qwen2ForCausalLM`, `Qwen3ForCausalLM`; with
        `moe`, the MLP's weights are the whole MoE block's (`MoESpec.layer_params`: every expert,
        shared expert and router; `MixtralForCausalLM`, `Qwen2MoeForCausalLM`, `Qwen3MoeForCausalLM`).
        """
        return self._params(active=False)

    @property
    def num_active_params(self) -> int:
        """Parameters one token uses (elements): `num_params` with only the top-k routed experts
        of each MoE layer (plus its shared expert and router); equal to `num_params` for a dense model."""
        return self._params(active=True)

    def _params(self, active: bool) -> int:
        shapes = self.layer_gemm_shapes()
        linear = sum(in_dim * out_dim for _, in_dim, out_dim in shapes)
        per_layer = linear + self.norms_per_layer * self.hidden_size + (
            self.q_lora_rank + self.kv_lora_rank if self.kv_lora_rank else 0)  # MLA's q_a / kv_a norms
        if self.qkv_bias or self.attention_bias:
            per_layer += shapes[0][2]  # one bias per output of the fused qkv_proj
        if self.attention_bias:
            per_layer += self.hidden_size  # o_proj's bias
        if self.attention_sinks:
            per_layer += self.num_attention_heads  # one sink logit per query head
        if self.qk_norm:
            per_layer += 2 * self.head_dim
        embedding = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else embedding
        mlps = 0
        if self.moe is not None:
            block = (self.moe.active_layer_params if active else self.moe.layer_params)(self.hidden_size)
            dense = sum(in_dim * out_dim for _, in_dim, out_dim in self.mlp_gemm_shapes()) if self.num_dense_layers else 0
            mlps = self.num_moe_layers * block + self.num_dense_layers * dense
        return embedding + self.num_layers * per_layer + mlps + self.hidden_size + lm_head

    def linear_params(self) -> int:
        """Weights of the decoder layers' linear layers (elements): the ones a quantisation
        method stores quantised (`layer_gemm_shapes` at tp 1 × layers; biases not included), and
        of a mixture of experts its routed and shared experts (the router stays BF16: vLLM's
        `gate` is left unquantised, e.g. Qwen3-MoE FP8's modules_to_not_convert); with an
        experts-only format (MXFP4) the experts alone."""
        attention = self.num_layers * sum(in_dim * out_dim for _, in_dim, out_dim in self.layer_gemm_shapes())
        if self.quantization is not None and self.quantization.experts_only:  # MXFP4: attention stays BF16
            attention = 0
        if self.moe is None:
            return attention
        dense = (self.num_dense_layers * sum(i * o for _, i, o in self.mlp_gemm_shapes())
                 if self.num_dense_layers and not self.quantization_experts_only else 0)
        return attention + dense + self.expert_params() + self.num_moe_layers * self.moe.shared_params(self.hidden_size)

    @property
    def quantization_experts_only(self) -> bool:
        return self.quantization is not None and self.quantization.experts_only

    def weight_bytes(self, dtype_bytes: int) -> int:
        """Bytes of all weights: `dtype_bytes` per element (2 for bf16), except the linear layers'
        of a quantised model, at `quantization.bytes_per_param` (rounded up to a whole byte).
        E.g. Llama-3.1-70B FP8: 68.45 B linear weights × 1 + 2.10 B others × 2 = 72.66 GB."""
        if self.quantization is None:
            return self.num_params * dtype_bytes
        linear = self.linear_params()
        return (self.num_params - linear) * dtype_bytes + math.ceil(linear * self.quantization.bytes_per_param)

    def served(self, quantization: str | None) -> "ModelSpec":
        """This model as vLLM serves it with `--quantization` (engine.quantization) `quantization`.

        None keeps the checkpoint's format. A BF16 checkpoint with `fp8` is quantised at load
        (`online_format`); a quantised checkpoint must name its own method (vLLM
        `ModelConfig._verify_quantization` refuses a mismatch; its Marlin variants — awq_marlin,
        gptq_marlin — are the same checkpoints).

        Raises:
            ValueError: a method vLLM would refuse for this checkpoint, or one not priced.
        """
        if quantization is None:
            return self
        if self.quantization is None:
            return replace(self, quantization=online_format(quantization))
        if quantization.removesuffix("_marlin") != self.quantization.method.removesuffix("_marlin"):
            raise ValueError(f"engine.quantization {quantization!r} does not match the checkpoint's "
                             f"quant_method {self.quantization.method!r} ({self.quantization.source}); vLLM refuses "
                             "the mismatch: leave engine.quantization out or set it to the checkpoint's method")
        return self

    def expert_params(self) -> int:
        """Routed-expert weights over all layers (elements): the part expert parallelism shards;
        0 for a dense model."""
        return 0 if self.moe is None else self.num_moe_layers * self.moe.num_experts * self.moe.expert_params(self.hidden_size)

    def kv_bytes_per_token(self, dtype_bytes: int, tp: int = 1) -> int:
        """KV-cache bytes one token takes on one tensor-parallel rank, over all layers.

        2 (K and V) × layers × KV heads per rank × head_dim × dtype_bytes (REFERENCE.md §5;
        equals the total / tp when tp divides the KV heads).

        Raises:
            ValueError: as `kv_heads_per_rank`.
        """
        if self.kv_lora_rank:  # one latent a token and layer, on every rank (profiler/mla.py)
            return mla_kv_bytes_per_token(self, dtype_bytes)
        return 2 * self.num_layers * self.kv_heads_per_rank(tp) * self.head_dim * dtype_bytes


_NEW_FIELD_DEFAULTS = {"sliding_window": 0, "num_sliding_layers": 0, "attention_sinks": False,
                       "attn_logit_softcapping": 0.0, "norms_per_layer": 2, "attention_bias": False,
                       "kv_lora_rank": 0, "q_lora_rank": 0, "qk_rope_head_dim": 0, "v_head_dim": 0,
                       "num_dense_layers": 0}


def _llama(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int,
           max_len: int) -> ModelSpec:
    # head_dim = hidden / heads = 128 and an untied LM head, as every Llama/Mistral built-in has.
    return ModelSpec(name, layers, hidden, heads, kv_heads, hidden // heads, ffn, vocab, max_len)


# Shapes: REFERENCE.md §5 for the Llama-2, Llama-3-8B and Mistral-7B rows. max_model_len: DESIGN.md
# "Files" (llama-2 4096, llama-3 8192, mistral-7b v0.2 32768 — the version Sarathi-Serve used; v0.2
# drops the 4096-token sliding window). The others are their public config.json (max_model_len =
# max_position_embeddings):
# - llama-3-70b: vidur `vidur/config/model_config.py` `Llama3_70BModelConfig` (Meta-Llama-3-70B).
# - llama-3.1-8b, qwen2.5-7b, qwen3-8b, qwen3-14b, qwen3-32b: the Hugging Face config.json files of
#   meta-llama/Llama-3.1-8B, Qwen/Qwen2.5-7B, Qwen/Qwen3-8B, Qwen/Qwen3-14B and Qwen/Qwen3-32B as
#   quoted in github.com/citsjtu2020/LLM-Prof `sglang/Model_Config.md` (Qwen3: head_dim 128 explicit,
#   q/k norms, untied; Qwen2.5-7B: q/k/v biases, untied, use_sliding_window false).
# - mistral-nemo-12b: mistralai/Mistral-Nemo-Base-2407 config.json as quoted in
#   github.com/kevinstephano/thunder_model_blocks `thunder_model_blocks/mistral/mistral_config.py`
#   (head_dim 128 explicit, not hidden / heads = 160; sliding_window null).
# Their parameter counts are tested against the model cards (tests/test_model_spec_families.py).
BUILTIN_MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
        _llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
        _llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
        _llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
        _llama("llama-3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
        _llama("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, 131072),
        _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768),
        ModelSpec("mistral-nemo-12b", 40, 5120, 32, 8, 128, 14336, 131072, 128000),
        ModelSpec("qwen2.5-7b", 28, 3584, 28, 4, 128, 18944, 152064, 131072, qkv_bias=True),
        ModelSpec("qwen3-8b", 36, 4096, 32, 8, 128, 12288, 151936, 40960, qk_norm=True),
        ModelSpec("qwen3-14b", 40, 5120, 40, 8, 128, 17408, 151936, 40960, qk_norm=True),
        ModelSpec("qwen3-32b", 64, 5120, 64, 8, 128, 25600, 151936, 40960, qk_norm=True),
        # Mixture of experts: mistralai/Mixtral-8x7B-v0.1 and Qwen/Qwen3-30B-A3B config.json (model
        # cards: 46.7 B total / 12.9 B active; 30.5 B / 3.3 B). Mixtral's intermediate_size is the
        # expert width; Qwen3-MoE's intermediate_size (6144) is unused with mlp_only_layers empty.
        ModelSpec("mixtral-8x7b", 32, 4096, 32, 8, 128, 14336, 32000, 32768,
                  moe=MoESpec(num_experts=8, num_experts_per_tok=2, expert_intermediate_size=14336)),
        ModelSpec("qwen3-30b-a3b", 48, 2048, 32, 4, 128, 6144, 151936, 40960, qk_norm=True,
                  moe=MoESpec(num_experts=128, num_experts_per_tok=8, expert_intermediate_size=768)),
        # Llama 3.1 / 3.3 70B and 405B: meta-llama/Llama-3.1-70B, Llama-3.3-70B-Instruct, Llama-3.1-405B
        # config.json (hidden 8192 / 16384, 80 / 126 layers, 64 / 128 heads, 8 KV heads, FFN 28672 /
        # 53248, vocab 128256, max_position_embeddings 131072, untied); model cards: 70.6 B, 405 B.
        _llama("llama-3.1-70b", 80, 8192, 64, 8, 28672, 128256, 131072),
        _llama("llama-3.3-70b", 80, 8192, 64, 8, 28672, 128256, 131072),
        _llama("llama-3.1-405b", 126, 16384, 128, 8, 53248, 128256, 131072),
        # FP8 checkpoints: RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8 (quant_method compressed-tensors,
        # format float-quantized, FP8 weights and activations per tensor: W8A8, the `fp8` GEMMs) and
        # Qwen/Qwen3-32B-FP8 (quant_method fp8, activation_scheme dynamic, weight_block_size [128, 128]:
        # the `fp8_block` GEMMs); shapes as their BF16 models.
        replace(_llama("llama-3.1-70b-fp8", 80, 8192, 64, 8, 28672, 128256, 131072),
                quantization=WeightFormat("compressed-tensors", "fp8", 8,
                                          source="RedHatAI/Meta-Llama-3.1-70B-Instruct-FP8 config.json")),
        ModelSpec("qwen3-32b-fp8", 64, 5120, 64, 8, 128, 25600, 151936, 40960, qk_norm=True,
                  quantization=WeightFormat("fp8", "fp8_block", 8, source="Qwen/Qwen3-32B-FP8 config.json")),
        # Qwen/Qwen3-235B-A22B config.json: 94 layers, hidden 4096, 64 heads, 4 KV heads, head_dim 128,
        # 128 experts of width 1536, top-8, vocab 151936, 40960 positions, untied (card: 235 B / 22 B active).
        ModelSpec("qwen3-235b-a22b", 94, 4096, 64, 4, 128, 12288, 151936, 40960, qk_norm=True,
                  moe=MoESpec(num_experts=128, num_experts_per_tok=8, expert_intermediate_size=1536)),
        # Qwen/Qwen3-235B-A22B-FP8 and Qwen/Qwen3-30B-A3B-FP8: the same shapes, quant_method fp8 with
        # weight_block_size [128, 128] (routed and shared experts and attention FP8, the router BF16).
        ModelSpec("qwen3-235b-a22b-fp8", 94, 4096, 64, 4, 128, 12288, 151936, 40960, qk_norm=True,
                  moe=MoESpec(num_experts=128, num_experts_per_tok=8, expert_intermediate_size=1536),
                  quantization=WeightFormat("fp8", "fp8_block", 8, source="Qwen/Qwen3-235B-A22B-FP8 config.json")),
        ModelSpec("qwen3-30b-a3b-fp8", 48, 2048, 32, 4, 128, 6144, 151936, 40960, qk_norm=True,
                  moe=MoESpec(num_experts=128, num_experts_per_tok=8, expert_intermediate_size=768),
                  quantization=WeightFormat("fp8", "fp8_block", 8, source="Qwen/Qwen3-30B-A3B-FP8 config.json")),
        # google/gemma-3-27b-it config.json `text_config` (Gemma3TextConfig defaults where absent):
        # 62 layers, hidden 5376, 32 heads, 16 KV heads, head_dim 128, FFN 21504 (GeGLU: the SwiGLU
        # shapes), vocab 262208, 131072 positions, tied LM head, q/k norms, four norms a layer;
        # sliding_window 1024 with sliding_window_pattern 6: layer i windowed unless (i + 1) % 6 == 0,
        # so 52 windowed, 10 full. 27.01 B parameters (card: 27 B for the language model).
        ModelSpec("gemma-3-27b", 62, 5376, 32, 16, 128, 21504, 262208, 131072, tie_word_embeddings=True,
                  qk_norm=True, norms_per_layer=4, sliding_window=1024, num_sliding_layers=52),
        # openai/gpt-oss-120b and gpt-oss-20b config.json: 36 / 24 layers, hidden 2880, 64 heads of 64,
        # 8 KV heads, 128 / 32 experts of width 2880 (intermediate_size), top-4, vocab 201088, 131072
        # positions, untied; layer_types alternate sliding_attention / full_attention (window 128:
        # 18 / 12 windowed); attention_bias true (q, k, v, o), a sink per head (`GptOssAttention.sinks`),
        # biased experts and router; quantization_config mxfp4 (experts only). Model cards: 116.8 B /
        # 20.9 B total parameters.
        ModelSpec("gpt-oss-120b", 36, 2880, 64, 8, 64, 2880, 201088, 131072, attention_bias=True,
                  attention_sinks=True, sliding_window=128, num_sliding_layers=18,
                  moe=MoESpec(num_experts=128, num_experts_per_tok=4, expert_intermediate_size=2880, bias=True),
                  quantization=WeightFormat("mxfp4", "mxfp4", 4, 32, 1.0, source="openai/gpt-oss-120b config.json")),
        ModelSpec("gpt-oss-20b", 24, 2880, 64, 8, 64, 2880, 201088, 131072, attention_bias=True,
                  attention_sinks=True, sliding_window=128, num_sliding_layers=12,
                  moe=MoESpec(num_experts=32, num_experts_per_tok=4, expert_intermediate_size=2880, bias=True),
                  quantization=WeightFormat("mxfp4", "mxfp4", 4, 32, 1.0, source="openai/gpt-oss-20b config.json")),
        # deepseek-ai/DeepSeek-V3 config.json (DeepSeek-R1 has the same shapes): 61 layers, hidden 7168,
        # 128 heads, MLA with q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128, qk_rope_head_dim 64
        # (head_dim 192), v_head_dim 128; first_k_dense_replace 3 dense layers of intermediate_size 18432,
        # then 256 routed experts of moe_intermediate_size 2048, top-8, n_shared_experts 1 (a shared
        # expert of 2048); vocab 129280, 163840 positions, untied; quantization_config fp8 with
        # weight_block_size [128, 128]. The multi-token-prediction layer (num_nextn_predict_layers 1,
        # 14 B) is loaded by vLLM only as a speculative drafter: not counted (card: 671 B main model).
        ModelSpec("deepseek-v3", 61, 7168, 128, 128, 192, 18432, 129280, 163840, kv_lora_rank=512, q_lora_rank=1536,
                  qk_rope_head_dim=64, v_head_dim=128, num_dense_layers=3,
                  moe=MoESpec(num_experts=256, num_experts_per_tok=8, expert_intermediate_size=2048,
                              shared_expert_intermediate_size=2048),
                  quantization=WeightFormat("fp8", "fp8_block", 8, source="deepseek-ai/DeepSeek-V3 config.json")),
        # moonshotai/Kimi-K2-Instruct config.json (the DeepSeek-V3 architecture): 61 layers, hidden 7168,
        # 64 heads, the same MLA ranks, first_k_dense_replace 1, 384 routed experts of 2048, top-8, one
        # shared expert, vocab 163840, 131072 positions, FP8 128 x 128 blocks (card: 1 T total, 32 B activated).
        ModelSpec("kimi-k2", 61, 7168, 64, 64, 192, 18432, 163840, 131072, kv_lora_rank=512, q_lora_rank=1536,
                  qk_rope_head_dim=64, v_head_dim=128, num_dense_layers=1,
                  moe=MoESpec(num_experts=384, num_experts_per_tok=8, expert_intermediate_size=2048,
                              shared_expert_intermediate_size=2048),
                  quantization=WeightFormat("fp8", "fp8_block", 8, source="moonshotai/Kimi-K2-Instruct config.json")),
        # Qwen/Qwen3-30B-A3B-Instruct-2507: the same shapes, a 262,144-token context (its config.json).
        ModelSpec("qwen3-30b-a3b-instruct-2507", 48, 2048, 32, 4, 128, 6144, 151936, 262144, qk_norm=True,
                  moe=MoESpec(num_experts=128, num_experts_per_tok=8, expert_intermediate_size=768)),
    )
}


# Names of the same shapes: DeepSeek-R1's config.json is DeepSeek-V3's.
BUILTIN_ALIASES = {"deepseek-r1": "deepseek-v3"}


def get_model_spec(name_or_path: str | Path) -> ModelSpec:
    """A built-in model by name, or one read from a Hugging Face `config.json`.

    Args:
        name_or_path: a key of `BUILTIN_MODELS`, a path to a `config.json`, or a directory
            holding one.

    Raises:
        ValueError: neither a built-in name nor an existing path (the message lists the names);
            a config that is not a JSON object, lacks a required key, or describes an
            architecture the spec cannot (mixture of experts, sliding window, MLA, ...: see
            `profiler.hf_config`); the message names the file and the key.
    """
    if str(name_or_path) in BUILTIN_MODELS:
        return BUILTIN_MODELS[str(name_or_path)]
    if str(name_or_path) in BUILTIN_ALIASES:
        return replace(BUILTIN_MODELS[BUILTIN_ALIASES[str(name_or_path)]], name=str(name_or_path))
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ValueError(f"unknown model {str(name_or_path)!r}: not a file or a directory with a "
                         f"config.json; built-in names are {sorted(BUILTIN_MODELS)}")
    fields = spec_fields(read_config_json(path), path)
    try:
        return ModelSpec(name=path.parent.name or str(path), **fields)
    except ValueError as exc:  # a count not positive, heads not a multiple of the KV heads
        raise ValueError(f"{path}: {exc}") from None
