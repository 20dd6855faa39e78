"""`ModelSpec`: the shapes of a Llama-family decoder, its parameter count and its KV-cache size.

The built-in shapes come from REFERENCE.md §5 (sources there: vidur `model_config.py`, the models'
Hugging Face `config.json`); any other model is read from its Hugging Face `config.json`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of a Llama-family decoder (RMSNorm, GQA attention, SwiGLU MLP, no biases).

    Attributes are counts (layers, heads) or widths in elements; `max_model_len` is in tokens.
    `tie_word_embeddings` means the LM head reuses the embedding matrix (no extra parameters).

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

    def __post_init__(self) -> None:
        for field_name in ("num_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                           "head_dim", "intermediate_size", "vocab_size", "max_model_len"):
            if getattr(self, field_name) <= 0:
                raise ValueError(f"model {self.name!r}: {field_name} must be > 0, "
                                 f"got {getattr(self, field_name)}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"model {self.name!r}: num_attention_heads {self.num_attention_heads} is "
                             f"not a multiple of num_key_value_heads {self.num_key_value_heads}")

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

        Raises:
            ValueError: as `kv_heads_per_rank`, or tp does not divide `intermediate_size`.
        """
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

    @property
    def num_params(self) -> int:
        """Parameter count (elements).

        embedding (vocab × hidden) + per layer (QKV, O, gate, up, down weights + 2 RMSNorm
        weights of hidden) + final RMSNorm (hidden) + LM head (vocab × hidden) unless tied.
        Source: the Llama architecture as in transformers `LlamaForCausalLM` (no biases).
        """
        linear = sum(in_dim * out_dim for _, in_dim, out_dim in self.layer_gemm_shapes())
        per_layer = linear + 2 * self.hidden_size
        embedding = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else embedding
        return embedding + self.num_layers * per_layer + self.hidden_size + lm_head

    def weight_bytes(self, dtype_bytes: int) -> int:
        """Bytes of all weights at `dtype_bytes` bytes per element (2 for bf16)."""
        return self.num_params * dtype_bytes

    def kv_bytes_per_token(self, dtype_bytes: int, tp: int = 1) -> int:
        """KV-cache bytes one token takes on one tensor-parallel rank, over all layers.

        2 (K and V) × layers × KV heads per rank × head_dim × dtype_bytes (REFERENCE.md §5;
        equals the total / tp when tp divides the KV heads).

        Raises:
            ValueError: as `kv_heads_per_rank`.
        """
        return 2 * self.num_layers * self.kv_heads_per_rank(tp) * self.head_dim * dtype_bytes


def _llama(name: str, layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int,
           max_len: int) -> ModelSpec:
    # Every built-in uses head_dim = hidden / heads = 128 and an untied LM head.
    return ModelSpec(name, layers, hidden, heads, kv_heads, hidden // heads, ffn, vocab, max_len)


# Shapes: REFERENCE.md §5. max_model_len: DESIGN.md "Files" (llama-2 4096, llama-3 8192, mistral-7b
# v0.2 32768 — the version Sarathi-Serve used; v0.2 drops the 4096-token sliding window).
BUILTIN_MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _llama("llama-2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
        _llama("llama-2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
        _llama("llama-2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
        _llama("llama-3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
        _llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768),
    )
}


def get_model_spec(name_or_path: str | Path) -> ModelSpec:
    """A built-in model by name, or one read from a Hugging Face `config.json`.

    Args:
        name_or_path: a key of `BUILTIN_MODELS`, a path to a `config.json`, or a directory
            holding one.

    Raises:
        ValueError: neither a built-in name nor an existing path (the message lists the names);
            or the config lacks a required key (the message names the file and the key).
    """
    if str(name_or_path) in BUILTIN_MODELS:
        return BUILTIN_MODELS[str(name_or_path)]
    path = Path(name_or_path)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ValueError(f"unknown model {str(name_or_path)!r}: not a file or a directory with a "
                         f"config.json; built-in names are {sorted(BUILTIN_MODELS)}")
    return _spec_from_hf_config(path)


def _spec_from_hf_config(path: Path) -> ModelSpec:
    """Map Hugging Face `LlamaConfig`/`MistralConfig` keys onto a `ModelSpec`.

    Defaults follow transformers `LlamaConfig`: num_key_value_heads = num_attention_heads,
    head_dim = hidden_size / num_attention_heads, tie_word_embeddings = False.
    """
    config = json.loads(path.read_text())

    def required(key: str) -> int:
        if config.get(key) is None:
            raise ValueError(f"{path}: missing required key {key!r}")
        return int(config[key])

    heads = required("num_attention_heads")
    hidden = required("hidden_size")
    return ModelSpec(
        name=path.parent.name or str(path),
        num_layers=required("num_hidden_layers"),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or hidden // heads),
        intermediate_size=required("intermediate_size"),
        vocab_size=required("vocab_size"),
        max_model_len=required("max_position_embeddings"),
        tie_word_embeddings=bool(config.get("tie_word_embeddings", False)),
    )
