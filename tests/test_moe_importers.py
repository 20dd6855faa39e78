"""MoE kernel tables on import: AIConfigurator's moe_perf (milliseconds → seconds, bf16 fused-MoE
rows only, L2-resident rows dropped by the datasheet bound worked by hand) and LLMServingSim's
moe.csv (microseconds → seconds); real rows from ../shared/profiles (skipped when absent)."""
from __future__ import annotations

import shutil

import pandas as pd
import pytest

from profiler.importers.aiconfigurator import import_aiconfigurator
from profiler.importers.aiconfigurator_moe import convert_moe, moe_faster_than_datasheet
from profiler.importers.llmservingsim import import_llmservingsim
from profiler.measured.tables import MeasuredTableError, MeasuredTables
from profiler.model_spec import get_model_spec
from tests.conftest import shared_path

QWEN_MOE = ("profiles", "llmservingsim", "RTXPRO6000", "Qwen", "Qwen3-30B-A3B-Instruct-2507", "bf16")


def _row(**overrides):
    row = {"kernel_source": "vllm_fused_moe", "moe_dtype": "bfloat16", "num_tokens": 16, "hidden_size": 2048,
           "inter_size": 768, "topk": 8, "num_experts": 128, "moe_tp_size": 1, "moe_ep_size": 2,
           "distribution": "balanced", "latency": 0.422395}
    return {**row, **overrides}


def test_convert_keeps_bf16_fused_moe_rows_in_seconds():
    raw = pd.DataFrame([_row(), _row(moe_dtype="fp8"), _row(kernel_source="vllm_marlin_int4_moe"),
                        _row(num_tokens=32, latency=0.425456)])
    out = convert_moe(raw)
    assert out["num_tokens"].tolist() == [16, 32]
    assert out["time_s"].tolist() == pytest.approx([0.422395e-3, 0.425456e-3])
    assert out["distribution"].tolist() == ["balanced", "balanced"]


def test_rows_faster_than_their_active_experts_weights_are_flagged():
    # one token, top-8, EP 1: 8 experts × 3 × 2048 × 768 bf16 weights = 75,497,472 bytes; at
    # 1.792 TB/s that is 42.1 µs: AIConfigurator's 31.2 µs row had them in L2.
    rows = convert_moe(pd.DataFrame([_row(num_tokens=1, moe_ep_size=1, latency=0.031221),
                                     _row(num_tokens=1, moe_ep_size=1, latency=0.0422),
                                     _row(num_tokens=1, moe_ep_size=2, latency=0.027253)]))  # 4 experts: 21.1 µs
    flagged = moe_faster_than_datasheet(rows, peak_flops=467.8e12, mem_bw=1.792e12)
    assert 8 * 3 * 2048 * 768 * 2 / 1.792e12 == pytest.approx(42.13e-6, rel=1e-3)
    assert flagged.tolist() == [True, False, False]


def test_real_moe_perf_imports_with_the_l2_rows_dropped():
    tables = import_aiconfigurator(shared_path("profiles", "aiconfigurator", "rtx_pro_6000_server"))
    moe = tables.tables["moe"]
    assert tables.meta["dropped_faster_than_datasheet"]["moe_perf.parquet"] == 1186
    ep2 = moe[(moe.hidden_size == 2048) & (moe.inter_size == 768) & (moe.num_experts == 128) & (moe.topk == 8)
              & (moe.moe_tp_size == 1) & (moe.moe_ep_size == 2) & (moe.distribution == "balanced")]
    assert float(ep2[ep2.num_tokens == 16].time_s.iloc[0]) == pytest.approx(0.422395e-3)


def test_llmservingsim_moe_csv_is_the_whole_block_table(tmp_path):
    tables = import_llmservingsim(shared_path(*QWEN_MOE), get_model_spec("qwen3-30b-a3b-instruct-2507"), 1)
    block = tables.tables["moe_block"]
    # tp1/moe.csv: "16,128,817.612" and "1,8,50.2297" (µs)
    assert float(block[(block.num_tokens == 16) & (block.active_experts == 128)].time_s.iloc[0]) == pytest.approx(817.612e-6)
    assert float(block[(block.num_tokens == 1) & (block.active_experts == 8)].time_s.iloc[0]) == pytest.approx(50.2297e-6)
    saved = MeasuredTables.load(tables.save(tmp_path / "out"))
    assert saved.model.moe == get_model_spec("qwen3-30b-a3b").moe  # the MoE shape survives the sidecar


def test_llmservingsim_moe_csv_on_a_dense_model_is_refused(tmp_path):
    source = shared_path(*QWEN_MOE)
    target = tmp_path / "RTXPRO6000" / "Qwen" / "Qwen3-30B-A3B-Instruct-2507" / "bf16"
    shutil.copytree(source, target)
    dense = get_model_spec("qwen3-30b-a3b-instruct-2507").__class__(
        **{**get_model_spec("qwen3-30b-a3b-instruct-2507").__dict__, "name": "dense-twin", "moe": None})
    with pytest.raises(MeasuredTableError, match=r"tp1/moe.csv: a mixture-of-experts table, but model 'dense-twin' is dense"):
        import_llmservingsim(target, dense, 1)
