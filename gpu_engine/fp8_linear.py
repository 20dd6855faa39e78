"""A linear layer with FP8 (E4M3) weights, computed as the hardware allows, as vLLM 0.19's
`Fp8LinearMethod` does (vllm/model_executor/layers/quantization/fp8.py):

- the weight is stored in `torch.float8_e4m3fn` with one fp32 scale per output channel
  (`weight ≈ weight_fp8 × scale`; per-tensor is the one-channel case), the checkpoint formats of
  `profiler.quantization` (`fp8` per tensor, compressed-tensors / fbgemm per channel);
- on a CUDA device with FP8 tensor cores (compute capability ≥ 8.9) the input is quantised
  dynamically per tensor (`scaled_fp8_quant`: scale = max|x| / 448) and the product runs as one
  `torch._scaled_mm` W8A8 GEMM with both scales, output in the input's dtype;
- anywhere else (CPU, Ampere) the weight is dequantised to the input's compute dtype and
  multiplied there: FP8 weight-only, as vLLM's FP8 Marlin path computes it.

`quantize_linears_(model)` swaps the decoder layers' `nn.Linear`s (qkv, o, gate_up, down) for
this layer; the embedding and LM head stay as they are (vLLM quantises `LinearBase` layers only).
"""
from __future__ import annotations

import torch
from torch import nn

FP8_MAX = 448.0  # largest finite float8_e4m3fn
_W8A8_CAPABILITY = (8, 9)  # Ada / Hopper / Blackwell: FP8 tensor cores


class Fp8Linear(nn.Module):
    """y = x Wᵀ with W held in FP8 E4M3 and a per-output-channel fp32 scale; no bias.

    Args:
        weight: (out_features, in_features), any float dtype: quantised here, scale per row =
            max|row| / 448 (a zero row gets scale 1).

    Shapes: forward takes (..., in_features) and returns (..., out_features) in x's dtype.
    """

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        w = weight.detach().to(torch.float32)
        scale = (w.abs().amax(dim=1, keepdim=True) / FP8_MAX).clamp(min=torch.finfo(torch.float32).tiny)
        scale = torch.where(w.abs().amax(dim=1, keepdim=True) > 0, scale, torch.ones_like(scale))
        self.register_buffer("weight_fp8", (w / scale).to(torch.float8_e4m3fn))
        self.register_buffer("weight_scale", scale)  # (out, 1), fp32
        self.in_features, self.out_features = w.shape[1], w.shape[0]

    def dequantized_weight(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight the FP8 values and scales stand for, (out, in) in `dtype`."""
        return (self.weight_fp8.to(torch.float32) * self.weight_scale).to(dtype)

    def uses_w8a8(self, x: torch.Tensor) -> bool:
        """Whether `forward(x)` runs the W8A8 FP8 GEMM (a CUDA input on an FP8 tensor-core card)."""
        return (x.is_cuda and hasattr(torch, "_scaled_mm")
                and torch.cuda.get_device_capability(x.device) >= _W8A8_CAPABILITY)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.uses_w8a8(x):
            return self._w8a8(x)
        return x @ self.dequantized_weight(x.dtype).t()

    def _w8a8(self, x: torch.Tensor) -> torch.Tensor:
        """Dynamic per-tensor FP8 input, one `_scaled_mm` (vLLM `Fp8LinearOp.apply`)."""
        rows = x.reshape(-1, self.in_features)
        x_scale = (rows.abs().amax().float() / FP8_MAX).clamp(min=1e-12)
        x_fp8 = (rows.float() / x_scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        out = torch._scaled_mm(x_fp8, self.weight_fp8.t(), scale_a=x_scale.reshape(1, 1),
                               scale_b=self.weight_scale.reshape(1, -1), out_dtype=x.dtype)
        return out.reshape(*x.shape[:-1], self.out_features)


QUANTIZED_LINEARS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")


@torch.no_grad()
def quantize_linears_(model: nn.Module) -> nn.Module:
    """Replace every decoder-layer `nn.Linear` named in `QUANTIZED_LINEARS` (bias-free, as the
    engine builds them) by an `Fp8Linear` of its weight, in place; returns `model`.

    Raises:
        ValueError: a matching layer has a bias (not modelled here).
    """
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if name in QUANTIZED_LINEARS and isinstance(child, nn.Linear):
                if child.bias is not None:
                    raise ValueError(f"{name} has a bias; Fp8Linear quantises bias-free layers only")
                setattr(parent, name, Fp8Linear(child.weight))
    return model
