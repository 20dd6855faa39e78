"""Hugging Face checkpoints: round trip, sharded files, tied embeddings, and the errors that name what is wrong."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from gpu_engine.build import build_model  # noqa: E402
from gpu_engine.checkpoint import load_model_args, save_checkpoint  # noqa: E402
from gpu_engine.model import ModelArgs  # noqa: E402
from gpu_engine.prompts import prompt_token_ids  # noqa: E402
from traces import Request  # noqa: E402

TINY = Path(__file__).parent / "data" / "engine" / "tiny"


def build(args: ModelArgs, **kw):
    return build_model(args, dtype=torch.float32, device="cpu", **kw)


def same_weights(a, b) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def test_model_args_come_from_config_json():
    args = load_model_args(TINY)
    assert (args.spec.num_layers, args.spec.hidden_size, args.spec.num_key_value_heads) == (2, 64, 2)
    assert (args.rope_theta, args.rms_norm_eps) == (10000.0, 1e-5)


def test_round_trip_and_sharded_checkpoints_load_the_same_weights(tmp_path):
    model = build(load_model_args(TINY), seed=4)
    save_checkpoint(model, tmp_path / "one")
    assert same_weights(build(load_model_args(tmp_path / "one"), checkpoint_dir=tmp_path / "one"), model)
    # Split the single file in two shards, as large checkpoints come.
    tensors = safetensors_torch.load_file(tmp_path / "one" / "model.safetensors")
    names = sorted(tensors)
    shard_dir = tmp_path / "sharded"
    shard_dir.mkdir()
    (shard_dir / "config.json").write_text((tmp_path / "one" / "config.json").read_text())
    for i, part in enumerate((names[: len(names) // 2], names[len(names) // 2 :])):
        safetensors_torch.save_file({n: tensors[n] for n in part}, shard_dir / f"model-0000{i + 1}-of-00002.safetensors")
    assert same_weights(build(load_model_args(shard_dir), checkpoint_dir=shard_dir), model)


def test_tied_embeddings_share_one_matrix(tmp_path):
    config = json.loads((TINY / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(dict(config, tie_word_embeddings=True)))
    model = build(load_model_args(tmp_path), seed=1)
    assert model.lm_head.weight is model.embed_tokens.weight
    save_checkpoint(model, tmp_path)
    assert "lm_head.weight" not in safetensors_torch.load_file(tmp_path / "model.safetensors")
    assert same_weights(build(load_model_args(tmp_path), checkpoint_dir=tmp_path), model)


def test_random_weights_are_seeded():
    args = load_model_args(TINY)
    assert same_weights(build(args, seed=2), build(args, seed=2))
    assert not same_weights(build(args, seed=2), build(args, seed=3))


def test_a_missing_tensor_is_named(tmp_path):
    save_checkpoint(build(load_model_args(TINY), seed=0), tmp_path)
    tensors = safetensors_torch.load_file(tmp_path / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    safetensors_torch.save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"lacks 1 tensors, e.g. \['model.layers.1.mlp.up_proj.weight'\]"):
        build(load_model_args(tmp_path), checkpoint_dir=tmp_path)


def test_a_wrong_shape_is_named(tmp_path):
    save_checkpoint(build(load_model_args(TINY), seed=0), tmp_path)
    tensors = safetensors_torch.load_file(tmp_path / "model.safetensors")
    tensors["model.norm.weight"] = torch.ones(32)
    safetensors_torch.save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"model.norm.weight has shape \(32,\), the model expects \(64,\)"):
        build(load_model_args(tmp_path), checkpoint_dir=tmp_path)


def test_unsupported_rotary_scaling_and_missing_files_are_errors(tmp_path):
    config = json.loads((TINY / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(dict(config, rope_scaling={"rope_type": "llama3", "factor": 8})))
    with pytest.raises(ValueError, match="rotary scaling 'llama3' is not supported"):
        load_model_args(tmp_path)
    with pytest.raises(ValueError, match="no \\*.safetensors file"):
        build(load_model_args(TINY), checkpoint_dir=tmp_path)


def test_prompt_ids_are_seeded_per_request():
    r = Request(7, 0.0, 12, 3)
    ids = prompt_token_ids(r, 256, seed=1)
    assert len(ids) == 12 and all(0 <= t < 256 for t in ids)
    assert prompt_token_ids(r, 256, seed=1) == ids
    assert prompt_token_ids(Request(8, 0.0, 12, 3), 256, seed=1) != ids


def test_models_the_engine_does_not_implement_are_refused():
    """Qwen3's q/k norms are not in the engine's Llama layer: refused, not run as Llama (Qwen2's q/k/v
    biases are: tests/test_engine_windows.py)."""
    from gpu_engine.model import ModelArgs
    from profiler import get_model_spec

    with pytest.raises(ValueError, match="'qwen3-8b' has per-head q/k RMSNorm"):
        ModelArgs.for_builtin(get_model_spec("qwen3-8b"))
    assert ModelArgs.for_builtin(get_model_spec("qwen2.5-7b")).rope_theta == 1000000.0
    assert ModelArgs.for_builtin(get_model_spec("llama-3.1-8b")).rope_theta == 500000.0
