"""Read a Hugging Face `config.json` into the fields of a `ModelSpec`, refusing what it cannot describe.

`ModelSpec` describes a decoder with full attention in every layer: the transformers `model_type`s
`llama`, `mistral`, `qwen2` and `qwen3` (and a config without `model_type`, read as `llama`, as the
project's own test configs are), and the mixture-of-experts families `mixtral` (`num_local_experts`,
`num_experts_per_tok`, experts of width `intermediate_size`), `qwen2_moe` and `qwen3_moe`
(`num_experts`, `num_experts_per_tok`, `moe_intermediate_size`; Qwen2-MoE's shared expert of width
`shared_expert_intermediate_size`; `moe_fields`), and gpt-oss (`num_local_experts` experts of width
`intermediate_size`, biased, q/k/v/o biases, attention sinks, alternating sliding windows, MXFP4
experts). Any field that would change the parameter count
or the attention cost in a way the spec does not model is a `ValueError` naming the file and the
field and saying the architecture is not supported yet — never a silent dense approximation
(issue 14: Mixtral-8x7B, 46.7 B parameters, was read as a dense 7.2 B model):

- mixture-of-experts fields on a dense `model_type` (`num_local_experts` on a `llama` config), the
  other family's fields (`num_experts` on `mixtral`), dense layers among the sparse ones
  (`decoder_sparse_step` > 1, `mlp_only_layers`, DeepSeek's `moe_layer_freq` > 1), DeepSeek's
  `n_routed_experts` / `n_shared_experts` / `first_k_dense_replace` on another family;
- multi-head latent attention (`kv_lora_rank`, `q_lora_rank`, `qk_rope_head_dim`, ...) on a family
  other than `deepseek_v3` / `kimi_k2` (DeepSeek-V2's `deepseek_v2` included: not read yet);
- `layer_types` naming a layer other than full or sliding-window attention (`profiler.sliding_window`);
- chunked local attention
  (`attention_chunk_size`, Llama 4), multi-token prediction layers (`num_nextn_predict_layers`:
  extra parameters), biases beyond Qwen2's q/k/v
  (`attention_bias`, `mlp_bias`), a multimodal wrapper (`text_config`);
- any other `model_type` (Gemma-2, for one: its LM head is tied by default and each layer has four
  norms, so reading it as a Llama over-counts gemma-2-9b by its 0.92 B-parameter embedding).

DeepSeek-V3 / R1 (`deepseek_v3`) and Kimi-K2 (`kimi_k2`): multi-head latent attention and the DeepSeek
mixture of experts (`deepseek_fields`, `moe_fields`): routed experts `n_routed_experts` of
`moe_intermediate_size`, top-`num_experts_per_tok`, a shared MLP of `n_shared_experts` x
`moe_intermediate_size`, the first `first_k_dense_replace` layers dense; routing settings (`n_group`,
`topk_group`, `scoring_func`, `routed_scaling_factor`, ...) change no shape and are not read; the
multi-token-prediction layer (`num_nextn_predict_layers`) is not counted (vLLM loads it only as a
speculative drafter).

A pre-quantised checkpoint's `quantization_config` is read by `profiler.quantization`
(`read_quantization_config`): a method or scheme it cannot price is a `ValueError` naming the field.

Sliding-window layers are read as each family spells them (`profiler.sliding_window.read_sliding_window`:
`layer_types`, `sliding_window_pattern`, `use_sliding_window` / `max_window_layers`, or a Mistral
config's `sliding_window` for every layer) into `sliding_window` and `num_sliding_layers`;
`attn_logit_softcapping` into the spec (priced by the roofline). Qwen2/2.5 and Qwen3 configs carry
`sliding_window` with `use_sliding_window: false` (or without it: the config class's default is
false): that is full attention. The rule is vLLM's `ModelConfig.get_sliding_window` (`vllm/config`; pinned
by vLLM's `tests/test_config.py::test_get_sliding_window`): None for a Qwen2 config with
use_sliding_window false, the window when it is true, and a Mistral config's window whenever set.

Defaults where a key is absent follow each family's transformers config class (`LlamaConfig`,
`MistralConfig`, `Qwen2Config`, `Qwen3Config`): num_key_value_heads = num_attention_heads,
head_dim = hidden_size / num_attention_heads, tie_word_embeddings = False.
"""
from __future__ import annotations

import math
from pathlib import Path

from profiler.json_object import read_json_object
from profiler.moe import MoESpec
from profiler.quantization import read_quantization_config
from profiler.sliding_window import read_sliding_window

