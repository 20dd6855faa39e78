"""MeasuredCostModel and LogGrid on small synthetic tables whose times are power laws, so the right
answers are worked by hand: log-space interpolation is exact on a power law, and each part of a
step (GEMMs, attention, all-reduce, element-wise, LM head, sampler, overhead) is a known sum.
Then the shipped defaults: which tables `auto` picks per device and model, and refusals."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from profiler.device_spec import DeviceSpec, get_device_spec
from profiler.measured.cost_model import MeasuredCostModel
from profiler.measured.grid import LogGrid
from profiler.measured.shipped import build_measured, measured_dirs, shipped_devices
from profiler.measured.tables import MeasuredTableError, MeasuredTables
from profiler.model_spec import ModelSpec, get_model_spec

C_GEMM = 1e-12  # s per m·n·k
TOY = ModelSpec("toy", 2, 256, 4, 2, 64, 512, 1024, 4096)
DEVICE = DeviceSpec("toy-gpu", 1e14, 1e12, 80, 1e11, 1e-5, kernel_latency_s=3e-6, step_overhead_s=1e-4,
                    memory_bandwidth_efficiency=0.8)
META = {"source": {"name": "synthetic"}, "licence": "none", "engine": "vllm", "engine_version": "0",
        "device": {"name": "Toy GPU", "key": "toy-gpu"}, "units": {}}


def _product(**axes) -> pd.DataFrame:
    grids = np.meshgrid(*axes.values(), indexing="ij")
    return pd.DataFrame({k: g.ravel() for k, g in zip(axes, grids)})


def synthetic_tables() -> MeasuredTables:
    gemm = _product(m=[1, 8, 64, 512], n=[128, 256, 512, 1024, 2048], k=[64, 128, 256, 512, 1024])
    gemm["time_s"] = C_GEMM * gemm["m"] * gemm["n"] * gemm["k"]
    ctx = _product(batch_size=[1, 2, 4], query_tokens=[16, 64, 256, 1024])
    ctx["time_s"] = 1e-6 * ctx["batch_size"] * ctx["query_tokens"]
    dec = _product(batch_size=[1, 2, 4, 8], kv_tokens=[16, 64, 256, 1024])
    dec["time_s"] = 1e-7 * dec["batch_size"] * dec["kv_tokens"]
    for t in (ctx, dec):
        t["num_heads"], t["num_kv_heads"], t["head_dim"] = 4, 2, 64
    ar = _product(num_gpus=[2], size_bytes=[1024, 4096, 16384, 65536])
    ar["mode"], ar["time_s"] = "graph", 1e-9 * ar["size_bytes"]
    return MeasuredTables(dict(META), {"gemm": gemm, "context_attention": ctx, "decode_attention": dec,
                                       "all_reduce": ar})


def elementwise_s(num_bytes: float) -> float:
    return num_bytes / (1e12 * 0.8) + 3e-6  # bandwidth × efficiency (no small-m GEMMs to fit it) + kernel latency


# -- LogGrid ------------------------------------------------------------------------------------

def test_log_grid_is_exact_on_a_power_law_and_flags_edges():
    frame = _product(m=[1, 4, 16], k=[10, 100])
    frame["time_s"] = 1e-6 * frame["m"] * frame["k"] ** 0.5
    grid = LogGrid.from_frame(frame, ["m", "k"])
    t, out = grid(2, 31.6227766)
    assert t == pytest.approx(1e-6 * 2 * 31.6227766 ** 0.5) and not out
    t, out = grid(64, 10)  # above m's range: clamped to 16 and flagged
    assert t == pytest.approx(1e-6 * 16 * 10 ** 0.5) and out
    assert grid(0.5, 10) == (pytest.approx(1e-6 * 10 ** 0.5), False)  # below: flat, not flagged


def test_log_grid_fills_missing_cells_in_proportion_and_flags_them():
    frame = _product(b=[1, 2, 4], s=[10, 100]).iloc[:-1]  # (4, 100) never measured
    frame["time_s"] = 1e-6 * frame["b"] * frame["s"]
    grid = LogGrid.from_frame(frame, ["b", "s"])
    t, out = grid(4, 100)
    assert t == pytest.approx(4e-4) and out  # filled from (2, 100) × 4 / 2
    assert grid(1, 100) == (pytest.approx(1e-4), False)


# -- a step priced part by part -----------------------------------------------------------------

def test_decode_step_is_the_sum_of_its_parts():
    model = MeasuredCostModel([synthetic_tables()], TOY, DEVICE)
    # 4 decodes at context 63 (kv 64 with the new token). Per layer, GEMMs at m = 4:
    # qkv 256 → 512, o 256 → 256, gate_up 256 → 1024, down 512 → 256.
    gemm = C_GEMM * 4 * (256 * 512 + 256 * 256 + 256 * 1024 + 512 * 256)
    attention = 1e-7 * 4 * 64
    lm_head = C_GEMM * 4 * 1024 * 256
    # Element-wise roofline: per layer 2 norms (8 B × 256), rotary (4 B × 6 heads × 64), SiLU·mul (6 B × 512);
    # per step the embedding (4 B × 256) and the final norm; the sampler reads 3 × 1024 fp32 logits per sequence.
    per_layer_ew = 2 * elementwise_s(4 * 8 * 256) + elementwise_s(4 * 4 * 384) + elementwise_s(4 * 6 * 512)
    per_step_ew = elementwise_s(4 * 4 * 256) + elementwise_s(4 * 8 * 256)
    sampler = elementwise_s(3 * 4 * 1024 * 4)
    expected = 2 * (gemm + attention + per_layer_ew) + per_step_ew + lm_head + sampler + 1e-4
    assert model.predict_step_s([1] * 4, [63] * 4, [False] * 4) == pytest.approx(expected, rel=1e-9)
    assert model.out_of_grid_steps == 0 and model.num_predictions == 1
    parts = model.breakdown([1] * 4, [63] * 4, [False] * 4)
    assert parts["gemm_s"] == pytest.approx(2 * gemm) and parts["attention_s"] == pytest.approx(2 * attention)


def test_prefill_chunk_priced_as_a_fresh_prefill_with_equal_pairs():
    model = MeasuredCostModel([synthetic_tables()], TOY, DEVICE)
    # q = 16 after c = 24: sqrt(16² + 2·16·24) = 32 tokens of fresh prefill: 1e-6 × 32 per layer.
    parts = model.breakdown([16], [24], [True])
    assert parts["attention_s"] == pytest.approx(2 * 32e-6)


def test_all_reduce_two_per_layer_at_tp2():
    model = MeasuredCostModel([synthetic_tables()], TOY, DEVICE, tensor_parallel_size=2)
    # 8 tokens × 256 hidden × 2 bytes = 4096 bytes → 4.096 µs each, 2 per layer, 2 layers.
    assert model.breakdown([1] * 8, [100] * 8, [False] * 8)["all_reduce_s"] == pytest.approx(4 * 4.096e-6)
    assert "all_reduce at 2 GPUs" in model.describe()["parts"]["all_reduce"]


def test_out_of_grid_steps_are_roofline_scaled_and_counted():
    model = MeasuredCostModel([synthetic_tables()], TOY, DEVICE)
    inside = model.breakdown([1] * 8, [63] * 8, [False] * 8)["attention_s"]
    outside = model.breakdown([1] * 16, [63] * 16, [False] * 16)["attention_s"]
    assert inside == pytest.approx(2 * 1e-7 * 8 * 64)
    # The batch-8 edge × the roofline's ratio of 16 to 8 decode rows (its kernel latency dilutes 2× here).
    ratio = model._decode_roofline_s(16, 63) / model._decode_roofline_s(8, 63)
    assert 1.0 < ratio < 2.0 and outside == pytest.approx(inside * ratio)
    model.predict_step_s([1] * 16, [63] * 16, [False] * 16)
    model.predict_step_s([1] * 2, [63] * 2, [False] * 2)
    model.predict_step_s([600], [0], [True])  # m 600 > 512: GEMMs past the table
    assert model.out_of_grid_steps == 2
    assert model.out_of_range["attention"] == 1 and model.out_of_range["gemm"] == 1
    assert model.describe()["out_of_grid_steps"] == 2


def test_model_specific_element_wise_ops_are_width_scaled():
    tables = synthetic_tables()
    small = ModelSpec("small", 2, 128, 4, 2, 64, 512, 1024, 4096)  # half TOY's hidden size
    ops = pd.DataFrame({"op": "layernorm", "num_tokens": [1, 16, 256, 4096]})
    ops["time_s"] = 1e-9 * ops["num_tokens"]
    measured = MeasuredTables({**META, "model": small.__dict__, "tensor_parallel_size": 1}, {"layer_ops": ops})
    model = MeasuredCostModel([measured, tables], TOY, DEVICE)
    # TOY's rows are twice as wide: 64 tokens of TOY move the bytes of 128 tokens of `small`.
    curve = model._elementwise["layernorm"][2]
    assert curve(64)[0] == pytest.approx(1e-9 * 128)
    assert "width 2" in model.describe()["parts"]["layernorm"]


def test_refusals():
    tables = synthetic_tables()
    with pytest.raises(MeasuredTableError, match="measured on device 'toy-gpu', cannot price device 'h100-sxm'"):
        MeasuredCostModel([tables], TOY, get_device_spec("h100-sxm"))
    with pytest.raises(MeasuredTableError, match="activations are priced in bf16.*FP8 weights are the model's quantization"):
        MeasuredCostModel([tables], TOY, DEVICE, dtype_bytes=1)
    with pytest.raises(MeasuredTableError, match="at least one"):
        MeasuredCostModel([], TOY, DEVICE)


def test_uncovered_heads_are_listed_as_roofline_parts():
    other = ModelSpec("wide", 2, 512, 8, 8, 64, 512, 1024, 4096)  # 8/8 heads: not in the tables
    model = MeasuredCostModel([synthetic_tables()], other, DEVICE)
    d = model.describe()
    assert {"context_attention", "decode_attention"} <= set(d["roofline_parts"])
    assert model.predict_step_s([1, 1], [10, 10], [False, False]) > 0


# -- shipped defaults ---------------------------------------------------------------------------

def test_every_target_device_has_shipped_tables():
    assert set(shipped_devices()) >= {"h100-sxm", "h200", "b200", "rtx-pro-6000", "rtx-4090", "l40s", "a100-80gb"}


def test_auto_on_h100_uses_aiconfigurator_with_provenance():
    model = build_measured("auto", get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"), 1)
    d = model.describe()
    assert d["name"] == "auto" and d["label"] == ("measured (aiconfigurator vllm 0.19.0) on h100-sxm; roofline for "
                                                  "layernorm, rotary_emb, act_fn, embedding, final_layernorm, sampler")
    assert d["sources"][0]["licence"] == "Apache-2.0" and d["sources"][0]["commit"] == "095f58a"
    assert d["parts"]["qkv_proj"].endswith("gemm (m, 6144, 4096)")
    assert d["roofline_parts"] == ["layernorm", "rotary_emb", "act_fn", "embedding", "final_layernorm", "sampler"]


def test_auto_on_rtx_pro_6000_prefers_the_models_own_profile():
    model = build_measured("auto", get_model_spec("qwen3-32b"), get_device_spec("rtx-pro-6000"), 2)
    parts = model.describe()["parts"]
    assert parts["qkv_proj"].startswith("llmservingsim") and parts["attention"].endswith("mixed_attention")
    assert parts["all_reduce"].startswith("aiconfigurator") and parts["qk_norm"].startswith("llmservingsim")
    # Another model on the same card: per-shape GEMMs, element-wise ops width-scaled from a measured model.
    other = build_measured("auto", get_model_spec("mistral-7b"), get_device_spec("rtx-pro-6000"), 1).describe()
    assert "gemm (m," in other["parts"]["qkv_proj"] and "layer_ops.layernorm" in other["parts"]["layernorm"]


def test_auto_without_tables_or_in_fp8_is_none_and_measured_dir_is_checked(tmp_path):
    assert build_measured("auto", get_model_spec("llama-3-8b"), get_device_spec("a40"), 1) is None
    assert build_measured("auto", get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"), 1, dtype_bytes=1) is None
    with pytest.raises(ValueError, match="is not a measured-table directory"):
        measured_dirs(f"measured:{tmp_path}")
    synthetic_tables().save(tmp_path / "t")
    model = build_measured(f"measured:{tmp_path / 't'}", TOY, DEVICE, 1)
    assert model.describe()["label"].startswith("measured (synthetic vllm 0) on toy-gpu; roofline for layernorm")


def test_decode_step_prices_are_stable_for_a_known_case():
    # llama-3-8b on h100-sxm, 32 decodes at context 1000: GEMMs from the measured table dominate.
    model = build_measured("auto", get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"), 1)
    step_s = model.predict_step_s([1] * 32, [1000] * 32, [False] * 32)
    parts = model.breakdown([1] * 32, [1000] * 32, [False] * 32)
    assert math.isclose(sum(parts.values()), step_s, rel_tol=1e-9)
    # 32 layers × 4 GEMMs at m = 32 stream 13.1 GB of bf16 weights (6.5 G params × 2 B) at ≥ 60 % of 3.35 TB/s.
    assert 3.5e-3 < parts["gemm_s"] < 6.5e-3


def test_heldout_error_is_zero_on_a_power_law_and_exact_on_a_kink():
    from profiler.measured.heldout import heldout_errors, mape

    frame = _product(m=[1, 2, 4, 8], k=[1, 10])
    frame["time_s"] = 1e-6 * frame["m"] ** 1.5
    errors = heldout_errors(LogGrid.from_frame(frame, ["m", "k"]))
    assert mape(errors[0]) == pytest.approx(0.0, abs=1e-9) and errors[1].size == 0
    # A flat-then-linear curve t = max(1, m / 2) µs: leaving out m = 2 predicts sqrt(1 · 2) = 1.414 µs
    # against 1 (41.4 % off); m = 4 predicts sqrt(1 · 4) = 2, exact. Two k columns: each twice.
    frame["time_s"] = 1e-6 * np.maximum(1.0, frame["m"] / 2)
    errors = heldout_errors(LogGrid.from_frame(frame, ["m", "k"]))
    assert sorted(errors[0]) == pytest.approx([0.0, 0.0, math.sqrt(2) - 1, math.sqrt(2) - 1])


def test_heldout_error_within_classes_sees_no_step_between_them():
    from profiler.measured.heldout import heldout_errors, heldout_errors_by_class, mape

    # Aligned m (multiples of 4) on t = m µs, the others on t = m + 8 µs (a copy before the GEMM):
    # across the classes leaving out m = 8 predicts from 5 and 9 (off by the step); within them from
    # 4 and 12: exact (t = m is a power law, log-log interpolation's exact case). The unaligned class
    # (1, 5, 9, 13; t = m + 8) holds out 5 (from 1 and 9) and 9 (from 5 and 13), a little off.
    frame = _product(m=[1, 4, 5, 8, 9, 12, 13], k=[1, 10])
    frame["time_s"] = 1e-6 * (frame["m"] + np.where(frame["m"] % 4 == 0, 0.0, 8.0))
    assert mape(heldout_errors(LogGrid.from_frame(frame, ["m", "k"]))[0]) > 20.0
    within = heldout_errors_by_class(frame, ["m", "k"], frame["m"] % 4 == 0)

    def off(m, lo, hi):  # log-log interpolation of t = m + 8 between lo and hi, relative error at m
        w = math.log(m / lo) / math.log(hi / lo)
        return abs((lo + 8) ** (1 - w) * (hi + 8) ** w / (m + 8) - 1)
    expected = [0.0] * 2 + [off(5, 1, 9)] * 2 + [off(9, 5, 13)] * 2  # each twice: two k columns
    assert sorted(within[0]) == pytest.approx(sorted(expected))


def test_speculative_verify_rows_count_as_decode_rows():
    model = MeasuredCostModel([synthetic_tables()], TOY, DEVICE)
    # A verify of 3 tokens and a decode, both after 63 cached tokens: 2 decode rows reading 65 + 63
    # keys, the attention of 2 plain decodes at mean context 64 (the verify reads its KV once).
    plain = model.breakdown([1, 1], [64, 64], [False, False])["attention_s"]
    assert model.breakdown([3, 1], [63, 63], [False, False])["attention_s"] == pytest.approx(plain)
    # A one-token prefill chunk is a decode row too.
    four = model.breakdown([1] * 4, [63] * 4, [False] * 4)["attention_s"]
    assert model.breakdown([1, 1, 1, 1], [63] * 4, [True, False, False, False])["attention_s"] == pytest.approx(four)


def test_a_point_names_its_cost_model(tmp_path):
    from experiments.config import SweepConfig, load_config
    from experiments.point import run_point

    config = tmp_path / "c.yaml"
    config.write_text("name: c\nmodel: qwen3-32b\ndevice: rtx-pro-6000\ncost_model: auto\n"
                      "trace: {kind: poisson, qps: 2, num_requests: 20, prompt_tokens: [50, 400], output_tokens: [5, 40]}\n"
                      "engine: {scheduler: vllm_v1, chunk_size: 512, max_num_seqs: 64, tensor_parallel_size: 2}\n"
                      "variants:\n  - {cost_model: roofline}\n  - {device: a40, model: llama-3-8b, engine.tensor_parallel_size: 1}\n")
    _, points = load_config(config)
    rows = [run_point(SweepConfig.model_validate(p)).row for p in points]
    assert rows[0]["cost_model_label"] == "roofline"
    assert rows[1]["cost_model_label"] == "roofline (no measured tables for this device and dtype)"
    assert len(rows) == 2
    auto = SweepConfig.model_validate({**points[0], "cost_model": "auto"})
    row = run_point(auto).row
    assert row["cost_model_label"].startswith("measured (llmservingsim vllm 0.19.0; aiconfigurator vllm 0.19.0")
    assert row["cost_model_steps_out_of_range"] == 0 and row["completed"] == 20


@pytest.mark.slow  # rebuilds every shipped table from ../shared (5–11 s)
def test_shipped_tables_are_what_the_build_derives_from_the_public_files(tmp_path):
    from profiler.measured.build_shipped import build
    from profiler.measured.shipped import MEASURED_DIR
    from tests.conftest import shared_path

    written = build(shared_path("profiles"), tmp_path)
    assert len(written) == 13  # 6 AIConfigurator systems + 7 LLMServingSim model/tp profiles (Qwen3-30B-A3B: issue 18)
    for directory in written:
        shipped = MEASURED_DIR / directory.relative_to(tmp_path)
        for file in directory.iterdir():
            assert file.read_bytes() == (shipped / file.name).read_bytes(), f"{shipped / file.name} differs: rebuild it"
    total = sum(f.stat().st_size for f in MEASURED_DIR.rglob("*") if f.is_file())
    # < 2 MiB before the FP8 GEMM and FP8-KV attention tables (issue 32: 3.5 MiB with them).
    assert total < 4 * 2**20


def test_a_verify_reads_its_kv_once_not_once_per_query():
    """A split-N verify of q tokens over c cached ones is priced as one decode row over c + q − 1
    keys (the kernel reads that KV once for all q queries); it was q rows, each reading the whole
    KV: 64 verifies of 5 at context 2000 priced their attention 4.8× a decode batch's."""
    from profiler import get_device_spec, get_model_spec
    from profiler.measured.shipped import build_measured

    model = build_measured("auto", get_model_spec("llama-3-8b"), get_device_spec("h100-sxm"), 1, 2, 2,
                           cuda_graph_max_tokens=256)
    verify = model.breakdown(np.full(64, 5), np.full(64, 2000), np.zeros(64, bool))
    decode = model.breakdown(np.full(64, 1), np.full(64, 2004), np.zeros(64, bool))
    assert verify["attention_s"] == pytest.approx(decode["attention_s"], rel=1e-9)
    assert verify["gemm_s"] > decode["gemm_s"]  # the 5 × 64 tokens still go through every GEMM


