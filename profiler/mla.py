"""Multi-head latent attention (MLA: DeepSeek-V2/V3, Kimi-K2) as vLLM 0.19 runs it: its projections,
the latent KV cache and the work of its two attention paths.

Read from vLLM's `vllm/model_executor/models/deepseek_v2.py` (`DeepseekV2MLAAttention`) and
`vllm/v1/attention/backends/mla/common.py` (`MLACommonImpl`), and DeepSeek-V3's config.json:

- Projections per layer: `fused_qkv_a_proj` (hidden → q_lora_rank + kv_lora_rank + qk_rope_head_dim,
  replicated on every TP rank: `disable_tp=True`), `q_b_proj` (q_lora_rank → heads × head_dim,
  column-parallel; without a q LoRA, `q_proj` hidden → heads × head_dim and `kv_a_proj_with_mqa`),
  `kv_b_proj` (kv_lora_rank → heads × (qk_nope_head_dim + v_head_dim), column-parallel), `o_proj`
  (heads × v_head_dim → hidden, row-parallel); head_dim = qk_nope_head_dim + qk_rope_head_dim.
- KV cache: one latent of kv_lora_rank + qk_rope_head_dim elements a token and layer
  (`MLAAttentionSpec`, one KV head of head size 576 for DeepSeek-V3), the same on every TP rank
  (the latent is not split by heads): 61 × 576 × 2 = 70,272 bytes a token for DeepSeek-V3 in BF16.
- Prefill (`_forward_prefill`): the new tokens' latents are up-projected by `kv_b_proj` (in the
  GEMMs above) and attention runs as multi-head attention with q/k of head_dim and v of
  v_head_dim: 2 × (head_dim + v_head_dim) FLOPs per query–key pair and head; a chunk after earlier
  context also up-projects the context's cached latents (`_compute_prefill_context`):
  2 × kv_lora_rank × heads × (qk_nope + v_head_dim) FLOPs per context token.
- Decode (`_forward_decode`, weights absorbed): each head's query is taken into the latent space
  (W_UK) and its output out of it (W_UV) — priced as `kv_b_proj` over the decode tokens, the same
  weights and FLOPs — and attends over the latents: 2 × (kv_lora_rank + qk_rope_head_dim) +
  2 × kv_lora_rank FLOPs per pair and head, reading each latent once for all heads.

No measured MLA table is public in the AIConfigurator copies this project holds; the roofline
prices both paths at the device's attention terms (its label says roofline).
"""
from __future__ import annotations


def mla_gemm_shapes(model, tp: int) -> tuple[tuple[str, int, int], ...]:
    """One rank's MLA projections (module docstring): (name, in_dim, out_dim).

    Raises:
        ValueError: tp does not divide the heads.
    """
    heads = model.num_attention_heads
    if heads % tp:
        raise ValueError(f"model {model.name!r}: tensor_parallel_size {tp} must divide num_attention_heads {heads}")
    heads //= tp
    latent = model.kv_lora_rank + model.qk_rope_head_dim
    nope = model.head_dim - model.qk_rope_head_dim
    if model.q_lora_rank:
        projections = (("fused_qkv_a_proj", model.hidden_size, model.q_lora_rank + latent),
                       ("q_b_proj", model.q_lora_rank, heads * model.head_dim))
    else:
        projections = (("q_proj", model.hidden_size, heads * model.head_dim),
                        ("kv_a_proj_with_mqa", model.hidden_size, latent))
    return projections + (("kv_b_proj", model.kv_lora_rank, heads * (nope + model.v_head_dim)),
                          ("o_proj", heads * model.v_head_dim, model.hidden_size))


def mla_kv_bytes_per_token(model, dtype_bytes: int) -> int:
    """KV-cache bytes a token takes on every rank: layers × (kv_lora_rank + qk_rope_head_dim) × dtype bytes."""
    return model.num_layers * (model.kv_lora_rank + model.qk_rope_head_dim) * dtype_bytes


def mla_flops(model, tp: int) -> tuple[float, float, float]:
    """(prefill FLOPs per query–key pair, decode FLOPs per pair, prefill FLOPs per context token
    up-projected) of one layer on one rank (module docstring)."""
    heads = model.num_attention_heads // tp
    nope = model.head_dim - model.qk_rope_head_dim
    prefill = 2.0 * heads * (model.head_dim + model.v_head_dim)
    decode = 2.0 * heads * (2 * model.kv_lora_rank + model.qk_rope_head_dim)
    context = 2.0 * model.kv_lora_rank * heads * (nope + model.v_head_dim)
    return prefill, decode, context


def mla_replicated_params(model) -> int:
    """Weights every TP rank holds whole (elements): `fused_qkv_a_proj` (hidden × (q_lora_rank +
    kv_lora_rank + qk_rope_head_dim), `disable_tp=True`) or, without a q LoRA, `kv_a_proj_with_mqa`
    (`ReplicatedLinear`), over all layers; 0 without MLA."""
    if not model.kv_lora_rank:
        return 0
    return model.num_layers * model.hidden_size * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)
