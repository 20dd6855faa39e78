"""The engine's FP8-weight linear layer (gpu_engine/fp8_linear.py) against a dequantised reference:
E4M3 rounding bounds per weight, the layer equal to the dequantised product, and a decoder with its
linears quantised close to the BF16/FP32 one. (The W8A8 `_scaled_mm` path needs an FP8 GPU.)"""
import pytest
import torch
from torch import nn

from gpu_engine.fp8_linear import FP8_MAX, Fp8Linear, quantize_linears_


def test_weights_round_within_e4m3_precision():
    torch.manual_seed(0)
    w = torch.randn(64, 256) * 0.02
    layer = Fp8Linear(w)
    assert layer.weight_fp8.dtype == torch.float8_e4m3fn and layer.weight_scale.shape == (64, 1)
    # Each row's largest weight maps to 448 exactly (scale = max|row| / 448).
    assert torch.equal(layer.weight_fp8.float().abs().amax(dim=1), torch.full((64,), FP8_MAX))
    # E4M3 keeps 3 mantissa bits: a normal value rounds within 2^-4 of itself; below 2^-6 (subnormal)
    # the step is 2^-9, so the error is at most 2^-10, both in units of the row's scale.
    err = (layer.dequantized_weight() - w).abs()
    bound = torch.maximum(w.abs() * 2.0 ** -4, layer.weight_scale * 2.0 ** -10)
    assert bool((err <= bound * (1 + 1e-6)).all())


def test_forward_equals_the_dequantised_reference_and_is_close_to_the_original():
    torch.manual_seed(1)
    w, x = torch.randn(96, 128) * 0.05, torch.randn(7, 128)
    layer = Fp8Linear(w)
    assert torch.allclose(layer(x), x @ layer.dequantized_weight().t(), rtol=0, atol=1e-6)
    # Against the unquantised weight: relative error of the product ≤ 5 % (measured 2.8 % here:
    # E4M3's per-weight relative error is ≤ 2^-4 = 6.25 %, about 2^-4 / √3 ≈ 3.6 % RMS for uniform
    # rounding, and a product of random vectors carries that RMS relative error).
    exact = x @ w.t()
    assert float((layer(x) - exact).norm() / exact.norm()) < 0.05
    assert layer(x.to(torch.bfloat16)).dtype == torch.bfloat16 and not layer.uses_w8a8(x)


def test_a_zero_row_keeps_scale_one():
    layer = Fp8Linear(torch.zeros(2, 4))
    assert torch.equal(layer.weight_scale, torch.ones(2, 1)) and torch.equal(layer(torch.ones(1, 4)), torch.zeros(1, 2))


def test_quantize_linears_replaces_the_decoder_projections_only():
    from gpu_engine.model import Llama, ModelArgs
    from profiler import get_model_spec

    spec = get_model_spec("profiler/data/models/tiny-llama/config.json")
    model = Llama(ModelArgs(spec)).init_random_(seed=0)
    reference = {n: p.detach().clone() for n, p in model.named_parameters()}
    quantize_linears_(model)
    layer = model.layers[0]
    assert isinstance(layer.self_attn.qkv_proj, Fp8Linear) and isinstance(layer.mlp.down_proj, Fp8Linear)
    assert isinstance(model.lm_head, nn.Linear) and isinstance(model.embed_tokens, nn.Embedding)
    kinds = {type(m).__name__ for m in model.modules()}
    assert "Fp8Linear" in kinds and not any(isinstance(m, nn.Linear) and m is not model.lm_head for m in model.modules())
    # Every replaced weight dequantises to within E4M3 precision of the original.
    for name, module in model.named_modules():
        if isinstance(module, Fp8Linear):
            original = reference[f"{name}.weight"]
            assert float((module.dequantized_weight() - original).abs().max()) <= float(original.abs().max()) * 2.0 ** -4
    with pytest.raises(ValueError, match="has a bias"):
        quantize_linears_(nn.ModuleDict({"o_proj": nn.Linear(4, 4, bias=True)}))


def test_build_model_runs_fp8_linears_for_a_quantised_spec_and_refuses_4_bit():
    from dataclasses import replace

    from gpu_engine.build import build_model
    from gpu_engine.model import ModelArgs
    from profiler import get_model_spec
    from profiler.quantization import WeightFormat

    spec = get_model_spec("profiler/data/models/tiny-llama/config.json")
    bf16 = build_model(ModelArgs(spec), dtype=torch.float32, device="cpu", seed=3)
    fp8 = build_model(ModelArgs(spec.served("fp8")), dtype=torch.float32, device="cpu", seed=3)
    assert isinstance(fp8.layers[1].mlp.gate_up_proj, Fp8Linear) and isinstance(bf16.layers[1].mlp.gate_up_proj, nn.Linear)
    x = torch.randn(5, spec.hidden_size)
    with torch.no_grad():
        reference, quantized = bf16.layers[1].mlp(x), fp8.layers[1].mlp(x)
    assert float((quantized - reference).norm() / reference.norm()) < 0.05  # same seeded weights, E4M3-rounded
    awq = replace(spec, quantization=WeightFormat("awq", "weight_only", 4, 128, 2.5, source="x/config.json"))
    with pytest.raises(ValueError, match="the engine runs FP8 weights only; .*awq W4A16 g128"):
        build_model(ModelArgs(awq), dtype=torch.float32, device="cpu")
