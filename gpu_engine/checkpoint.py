"""Hugging Face checkpoints: read config.json + *.safetensors into a `Llama`, and write one back.

Hugging Face stores q/k/v and gate/up projections separately (`model.layers.{i}.self_attn.q_proj.weight`,
...); the engine fuses them (`qkv_proj`, `gate_up_proj`), so loading copies each into its rows of
the fused weight, as vLLM's `packed_modules_mapping` does. Weights are used as stored: HF Llama
checkpoints already use the rotate-half rotary layout of `gpu_engine.model.Rotary`.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from gpu_engine.model import Llama, ModelArgs
from profiler import get_model_spec
from profiler.sliding_window import FULL, SLIDING, layer_pattern
from profiler.atomic_write import write_text_whole, write_whole

# Hugging Face projection -> (fused engine module, index of its row block).
_PACKED = {"q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
           "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1)}


def load_model_args(checkpoint_dir: str | Path) -> ModelArgs:
    """`ModelArgs` from a checkpoint's config.json (shapes via `profiler.get_model_spec`).

    Reads `rope_theta` (transformers 4) or `rope_parameters.rope_theta` (transformers 5) and
    `rms_norm_eps`, with LlamaConfig's defaults (10,000 and 1e-6) where absent, which layers
    are windowed as the profiler reads them (`profiler.sliding_window.layer_pattern`), and gpt-oss's
    `swiglu_alpha` / `swiglu_limit` (GptOssConfig's defaults 1.702, 7.0).

    Raises:
        ValueError: a missing config or key (from the profiler), or rotary scaling other than
            the default (Llama 3.1's "llama3" or YaRN scaling, gpt-oss's default, is not implemented).
    """
    path = Path(checkpoint_dir) / "config.json"
    spec = get_model_spec(path)
    config = json.loads(path.read_text())
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    # GptOssConfig's default rotary is YaRN: a gpt-oss config that names none has it.
    rope_type = rope.get("rope_type", rope.get("type", "yarn" if config.get("model_type") == "gpt_oss" else "default"))
    if rope_type != "default":
        raise ValueError(f"{path}: rotary scaling {rope_type!r} is not supported by the engine (only default)")
    theta = config.get("rope_theta", rope.get("rope_theta", 10000.0))
    windowed = layer_pattern(config, path) if spec.num_sliding_layers else [False] * spec.num_layers
    return ModelArgs(spec, rope_theta=float(theta), rms_norm_eps=float(config.get("rms_norm_eps", 1e-6)),
                     layer_windows=tuple(spec.sliding_window if w else 0 for w in windowed),
                     swiglu_alpha=float(config.get("swiglu_alpha", 1.702)),
                     swiglu_limit=float(config.get("swiglu_limit", 7.0)))


def load_weights(model: Llama, checkpoint_dir: str | Path) -> Llama:
    """Copy every tensor of the directory's *.safetensors files into `model` (any sharding).

    Raises:
        ValueError: no safetensors file, an unexpected tensor name or shape, or a model
            parameter the checkpoint does not provide (the message names them).
    """
    from safetensors import safe_open

    files = sorted(Path(checkpoint_dir).glob("*.safetensors"))
    if not files:
        raise ValueError(f"{checkpoint_dir}: no *.safetensors file")
    params = dict(model.named_parameters())
    loaded: set[str] = set()
    with torch.no_grad():
        for file in files:
            with safe_open(str(file), framework="pt") as f:
                for hf_name in f.keys():
                    if hf_name.endswith("rotary_emb.inv_freq"):
                        continue
                    name, rows = _engine_slot(model, hf_name)
                    if name not in params:
                        raise ValueError(f"{file}: unexpected tensor {hf_name!r}")
                    target = params[name][rows]
                    tensor = f.get_tensor(hf_name)
                    if tensor.shape != target.shape:
                        raise ValueError(f"{file}: {hf_name} has shape {tuple(tensor.shape)}, "
                                         f"the model expects {tuple(target.shape)}")
                    target.copy_(tensor)
                    loaded.add(hf_name)
    missing = sorted(set(_hf_names(model)) - loaded)
    if missing:
        raise ValueError(f"{checkpoint_dir}: checkpoint lacks {len(missing)} tensors, e.g. {missing[:3]}")
    return model


def save_checkpoint(model: Llama, checkpoint_dir: str | Path) -> Path:
    """Write `model` as a Hugging Face Llama checkpoint (config.json, model.safetensors): Mixtral with MoE
    layers, gpt-oss with biased experts, Qwen2 with q/k/v biases, Mistral with every layer windowed.

    transformers' `LlamaForCausalLM.from_pretrained` reads it; EOS/BOS ids are left unset so
    generation runs for exactly the requested number of tokens.

    Each file is written whole or not at all (`profiler.atomic_write`), the weights first: a
    folder whose config.json is new holds the weights that go with it.

    Returns:
        The directory.

    Raises:
        profiler.atomic_write.OutputWriteError: a file could not be written (named, with the
            system's reason); the file it would have replaced is left as it was.
    """
    from safetensors.torch import save_file

    out = Path(checkpoint_dir)
    params = dict(model.named_parameters())
    tensors = {}
    for hf_name in _hf_names(model):
        name, rows = _engine_slot(model, hf_name)
        tensors[hf_name] = params[name][rows].detach().cpu().contiguous()
    write_whole(out / "model.safetensors", lambda tmp: save_file(tensors, str(tmp)))
    write_text_whole(out / "config.json", json.dumps(_hf_config(model.args, model.embed_tokens.weight.dtype), indent=2))
    return out


def _hf_names(model: Llama) -> list[str]:
    """Every tensor name a Hugging Face checkpoint of this model holds."""
    names = ["model.embed_tokens.weight", "model.norm.weight"]
    if not model.args.spec.tie_word_embeddings:
        names.append("lm_head.weight")
    per_layer = ["input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.o_proj.weight",
                 "mlp.down_proj.weight"] + [f"{'mlp' if p in ('gate_proj', 'up_proj') else 'self_attn'}.{p}.weight"
                                            for p in _PACKED]
    if model.args.spec.qkv_bias or model.args.spec.attention_bias:  # Qwen2, gpt-oss
        per_layer += [f"self_attn.{p}.bias" for p in ("q_proj", "k_proj", "v_proj")]
    moe = model.args.spec.moe
    if model.args.spec.attention_bias:  # gpt-oss: o_proj's bias too, and a sink per head
        per_layer += ["self_attn.o_proj.bias", "self_attn.sinks"]
    if moe is not None and moe.bias:  # gpt-oss: a biased router and fused, biased experts, as stored
        per_layer = [n for n in per_layer if not n.startswith("mlp.")] + [
            f"mlp.{n}" for n in ("router.weight", "router.bias", "experts.gate_up_proj", "experts.gate_up_proj_bias",
                                 "experts.down_proj", "experts.down_proj_bias")]
    elif moe is not None:  # Mixtral: block_sparse_moe.gate and per-expert w1 (gate), w2 (down), w3 (up)
        per_layer = [n for n in per_layer if not n.startswith("mlp.")] + ["block_sparse_moe.gate.weight"] + [
            f"block_sparse_moe.experts.{j}.{w}.weight" for j in range(moe.num_experts) for w in ("w1", "w2", "w3")]
    for i in range(model.args.spec.num_layers):
        names += [f"model.layers.{i}.{n}" for n in per_layer]
    return names


def _engine_slot(model: Llama, hf_name: str) -> tuple[str, slice | int | tuple[int, slice]]:
    """The engine parameter name and the index into it (rows; an expert, or an expert's rows, of a
    fused MoE weight) that holds Hugging Face tensor `hf_name`."""
    name = hf_name.removeprefix("model.")
    parts = name.split(".")
    if len(parts) > 2 and parts[2] == "block_sparse_moe":  # gpu_engine/moe.py's fused expert weights
        layer = f"layers.{parts[1]}.mlp"
        if parts[3] == "gate":
            return f"{layer}.gate.weight", slice(None)
        if parts[3] != "experts" or len(parts) != 7 or parts[5] not in ("w1", "w2", "w3"):
            return name, slice(None)  # not a tensor of this model: the caller reports it
        expert, width = int(parts[4]), model.args.spec.moe.expert_intermediate_size
        if parts[5] == "w2":
            return f"{layer}.w2", expert
        start = 0 if parts[5] == "w1" else width
        return f"{layer}.w13", (expert, slice(start, start + width))
    if len(parts) == 5 and parts[3] in _PACKED:  # layers.{i}.{self_attn|mlp}.{proj}.{weight|bias}
        fused, index = _PACKED[parts[3]]
        widths = _packed_widths(model.args, fused)
        start = sum(widths[:index])
        return f"layers.{parts[1]}.{parts[2]}.{fused}.{parts[4]}", slice(start, start + widths[index])
    return name, slice(None)


def _packed_widths(args: ModelArgs, fused: str) -> list[int]:
    s = args.spec
    if fused == "qkv_proj":
        kv = s.num_key_value_heads * s.head_dim
        return [s.num_attention_heads * s.head_dim, kv, kv]
    return [s.intermediate_size, s.intermediate_size]


def _hf_config(args: ModelArgs, dtype: torch.dtype) -> dict:
    s = args.spec
    if s.moe is not None and s.moe.bias:  # gpt-oss: transformers `GptOssConfig`, default rotary (no YaRN)
        return {**_llama_hf_config(args, dtype), "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
                "intermediate_size": s.moe.expert_intermediate_size, "num_local_experts": s.moe.num_experts,
                "num_experts_per_tok": s.moe.num_experts_per_tok, "sliding_window": s.sliding_window or None,
                "layer_types": [SLIDING if w else FULL for w in args.layer_windows], "attention_bias": True,
                "swiglu_alpha": args.swiglu_alpha, "swiglu_limit": args.swiglu_limit,
                "rope_parameters": {"rope_type": "default", "rope_theta": args.rope_theta},
                "output_router_logits": False}
    if s.moe is not None:  # Mixtral: transformers `MixtralConfig`, experts of width intermediate_size
        if 0 < s.num_sliding_layers < s.num_layers:
            raise ValueError(f"model {s.name!r}: Mixtral's config windows every layer or none, not "
                             f"{s.num_sliding_layers} of {s.num_layers}")
        return {**_dense_hf_config(args, dtype), "architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                "intermediate_size": s.moe.expert_intermediate_size, "num_local_experts": s.moe.num_experts,
                "num_experts_per_tok": s.moe.num_experts_per_tok, "sliding_window": s.sliding_window or None,
                "router_jitter_noise": 0.0, "output_router_logits": False}
    return _dense_hf_config(args, dtype)


def _dense_hf_config(args: ModelArgs, dtype: torch.dtype) -> dict:
    """A Llama config; Qwen2's (q/k/v biases, `layer_types` for windowed layers) or Mistral's (every
    layer windowed) where the model has those."""
    s = args.spec
    config = _llama_hf_config(args, dtype)
    if s.qkv_bias:
        return {**config, "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
                "use_sliding_window": bool(s.num_sliding_layers), "sliding_window": s.sliding_window or None,
                "max_window_layers": next((i for i, w in enumerate(args.layer_windows) if w), s.num_layers),
                "layer_types": [SLIDING if w else FULL for w in args.layer_windows]}
    if s.num_sliding_layers == s.num_layers:
        return {**config, "architectures": ["MistralForCausalLM"], "model_type": "mistral",
                "sliding_window": s.sliding_window}
    if s.num_sliding_layers:
        raise ValueError(f"model {s.name!r}: a checkpoint of a Llama layer with {s.num_sliding_layers} of "
                         f"{s.num_layers} layers windowed has no transformers family here (Qwen2's has q/k/v biases, "
                         "Mistral's windows every layer)")
    return config


def _llama_hf_config(args: ModelArgs, dtype: torch.dtype) -> dict:
    s = args.spec
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": s.hidden_size, "intermediate_size": s.intermediate_size,
        "num_hidden_layers": s.num_layers, "num_attention_heads": s.num_attention_heads,
        "num_key_value_heads": s.num_key_value_heads, "head_dim": s.head_dim,
        "vocab_size": s.vocab_size, "max_position_embeddings": s.max_model_len,
        "tie_word_embeddings": s.tie_word_embeddings, "rms_norm_eps": args.rms_norm_eps,
        "rope_theta": args.rope_theta, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
        "torch_dtype": str(dtype).removeprefix("torch."),
    }
