"""Derive the shipped measured tables (`profiler/data/measured/`) from the public kernel databases
in ../shared/profiles/ (never committed: only these compact derived tables are).

    .venv/bin/python -m profiler.measured.build_shipped [--profiles ../shared/profiles] [--out profiler/data/measured]

What is kept, to stay small: AIConfigurator's bf16, fp8 and fp8_block GEMMs with n, k ≤ 65536;
attention (bf16 and fp8 KV cache) at head_dim 128 and 64 with KV heads per rank ≤ 8 or equal to the query heads (GQA and
MHA Llama/Qwen/Mistral shapes); every all-reduce row; the bf16 fused-MoE rows at the expert shapes
of the built-in MoE models (Mixtral-8x7B, Qwen3-30B-A3B); LLMServingSim's dense and per-sequence ops
whole and its attention table on the power-of-two grid the cost model reads. The output is the
same bytes on every run (sorted rows, 5 significant digits, gzip without a timestamp).
"""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import numpy as np

from profiler.importers.aiconfigurator import SYSTEMS, import_aiconfigurator
from profiler.importers.llmservingsim import HARDWARE, import_llmservingsim
from profiler.measured.shipped import MEASURED_DIR
from profiler.measured.tables import MeasuredTables
from profiler.model_spec import BUILTIN_MODELS, get_model_spec

# LLMServingSim profile folder → (built-in model, TP degrees shipped).
LLMSERVINGSIM_MODELS = {"meta-llama/Llama-3.1-8B": ("llama-3.1-8b", (1, 2)), "Qwen/Qwen3-32B": ("qwen3-32b", (1, 2)),
                        "Qwen/Qwen3-30B-A3B-Instruct-2507": ("qwen3-30b-a3b-instruct-2507", (1, 2))}
# MoE tables shipped: the expert shapes of the built-in MoE models (hidden, width, top-k, experts).
MOE_SHAPES = {(m.hidden_size, m.moe.expert_intermediate_size, m.moe.num_experts_per_tok, m.moe.num_experts)
              for m in BUILTIN_MODELS.values() if m.moe is not None}


def compact_aiconfigurator(tables: MeasuredTables) -> MeasuredTables:
    """The rows the shipped defaults keep (module docstring)."""
    out = dict(tables.tables)
    for name in ("context_attention", "decode_attention", "context_attention_fp8_kv", "decode_attention_fp8_kv"):
        if name not in out:
            continue
        t = out[name]
        keep = t["head_dim"].isin((64, 128)) & ((t["num_kv_heads"] <= 8) | (t["num_kv_heads"] == t["num_heads"]))
        out[name] = t[keep].reset_index(drop=True)
    for name in ("moe", "moe_fp8", "moe_fp8_block"):
        if name in out:
            t = out[name]
            shape = list(zip(t["hidden_size"], t["inter_size"], t["topk"], t["num_experts"]))
            out[name] = t[[s in MOE_SHAPES for s in shape]].reset_index(drop=True)
    return MeasuredTables(tables.meta, out)


def compact_llmservingsim(tables: MeasuredTables) -> MeasuredTables:
    """LLMServingSim tables with the attention rows on the cost model's power-of-two grid."""
    out = dict(tables.tables)
    t = out["mixed_attention"]

    def pow2(values, base):
        v = values.to_numpy()
        return (v == 0) | ((v >= base) & (np.log2(np.maximum(v, 1) / base) % 1 == 0))
    keep = (pow2(t["prefill_tokens"], 16) & pow2(t["prefill_context_tokens"], 16) & pow2(t["num_decodes"], 1)
            & pow2(t["decode_context_tokens"], 16))
    out["mixed_attention"] = t[keep].reset_index(drop=True)
    return MeasuredTables(tables.meta, out)


def build(profiles: Path, out: Path) -> list[Path]:
    """Write every shipped directory under `out` (replacing what is there); returns them."""
    written = []
    for system, device in SYSTEMS.items():
        folder = profiles / "aiconfigurator" / system
        if folder.is_dir():
            tables = compact_aiconfigurator(import_aiconfigurator(folder))
            written.append(_replace(tables, out / device / "aiconfigurator"))
    for hardware, device in HARDWARE.items():
        for profile, (model_name, tps) in LLMSERVINGSIM_MODELS.items():
            folder = profiles / "llmservingsim" / hardware / profile / "bf16"
            for tp in tps:
                if (folder / f"tp{tp}").is_dir():
                    tables = compact_llmservingsim(import_llmservingsim(folder, get_model_spec(model_name), tp))
                    written.append(_replace(tables, out / device / f"llmservingsim-{model_name}-tp{tp}"))
    return written


def _replace(tables: MeasuredTables, directory: Path) -> Path:
    if directory.exists():
        shutil.rmtree(directory)
    return tables.save(directory, compress=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", type=Path, default=Path(__file__).resolve().parents[2] / ".." / "shared" / "profiles")
    parser.add_argument("--out", type=Path, default=MEASURED_DIR)
    args = parser.parse_args()
    for d in build(args.profiles.resolve(), args.out):
        size = sum(f.stat().st_size for f in d.iterdir())
        print(f"{d}: {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