# model_type → (q/k/v projections carry biases, q/k RMSNorm per head). Sources: transformers
# `modeling_qwen2.py` (`Qwen2Attention`: q_proj, k_proj, v_proj bias=True, o_proj bias=False),
# `modeling_qwen3.py` (`q_norm`, `k_norm` = RMSNorm(head_dim); biases only with attention_bias).
SUPPORTED_MODEL_TYPES: dict[str, tuple[bool, bool]] = {
    "llama": (False, False),
    "mistral": (False, False),
    "qwen2": (True, False),
    "qwen3": (False, True),
    # Mixture of experts: transformers `modeling_mixtral.py` (Llama attention), `modeling_qwen2_moe.py`
    # (Qwen2 attention, q/k/v biases), `modeling_qwen3_moe.py` (Qwen3 attention, q/k norms).
    "mixtral": (False, False),
    "qwen2_moe": (True, False),
    "qwen3_moe": (False, True),
    # gpt-oss (transformers `modeling_gpt_oss.py`, vLLM `gpt_oss.py`): biases on q, k, v and o
    # (`attention_bias`), a learned sink per head, biased experts and router (read in `spec_fields`).
    "gpt_oss": (False, False),
    # DeepSeek-V3 / R1 and Kimi-K2 (Kimi's config.json says model_type "kimi_k2" for the DeepSeek-V3
    # architecture, `DeepseekV3ForCausalLM`): multi-head latent attention and a DeepSeek mixture of
    # experts (read in `deepseek_fields`).
    "deepseek_v3": (False, False),
    "kimi_k2": (False, False),
}
DEEPSEEK_MODEL_TYPES = ("deepseek_v3", "kimi_k2")
MOE_MODEL_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", *DEEPSEEK_MODEL_TYPES)
# The MoE fields each family reads (`moe_fields`); any other family's field is refused.
_MOE_FIELDS = {"mixtral": ("num_local_experts", "num_experts_per_tok"),
               "qwen2_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                             "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers"),
               "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                             "decoder_sparse_step", "mlp_only_layers"),
               "gpt_oss": ("num_local_experts", "num_experts_per_tok"),
               **{t: ("num_experts_per_tok", "moe_intermediate_size") for t in DEEPSEEK_MODEL_TYPES}}
# DeepSeek's MoE and MLA fields, read by `deepseek_fields`; the multi-token-prediction layer
# (`num_nextn_predict_layers`) is accepted and not counted, as in the built-ins (vLLM loads it only
# as a speculative drafter).
_DEEPSEEK_FIELDS = ("n_routed_experts", "n_shared_experts", "moe_layer_freq", "first_k_dense_replace", "kv_lora_rank",
                    "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "num_nextn_predict_layers")
# Fields a family reads that others are refused for.
_FAMILY_FIELDS = {"gpt_oss": ("attention_bias",), **{t: _DEEPSEEK_FIELDS for t in DEEPSEEK_MODEL_TYPES}}
_ANY_MOE_FIELD = ("num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                  "shared_expert_intermediate_size", "decoder_sparse_step", "mlp_only_layers")

# Fields of architectures the spec does not model, by what they mean. A field counts when its value
# is set (not null, 0, false or empty).
_UNSUPPORTED_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("DeepSeek-style mixture of experts", ("n_routed_experts", "n_shared_experts", "moe_layer_freq",
                                           "first_k_dense_replace")),
    ("multi-head latent attention (MLA)", ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
                                           "qk_nope_head_dim", "v_head_dim")),
    ("chunked local attention", ("attention_chunk_size",)),
    ("multi-token prediction layers", ("num_nextn_predict_layers",)),
    ("biases on every attention projection", ("attention_bias",)),
    ("MLP biases", ("mlp_bias",)),
    ("a multimodal model (its language model is in text_config)", ("text_config",)),
)
_SUPPORTED = ("dense Llama, Mistral, Qwen2/2.5 and Qwen3 decoders and Mixtral, Qwen2-MoE, Qwen3-MoE and gpt-oss "
              "mixtures of experts, with full or sliding-window attention, and DeepSeek-V3 / Kimi-K2 (multi-head "
              "latent attention)")


def _is_set(value) -> bool:
    return value not in (None, False, 0, "", [], {})


def read_config_json(path: Path) -> dict:
    """The JSON object in `path`.

    Raises:
        ValueError: unreadable, not JSON, or not a JSON object (the message names the file).
    """
    return read_json_object(path, "not a readable JSON config", "must hold a JSON object (a model config)")


