"""Mixture of experts against a real run: Qwen3-30B-A3B-Instruct-2507 on 2× RTX PRO 6000 with
vLLM 0.19 `data_parallel_size 2, enable_expert_parallel` (LLMServingSim's recorded run in
../shared/validation/llmservingsim/RTXPRO6000_Qwen3-30B-A3B_dp2ep2), priced from kernel tables
only, and what each source and assumption moves.

Run from the repo root with ../shared beside the checkout (results go in BENCHMARKS.md):
    .venv/bin/python benchmarks/bench_moe.py

1. The two measured MoE tables at the model's shape (AIConfigurator's fused experts at EP 1 / 2,
   LLMServingSim's whole block at EP 1 with every expert active).
2. Step breakdown of the shipped `auto` model at the run's batch sizes.
3. The whole run simulated with: `auto` (AIConfigurator's EP 2 experts, LLMServingSim's dense and
   attention kernels, AIConfigurator's all-reduce for the dispatch/combine); LLMServingSim's EP 1
   block mapped to EP 2; the experts on the roofline; AIConfigurator's power-law-1.2 routing; and
   no DP padding / no dispatch (to show what the DP modelling is worth).
"""
from __future__ import annotations

import sys
from pathlib import Path

from experiments.config import SweepConfig
from experiments.deployment import build_pricer
from experiments.point import build_cost_model
from experiments.verification import recorded_run as rr
from experiments.verification.verify import simulate_point
from profiler.measured.shipped import MEASURED_DIR, load_tables
from profiler.moe_cost import MoEBlockCost, dp_moe_tokens

BUNDLE = Path(__file__).resolve().parents[2] / "shared" / "validation" / "llmservingsim" / "RTXPRO6000_Qwen3-30B-A3B_dp2ep2"
METRICS = ("makespan_s", "ttft_s_p50", "tpot_s_p50", "e2e_s_p50", "ttft_s_p90", "tpot_s_p90", "e2e_s_p90")


def tables() -> None:
    aic = load_tables(str(MEASURED_DIR / "rtx-pro-6000" / "aiconfigurator")).tables["moe"]
    lss = load_tables(str(MEASURED_DIR / "rtx-pro-6000" / "llmservingsim-qwen3-30b-a3b-instruct-2507-tp1")).tables["moe_block"]
    a = aic[(aic.hidden_size == 2048) & (aic.inter_size == 768) & (aic.num_experts == 128) & (aic.topk == 8)
            & (aic.moe_tp_size == 1)]
    print("| tokens | LLMServingSim block, 128 active, µs | AIC experts EP 1 µs | AIC EP 2 µs | AIC EP 2 power-law 1.2 µs |")
    print("|---|---|---|---|---|")
    for t in (16, 64, 128, 256, 512, 1024, 2048):
        block = lss[(lss.num_tokens == t) & (lss.active_experts == 128)].time_s

        def aic_us(ep, dist="balanced"):
            r = a[(a.num_tokens == t) & (a.moe_ep_size == ep) & (a.distribution == dist)].time_s
            return f"{r.iloc[0] * 1e6:.0f}" if len(r) else "—"
        print(f"| {t} | {block.iloc[0] * 1e6:.0f} | {aic_us(1)} | {aic_us(2)} | {aic_us(2, 'power_law_1.2')} |")


def breakdown(point: SweepConfig) -> None:
    cm = build_cost_model(point)
    dec = lambda n, c: ([1] * n, [c] * n, [False] * n)  # noqa: E731
    q, c, p = dec(120, 1500)
    cases = [("100 decodes × ctx 1500 per rank", [dec(100, 1500), dec(100, 1500)]),
             ("128 decodes × ctx 1500 per rank", [dec(128, 1500), dec(128, 1500)]),
             ("chunk 1928 + 120 decodes (rank 0), 120 decodes (rank 1)", [([1928] + q, [0] + c, [True] + p), dec(120, 1500)]),
             ("8 decodes on rank 0, rank 1 idle (dummy batch)", [dec(8, 1000), ([], [], [])])]
    print("| step | ms | slowest rank's dense part, ms | MoE tokens per rank | MoE blocks, ms | dispatch + combine, ms |")
    print("|---|---|---|---|---|---|")
    for name, batches in cases:
        dense = max(cm.base.predict_step_s(*(b if b[0] else ([1], [0], [False]))) for b in batches)
        tokens = dp_moe_tokens([sum(b[0]) or 1 for b in batches], cm.cuda_graph_max_tokens)
        moe = cm.model.num_layers * cm.block.layer_s(tokens)
        total = cm.dp_step_s(batches)
        print(f"| {name} | {total * 1e3:.1f} | {dense * 1e3:.1f} | {tokens} | {moe * 1e3:.1f} | {(total - dense - moe) * 1e3:.1f} |")


def simulate(point: SweepConfig, run, variant: str) -> dict:
    cm = build_cost_model(point)
    if variant == "block":  # LLMServingSim's EP 1 whole block mapped to EP 2 instead of AIC's EP 2 table
        b = cm.block
        lss = load_tables(str(MEASURED_DIR / "rtx-pro-6000" / "llmservingsim-qwen3-30b-a3b-instruct-2507-tp1"))
        cm.block = MoEBlockCost(b.model, b.device, b.layout, b.skew, None, b.gemm_s, b.dtype_bytes, b.flops_efficiency,
                                b.bandwidth_efficiency, b.kernel_latency_s, "", lss.tables["moe_block"], lss.label)
    elif variant == "roofline":
        b = cm.block
        cm.block = MoEBlockCost(b.model, b.device, b.layout, b.skew, None, b.gemm_s, b.dtype_bytes, b.flops_efficiency,
                                b.bandwidth_efficiency, b.kernel_latency_s)
    elif variant == "no-dp-sync":  # what the lockstep / padding / dispatch are worth
        cm.dispatch_s = None
        cm.cuda_graph_max_tokens = 0  # never padded: Σ tokens
    summary = simulate_point(point, build_pricer(point, cm)).summary
    return {k: summary[k] for k in METRICS} | {"label": cm.block.experts_source}


def main() -> None:
    if not BUNDLE.is_dir():
        sys.exit(f"{BUNDLE} is absent: this benchmark needs ../shared/validation")
    tables()
    run = rr.read_recorded_run(BUNDLE)
    trace = Path("/tmp/bench_moe_trace.csv")
    config = rr.bundle_config(run, trace)
    rr.write_trace(run, trace)
    point = SweepConfig.model_validate(config)
    print()
    breakdown(point)
    measured = rr.measured_summary(run)
    print()
    print("| variant | " + " | ".join(METRICS) + " |")
    print("|---|" + "---|" * len(METRICS))
    print("| measured | " + " | ".join(f"{measured[k]:.4g}" for k in METRICS) + " |")
    skewed = SweepConfig.model_validate({**config, "engine": {**config["engine"], "expert_routing_skew": 1.2}})
    for name, p, variant in (("auto (AIC EP 2 experts)", point, "auto"), ("LLMServingSim EP 1 block mapped", point, "block"),
                             ("experts on the roofline", point, "roofline"), ("AIC power-law 1.2 routing", skewed, "auto"),
                             ("no DP padding, no dispatch", point, "no-dp-sync")):
        s = simulate(p, run, variant)
        print(f"| {name} | " + " | ".join(f"{s[k]:.4g} ({100 * (s[k] / measured[k] - 1):+.1f} %)" for k in METRICS) + " |")


if __name__ == "__main__":
    main()
