"""The measured cost model: held-out error of every imported table, Vidur vs AIConfigurator on the
cards both cover, pricing speed, and a sanity check against a recorded vLLM run.

Run from the repo root, with ../shared beside the checkout (results go in BENCHMARKS.md with
this command):
    .venv/bin/python benchmarks/bench_measured.py

1. Held-out per-op error: every interior grid point of every imported table left out and
   predicted from its two neighbours along each axis (`profiler.measured.heldout`), MAPE per op
   family and axis (the cost model interpolates between neighbours twice as close).
2. Cross-source: the same GEMM and all-reduce shapes priced from Vidur's and AIConfigurator's
   tables (A100, H100), and from LLMServingSim's and AIConfigurator's (RTX PRO 6000).
3. Speed: µs per `predict_step_s` of the shipped `auto` models over a mix of decode-only and
   mixed steps (after the per-count caches warm), and the model's build time.
4. Sanity: Qwen3-32B TP2 on 2× RTX PRO 6000 (the LLMServingSim vLLM 0.19 run in
   ../shared/validation/llmservingsim/RTXPRO6000_Qwen3-32B_tp2): decode steps at the run's
   batch and mean context against its per-request TPOT.
"""
from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd

from profiler import RooflineCostModel
from profiler.device_spec import get_device_spec
from profiler.importers.aiconfigurator import import_aiconfigurator
from profiler.importers.llmservingsim import import_llmservingsim
from profiler.importers.vidur import import_vidur
from profiler.measured.cost_model import MeasuredCostModel
from profiler.measured.grid import LogGrid
from profiler.measured.heldout import heldout_errors, mape
from profiler.measured.shipped import build_measured
from profiler.model_spec import get_model_spec

SHARED = Path(__file__).resolve().parents[2] / "shared"
PROFILES = SHARED / "profiles"
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "rtx_pro_6000_server", "l40s", "a100_sxm")
LSS = {("RTX4090", "meta-llama/Llama-3.1-8B"): ("llama-3.1-8b", (1,)),
       ("RTXPRO6000", "meta-llama/Llama-3.1-8B"): ("llama-3.1-8b", (1, 2)),
       ("RTXPRO6000", "Qwen/Qwen3-32B"): ("qwen3-32b", (1, 2))}


def _summary(errors: dict[int, np.ndarray], names: list[str]) -> str:
    return ", ".join(f"{name} {mape(errors[i]):.1f} % (n={errors[i].size})" for i, name in enumerate(names)
                     if errors[i].size)


def heldout_section() -> None:
    print("## 1. Held-out error (leave-one-out along each axis, MAPE)\n")
    print("| source | table | axes: MAPE (points) | all |\n|---|---|---|---|")
    for system in SYSTEMS:
        tables = import_aiconfigurator(PROFILES / "aiconfigurator" / system)
        label = f"AIC {system} {tables.meta['engine_version']}"
        gemm = LogGrid.from_frame(tables.tables["gemm"], ["m", "n", "k"])
        _row(label, "gemm", heldout_errors(gemm), ["m", "n", "k"])
        for name, key in (("context_attention", "query_tokens"), ("decode_attention", "kv_tokens")):
            t = tables.tables[name]
            errs = {0: [], 1: []}
            for _, rows in t.groupby(["num_heads", "num_kv_heads", "head_dim"]):
                if rows["batch_size"].nunique() < 2 or rows[key].nunique() < 2:
                    continue
                for axis, e in heldout_errors(LogGrid.from_frame(rows, ["batch_size", key])).items():
                    errs[axis].append(e)
            _row(label, name, {a: np.concatenate(v) if v else np.array([]) for a, v in errs.items()},
                 ["batch", key])
        ar = tables.tables["all_reduce"]
        errs = [heldout_errors(LogGrid.from_frame(rows, ["size_bytes"]))[0] for _, rows in ar.groupby(["num_gpus", "mode"])]
        _row(label, "all_reduce", {0: np.concatenate(errs)}, ["size"])
    for gpu, folder, model, tp in (("a100", "Llama-2-70b-hf", "llama-2-70b", 2), ("a100", "Meta-Llama-3-8B", "llama-3-8b", 1),
                                   ("h100", "Llama-2-7b-hf", "llama-2-7b", 1)):
        tables = import_vidur(PROFILES / "vidur" / "compute" / gpu / "meta-llama" / folder / "mlp.csv", get_model_spec(model), tp,
                              all_reduce_csv=PROFILES / "vidur" / "network" / f"{gpu}_pairwise_nvlink" / "all_reduce.csv")
        label = f"Vidur {gpu} {model} tp{tp}"
        for op, rows in tables.tables["layer_ops"].groupby("op"):
            _row(label, op, heldout_errors(LogGrid.from_frame(rows, ["num_tokens"])), ["num_tokens"])
        rows = tables.tables["all_reduce"]
        _row(label, "all_reduce (2 GPUs)", heldout_errors(LogGrid.from_frame(rows[rows["num_gpus"] == 2], ["size_bytes"])), ["size"])
    for (hw, model_dir), (model, tps) in LSS.items():
        for tp in tps:
            tables = import_llmservingsim(PROFILES / "llmservingsim" / hw / model_dir / "bf16", get_model_spec(model), tp)
            label = f"LSS {hw} {model} tp{tp}"
            for table, key in (("layer_ops", "num_tokens"), ("sequence_ops", "num_seqs")):
                for op, rows in tables.tables[table].groupby("op"):
                    _row(label, op, heldout_errors(LogGrid.from_frame(rows, [key])), [key])
            cm = MeasuredCostModel([tables], get_model_spec(model), get_device_spec(tables.meta["device"]["key"]), tp)
            for part, grid, names in zip(("attention prefill", "attention decode", "attention mixed"), cm._mixed,
                                         (["chunk", "ctx"], ["decodes", "ctx"], ["chunk", "ctx", "decodes", "dctx"])):
                _row(label, part, heldout_errors(grid), names)
    print()