def check_supported(config: dict, path: Path) -> str:
    """The config's model_type, after refusing every architecture the spec cannot describe.

    Raises:
        ValueError: as the module docstring lists; names the file and every field found, with its
            value and what it means.
    """
    model_type = config.get("model_type") or "llama"
    problems = []
    for meaning, fields in _UNSUPPORTED_FIELDS:
        found = [f"{name}={config[name]!r}" for name in fields
                 if _is_set(config.get(name)) and name not in _FAMILY_FIELDS.get(model_type, ())]
        if found:
            problems.append(f"{', '.join(found)} ({meaning})")
    allowed = _MOE_FIELDS.get(model_type, ())
    foreign = [f"{name}={config[name]!r}" for name in _ANY_MOE_FIELD
               if name not in allowed and _is_set(config.get(name))
               and not (name == "decoder_sparse_step" and config.get(name) == 1)]
    if foreign:
        problems.append(f"{', '.join(foreign)} (mixture-of-experts field(s) that model_type {model_type!r} does not "
                        f"read{'; it reads ' + ', '.join(allowed) if allowed else ''})")
    if model_type not in SUPPORTED_MODEL_TYPES:
        problems.append(f"model_type={model_type!r} (supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    if problems:
        raise ValueError(f"{path}: architecture not supported yet: {'; '.join(problems)}. The model spec "
                         f"describes {_SUPPORTED} only")
    return model_type


def spec_fields(config: dict, path: Path) -> dict:
    """`ModelSpec` keyword arguments (all but `name`) from a supported config.

    Raises:
        ValueError: an unsupported architecture (`check_supported`), or a required key missing or
            not a whole number (the message names the file and the key).
    """
    model_type = check_supported(config, path)
    qkv_bias, qk_norm = SUPPORTED_MODEL_TYPES[model_type]

    def whole(key: str, default: int | None = None) -> int:
        value = config.get(key)
        if value is None:
            if default is None:
                raise ValueError(f"{path}: missing required key {key!r}")
            return default
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value != int(value)):
            raise ValueError(f"{path}: {key} must be a whole number, got {value!r}")
        return int(value)

    heads = whole("num_attention_heads")
    hidden = whole("hidden_size")
    moe = moe_fields(config, path, model_type, whole)
    window, num_sliding = read_sliding_window(config, path)
    softcap = config.get("attn_logit_softcapping") or 0.0
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not softcap >= 0:
        raise ValueError(f"{path}: attn_logit_softcapping must be a number >= 0 or null, got {softcap!r}")
    tied = config.get("tie_word_embeddings", False)
    if not isinstance(tied, bool):
        raise ValueError(f"{path}: tie_word_embeddings must be true or false, got {tied!r}")
    mla = deepseek_fields(config, path, whole) if model_type in DEEPSEEK_MODEL_TYPES else {}
    fields = dict(
        num_layers=whole("num_hidden_layers"),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=whole("num_key_value_heads", heads),
        head_dim=whole("head_dim", hidden // heads if heads > 0 else 0),
        intermediate_size=whole("intermediate_size"),
        vocab_size=whole("vocab_size"),
        max_model_len=whole("max_position_embeddings"),
        tie_word_embeddings=tied,
        qkv_bias=qkv_bias,
        qk_norm=qk_norm,
        moe=moe,
        quantization=(read_quantization_config(config["quantization_config"], path)
                      if config.get("quantization_config") is not None else None),
        sliding_window=window,
        num_sliding_layers=num_sliding,
        attn_logit_softcapping=softcap,
        attention_bias=model_type == "gpt_oss" and config.get("attention_bias", True) is not False,
        attention_sinks=model_type == "gpt_oss",
    )
    fields.update(mla)  # DeepSeek: head_dim is qk_nope + qk_rope
    return fields


def moe_fields(config: dict, path: Path, model_type: str, whole) -> MoESpec | None:
    """The `MoESpec` of a mixture-of-experts config (None for a dense model_type).

    Mixtral (transformers `MixtralConfig`, vLLM `mixtral.py`): `num_local_experts` experts of width
    `intermediate_size`, top-`num_experts_per_tok`. Qwen2-MoE / Qwen3-MoE (`Qwen2MoeConfig`,
    `Qwen3MoeConfig`; vLLM `qwen2_moe.py`, `qwen3_moe.py`): `num_experts` experts of width
    `moe_intermediate_size`, top-`num_experts_per_tok`; Qwen2-MoE adds a shared expert of width
    `shared_expert_intermediate_size`. The counts that decide the parameter count are required
    (no family default is assumed for them). Every layer must be sparse: `decoder_sparse_step`
    (default 1) must be 1 and `mlp_only_layers` (default []) empty — a model mixing dense and
    sparse layers is not described by the spec.

    Args:
        whole: `spec_fields`' reader of a whole-number key (names the file and key on error).

    Raises:
        ValueError: a required key missing or not a whole number, dense layers among the sparse
            ones, or counts `MoESpec` refuses; the message names the file and the key.
    """
    if model_type not in MOE_MODEL_TYPES:
        return None
    if model_type in ("mixtral", "gpt_oss"):
        experts_key, width_key, shared = "num_local_experts", "intermediate_size", 0
    elif model_type in DEEPSEEK_MODEL_TYPES:
        experts_key, width_key = "n_routed_experts", "moe_intermediate_size"
        # vLLM `DeepseekV2MoE`: the shared experts are one MLP of moe_intermediate_size x n_shared_experts.
        shared = whole("n_shared_experts", 0) * whole("moe_intermediate_size")
    else:
        experts_key, width_key = "num_experts", "moe_intermediate_size"
        shared = whole("shared_expert_intermediate_size") if model_type == "qwen2_moe" else 0
        step = config.get("decoder_sparse_step", 1)
        if step != 1:
            raise ValueError(f"{path}: decoder_sparse_step={step!r}: only every layer sparse (decoder_sparse_step 1) "
                             "is supported; a model mixing dense and MoE layers is not")
        if _is_set(config.get("mlp_only_layers")):
            raise ValueError(f"{path}: mlp_only_layers={config['mlp_only_layers']!r}: dense layers among the MoE "
                             "layers are not supported; expected an empty list")
    try:
        return MoESpec(num_experts=whole(experts_key), num_experts_per_tok=whole("num_experts_per_tok"),
                       expert_intermediate_size=whole(width_key), shared_expert_intermediate_size=shared,
                       bias=model_type == "gpt_oss")
    except ValueError as exc:
        if str(exc).startswith(str(path)):
            raise
        raise ValueError(f"{path}: {exc} (keys {experts_key}, num_experts_per_tok, {width_key})") from None


def deepseek_fields(config: dict, path: Path, whole) -> dict:
    """`ModelSpec` keyword arguments of a DeepSeek-V3 / Kimi-K2 config's attention and dense layers.

    Multi-head latent attention (transformers `DeepseekV3Config`, vLLM `deepseek_v2.py`
    `DeepseekV2MLAAttention`; `profiler.mla`): `kv_lora_rank` (the latent cached per token),
    `q_lora_rank` (null: queries without the low-rank projection, 0 here), `qk_nope_head_dim` +
    `qk_rope_head_dim` (the query/key head width, `head_dim`), `v_head_dim`; the first
    `first_k_dense_replace` layers have a dense MLP of `intermediate_size`
    (`num_dense_layers`), the others the routed experts (`moe_fields`). Every width is required:
    the config class's defaults are DeepSeek-V3's, and a config that omits one is more likely
    another model than V3 itself.

    Args:
        whole: `spec_fields`' reader of a whole-number key.

    Raises:
        ValueError: a required key missing or not a whole number, `kv_lora_rank` <= 0, a negative
            `q_lora_rank`, or `moe_layer_freq` other than 1 (MoE layers every k-th layer is not
            described by the spec); names the file and key.
    """
    freq = config.get("moe_layer_freq", 1)
    if freq != 1:
        raise ValueError(f"{path}: moe_layer_freq={freq!r}: only every layer after first_k_dense_replace sparse "
                         "(moe_layer_freq 1) is supported")
    kv_lora_rank, q_lora_rank = whole("kv_lora_rank"), whole("q_lora_rank", 0)
    if kv_lora_rank <= 0:  # 0 would price the layers as plain multi-head attention: another model
        raise ValueError(f"{path}: kv_lora_rank must be > 0 (the latent cached per token), got {kv_lora_rank}")
    if q_lora_rank < 0:
        raise ValueError(f"{path}: q_lora_rank must be >= 0 or null (no query compression), got {q_lora_rank}")
    return dict(head_dim=whole("qk_nope_head_dim") + whole("qk_rope_head_dim"), kv_lora_rank=kv_lora_rank,
                q_lora_rank=q_lora_rank, qk_rope_head_dim=whole("qk_rope_head_dim"),
                v_head_dim=whole("v_head_dim"), num_dense_layers=whole("first_k_dense_replace"))
