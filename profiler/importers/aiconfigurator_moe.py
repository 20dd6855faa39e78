"""AIConfigurator's `moe_perf` table (ai-dynamo/aiconfigurator, Apache-2.0; copies in
../shared/profiles/aiconfigurator/<system>/moe/vllm/<version>/moe_perf.parquet) as the `moe` table.

Each row times one call of vLLM's fused MoE experts on one GPU (AIConfigurator's vLLM MoE
collector runs `fused_experts` with the expert map of `determine_expert_map` for the rank's share
of the experts): `num_tokens` tokens enter the layer, each routed to `topk` of `num_experts`
experts of width `inter_size` on a model of `hidden_size`, the experts split over `moe_ep_size`
ranks and each expert's width over `moe_tp_size`; the routing is `balanced` or drawn from a power
law (`power_law_1.01`, `power_law_1.2`); `latency` is **milliseconds**. Checked by hand on
rtx_pro_6000_server (Qwen3-30B-A3B's shape, hidden 2048, width 768, 128 experts, top-8): EP 2 at
T tokens takes what EP 1 takes at T / 2 (0.113 ms at 4 tokens vs 0.107 ms at 2): the same
token–expert pairs and active experts per rank, so `num_tokens` counts every token entering the
layer, not one rank's share. The router GEMM and its top-k are not in the time.

Only bf16 rows of the `vllm_fused_moe` kernel are imported (the Marlin int4 and fp8 kernels are
other dtypes).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

MS = 1e-3  # the table's latency unit (milliseconds) in seconds
BF16_BYTES = 2
MOE_COLUMNS = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
               "distribution", "time_s")
SOURCE_COLUMNS = ("kernel_source", "moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
                  "moe_tp_size", "moe_ep_size", "distribution", "latency")
# The routing distributions AIConfigurator measures → the power-law exponent (0: balanced), the
# value of `engine.expert_routing_skew` that selects them.
DISTRIBUTIONS = {"balanced": 0.0, "power_law_1.01": 1.01, "power_law_1.2": 1.2}


def convert_moe(table: pd.DataFrame, dtype: str = "bfloat16") -> pd.DataFrame:
    """`dtype` (bfloat16, fp8, fp8_block) `vllm_fused_moe` rows of `moe_perf` as `MOE_COLUMNS`
    (latency ms → s), sorted."""
    rows = table[(table["moe_dtype"] == dtype) & (table["kernel_source"] == "vllm_fused_moe")
                 & table["distribution"].isin(list(DISTRIBUTIONS))]
    out = pd.DataFrame({c: rows[c].astype(np.int64).to_numpy() for c in MOE_COLUMNS[:7]})
    out["distribution"] = rows["distribution"].astype(str).to_numpy()
    out["time_s"] = rows["latency"].to_numpy(dtype=np.float64) * MS
    return out.sort_values(list(MOE_COLUMNS[1:8]) + ["num_tokens"], kind="stable").reset_index(drop=True)


def moe_faster_than_datasheet(table: pd.DataFrame, peak_flops: float, mem_bw: float,
                              weight_bytes: int = BF16_BYTES) -> np.ndarray:
    """Rows faster than the datasheet roofline of the work they must do on one rank (100 % of the
    bf16 peak and of the memory bandwidth): reading the weights of the experts the balanced routing
    activates there, min(E / EP, T · k / EP) experts of 3 × hidden × width / TP bf16 values, and
    2 × that many FLOPs per local token–expert pair. A row under it had its experts in L2 (the
    collector repeats one layer; Blackwell's RTX PRO 6000 has 128 MB of L2): a serving step
    streams every layer's experts from memory, so such a row would price it too fast.

    Returns:
        bool array (rows,): True where the row beats the bound.
    """
    t, tokens, hidden, inter, topk, experts, tp, ep = (table[c].to_numpy(dtype=np.float64) for c in (
        "time_s", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"))
    expert_values = 3 * hidden * inter / tp
    pairs = tokens * topk / ep
    active = np.minimum(experts / ep, pairs)
    bound = np.maximum(active * expert_values * weight_bytes / mem_bw, 2 * pairs * expert_values / peak_flops)
    return t < bound