def test_all_reduce_is_never_interpolated_across_the_custom_all_reduce_switch():
    """vLLM's custom all-reduce takes messages under 8 MiB, NCCL the rest (table_grids.py): a100-80gb's
    graph rows at TP 4 jump 41.5 -> 118.0 µs from 4 to 8 MiB, so 6 MiB is the 4 MiB row scaled by the
    ring model, not a log-log mix of the two algorithms."""
    from profiler import get_device_spec, get_model_spec
    from profiler.measured.shipped import build_measured
    from profiler.roofline import ring_all_reduce_time_s

    a100 = get_device_spec("a100-80gb")
    model = build_measured("auto", get_model_spec("llama-2-70b"), a100, 4)
    table = next(s.tables["all_reduce"] for s in model.sources if "all_reduce" in s.tables)
    rows = table[(table["num_gpus"] == 4) & (table["mode"] == "graph")].set_index("size_bytes")["time_s"]
    mib = 1024 * 1024
    graph = model._all_reduce["graph"]
    assert graph(4 * mib) == (pytest.approx(rows[4 * mib], rel=1e-9), False)
    assert graph(8 * mib) == (pytest.approx(rows[8 * mib], rel=1e-9), False)  # at the switch: NCCL's row
    ring = lambda b: ring_all_reduce_time_s(b, a100, 4)  # noqa: E731
    six = rows[4 * mib] * ring(6 * mib) / ring(4 * mib)
    assert graph(6 * mib) == (pytest.approx(six, rel=1e-9), False)
    assert six < 0.8 * math.exp(0.415 * math.log(rows[4 * mib]) + 0.585 * math.log(rows[8 * mib]))  # the old mix
    w = math.log(12 / 8) / math.log(16 / 8)  # above the switch: NCCL's rows only
    assert graph(12 * mib)[0] == pytest.approx(rows[8 * mib] ** (1 - w) * rows[16 * mib] ** w, rel=1e-9)


def test_all_reduce_rows_without_a_jump_at_the_switch_stay_one_curve():
    """h100-sxm TP 8 (vLLM 0.19 rows): 30.6 µs at 4 MiB, 50.7 µs at 8 MiB, less than the size's 2×, so
    one algorithm spans the 8 MiB mark there (symmetric-memory all-reduce; vLLM caps the custom
    all-reduce at 256 KiB on Hopper TP 8): 6 MiB is read log-log between the two rows."""
    from profiler import get_device_spec, get_model_spec
    from profiler.measured.shipped import build_measured

    model = build_measured("auto", get_model_spec("llama-3-70b"), get_device_spec("h100-sxm"), 8)
    table = next(s.tables["all_reduce"] for s in model.sources if "all_reduce" in s.tables)
    rows = table[(table["num_gpus"] == 8) & (table["mode"] == "graph")].set_index("size_bytes")["time_s"]
    mib = 1024 * 1024
    assert rows[8 * mib] < 2 * rows[4 * mib]
    w = math.log(6 / 4) / math.log(8 / 4)
    assert model._all_reduce["graph"](6 * mib) == (
        pytest.approx(rows[4 * mib] ** (1 - w) * rows[8 * mib] ** w, rel=1e-9), False)