def _row(label: str, table: str, errors: dict[int, np.ndarray], names: list[str]) -> None:
    everything = np.concatenate([e for e in errors.values() if e.size]) if any(e.size for e in errors.values()) else np.array([])
    print(f"| {label} | {table} | {_summary(errors, names)} | {mape(everything):.1f} % |")


def cross_source_section() -> None:
    print("## 2. Cross-source disagreement (median of other / AIConfigurator − 1 over tokens 1–4096)\n")
    print("| card | model, tp | qkv_proj | o_proj | gate_up_proj | down_proj | all-reduce (graph) |\n|---|---|---|---|---|---|---|")
    tokens = [1, 8, 32, 128, 512, 1024, 2048, 4096]
    cases = [("a100", "a100_sxm", "a100-80gb", "Llama-2-7b-hf", "llama-2-7b", 1),
             ("a100", "a100_sxm", "a100-80gb", "Meta-Llama-3-8B", "llama-3-8b", 1),
             ("a100", "a100_sxm", "a100-80gb", "Llama-2-70b-hf", "llama-2-70b", 2),
             ("a100", "a100_sxm", "a100-80gb", "Llama-2-70b-hf", "llama-2-70b", 4),
             ("h100", "h100_sxm", "h100-sxm", "Llama-2-7b-hf", "llama-2-7b", 1),
             ("h100", "h100_sxm", "h100-sxm", "Llama-2-70b-hf", "llama-2-70b", 2)]
    for gpu, system, device, folder, model_name, tp in cases:
        model = get_model_spec(model_name)
        aic = import_aiconfigurator(PROFILES / "aiconfigurator" / system)
        vidur = import_vidur(PROFILES / "vidur" / "compute" / gpu / "meta-llama" / folder / "mlp.csv", model, tp,
                             all_reduce_csv=PROFILES / "vidur" / "network" / f"{gpu}_pairwise_nvlink" / "all_reduce.csv")
        dev = get_device_spec(device)
        a = MeasuredCostModel([aic], model, dev, tp)
        v = MeasuredCostModel([vidur, aic], model, dev, tp)  # Vidur's GEMMs and all-reduce, AIC's for the rest
        cells = []
        for op in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
            cells.append(statistics.median(v._gemm[op](t)[0] / a._gemm[op](t)[0] - 1 for t in tokens))
        if tp > 1:
            sizes = [t * model.hidden_size * 2.0 for t in tokens]
            vidur_ar = MeasuredCostModel([vidur], model, dev, tp)._all_reduce["graph"]
            cells.append(statistics.median(vidur_ar(b)[0] / a._all_reduce["graph"](b)[0] - 1 for b in sizes))
        print(f"| {device} | {model_name} tp{tp} | " + " | ".join(f"{100 * c:+.0f} %" for c in cells)
              + (" | — |" if tp == 1 else " |"))
    model = get_model_spec("qwen3-32b")
    for tp in (1, 2):
        lss = import_llmservingsim(PROFILES / "llmservingsim" / "RTXPRO6000" / "Qwen/Qwen3-32B" / "bf16", model, tp)
        aic = import_aiconfigurator(PROFILES / "aiconfigurator" / "rtx_pro_6000_server")
        dev = get_device_spec("rtx-pro-6000")
        a, lcm = MeasuredCostModel([aic], model, dev, tp), MeasuredCostModel([lss, aic], model, dev, tp)
        cells = [statistics.median(lcm._gemm[op](t)[0] / a._gemm[op](t)[0] - 1 for t in tokens)
                 for op in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")]
        print(f"| rtx-pro-6000 (LLMServingSim) | qwen3-32b tp{tp} | " + " | ".join(f"{100 * c:+.0f} %" for c in cells) + " | — |")
    print("\nA decode step of Llama-2-70B TP2 on A100 (32 sequences at context 1000), ms:\n")
    print("| cost model | step | GEMMs | attention | all-reduce | element-wise |\n|---|---|---|---|---|---|")
    model, dev = get_model_spec("llama-2-70b"), get_device_spec("a100-80gb")
    aic = import_aiconfigurator(PROFILES / "aiconfigurator" / "a100_sxm")
    vidur = import_vidur(PROFILES / "vidur" / "compute" / "a100" / "meta-llama" / "Llama-2-70b-hf" / "mlp.csv", model, 2,
                         all_reduce_csv=PROFILES / "vidur" / "network" / "a100_pairwise_nvlink" / "all_reduce.csv")
    step = ([1] * 32, [1000] * 32, [False] * 32)
    for label, cm in (("AIConfigurator (shipped default)", MeasuredCostModel([aic], model, dev, 2)),
                      ("Vidur layer ops + all-reduce, AIConfigurator attention", MeasuredCostModel([vidur, aic], model, dev, 2))):
        b = cm.breakdown(*step)
        print(f"| {label} | {1e3 * sum(b.values()):.1f} | {1e3 * b['gemm_s']:.1f} | {1e3 * b['attention_s']:.1f} | "
              f"{1e3 * b['all_reduce_s']:.1f} | {1e3 * b['elementwise_s']:.1f} |")
    # Attention: LLMServingSim's measured chunk-with-context vs AIConfigurator's fresh-prefill mapping.
    model = get_model_spec("qwen3-32b")
    lss = import_llmservingsim(PROFILES / "llmservingsim" / "RTXPRO6000" / "Qwen/Qwen3-32B" / "bf16", model, 2)
    aic = import_aiconfigurator(PROFILES / "aiconfigurator" / "rtx_pro_6000_server")
    dev = get_device_spec("rtx-pro-6000")
    a, lcm = MeasuredCostModel([aic], model, dev, 2), MeasuredCostModel([lss, aic], model, dev, 2)
    print("\nAttention per layer, Qwen3-32B tp2 on RTX PRO 6000, AIConfigurator mapping / LLMServingSim measured − 1:\n")
    print("| step | LLMServingSim µs | AIConfigurator µs | difference |\n|---|---|---|---|")
    for label, prefills, rows, ctx in (("decode 64 × ctx 1024", [], 64, 1024.0), ("decode 128 × ctx 2048", [], 128, 2048.0),
                                       ("chunk 512 after 0", [(512.0, 0.0)], 0, 0.0),
                                       ("chunk 512 after 4096", [(512.0, 4096.0)], 0, 0.0),
                                       ("chunk 256 after 1024 + 64 decodes × 1024", [(256.0, 1024.0)], 64, 1024.0)):
        x, y = lcm._attention_layer_s(prefills, rows, ctx, set()), a._attention_layer_s(prefills, rows, ctx, set())
        print(f"| {label} | {1e6 * x:.1f} | {1e6 * y:.1f} | {100 * (y / x - 1):+.0f} % |")
    print()


def _us_per_step(cost_model, steps: list) -> float:
    """Median of 5 runs of 20,000 `predict_step_s` calls cycling over `steps`, µs per call,
    after one pass that warms the per-count caches (as a simulation's first steps do)."""
    for s in steps:
        cost_model.predict_step_s(*s)
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for i in range(20_000):
            cost_model.predict_step_s(*steps[i % len(steps)])
        runs.append((time.perf_counter() - start) / 20_000 * 1e6)
    return statistics.median(runs)


def speed_section() -> None:
    print("## 3. Pricing speed (µs per predict_step_s, median of 5 runs of 20,000 steps)\n")
    print("| model | build ms | decode-only steps µs | mixed steps µs |\n|---|---|---|---|")
    rng = np.random.default_rng(0)
    decode = [([1] * int(b), rng.integers(10, 4000, int(b)).tolist(), [False] * int(b)) for b in rng.integers(1, 129, 500)]
    mixed = [([int(q)] + [1] * int(b), [int(c)] + rng.integers(10, 4000, int(b)).tolist(), [True] + [False] * int(b))
             for q, c, b in zip(rng.integers(16, 2048, 500), rng.integers(0, 4000, 500), rng.integers(1, 128, 500))]
    for device, model_name, tp in (("h100-sxm", "llama-3-8b", 1), ("a100-80gb", "llama-2-70b", 4),
                                   ("rtx-pro-6000", "qwen3-32b", 2), ("rtx-4090", "llama-3.1-8b", 1)):
        start = time.perf_counter()
        cm = build_measured("auto", get_model_spec(model_name), get_device_spec(device), tp)
        build_ms = 1e3 * (time.perf_counter() - start)
        cells = [_us_per_step(cm, steps) for steps in (decode, mixed)]
        print(f"| {model_name} tp{tp} on {device} | {build_ms:.0f} | {cells[0]:.1f} | {cells[1]:.1f} |")
    roofline = RooflineCostModel(get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"))
    print(f"| (the roofline, llama-3-8b on h100-sxm, same decode steps) | — | {_us_per_step(roofline, decode):.1f} | — |")
    print(f"\n(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs while timing)\n")


def sanity_section() -> None:
    run = SHARED / "validation" / "llmservingsim" / "RTXPRO6000_Qwen3-32B_tp2" / "vllm"
    r = pd.read_json(run / "requests.jsonl", lines=True)
    ts = pd.read_csv(run / "timeseries.csv")
    tpot = (r["last_token_ts"] - r["first_token_ts"]) / (r["output_toks"] - 1)
    busy = ts[ts["running"] >= 120]
    print("## 4. Sanity: Qwen3-32B TP2 on 2× RTX PRO 6000 (vLLM 0.19 run, 300 requests)\n")
    print(f"run: TPOT P50 {1e3 * tpot.median():.1f} ms; {len(busy)} s with ≥ 120 running: generation "
          f"{busy['gen_throughput'].mean():.0f} tok/s at {busy['running'].mean():.0f} running "
          f"→ {1e3 * busy['running'].mean() / busy['gen_throughput'].mean():.1f} ms per decode step, prefill chunks included; "
          f"mean prompt {r['input_toks'].mean():.0f}, output {r['output_toks'].mean():.0f} tokens\n")
    cm = build_measured("auto", get_model_spec("qwen3-32b"), get_device_spec("rtx-pro-6000"), 2,
                        cuda_graph_max_tokens=256)
    print("| step | ms | gemm | attention | all-reduce | element-wise | LM head + sampler | overhead |\n|---|---|---|---|---|---|---|---|")
    mean_ctx = int(r["input_toks"].mean() + r["output_toks"].mean() / 2)
    for label, q, c, p in (("64 decodes × ctx 1000", [1] * 64, [1000] * 64, [False] * 64),
                           (f"128 decodes × ctx {mean_ctx}", [1] * 128, [mean_ctx] * 128, [False] * 128),
                           (f"chunk 1920 + 128 decodes × ctx {mean_ctx}", [1920] + [1] * 128, [0] + [mean_ctx] * 128,
                            [True] + [False] * 128)):
        b = cm.breakdown(q, c, p)
        print(f"| {label} | {1e3 * sum(b.values()):.1f} | {1e3 * b['gemm_s']:.1f} | {1e3 * b['attention_s']:.1f} | "
              f"{1e3 * b['all_reduce_s']:.1f} | {1e3 * b['elementwise_s']:.2f} | {1e3 * (b['lm_head_s'] + b['sampler_s']):.2f} | "
              f"{1e3 * b['overhead_s']:.1f} |")
    print()


if __name__ == "__main__":
    heldout_section()
    cross_source_section()
    speed_section()
    sanity_section()
