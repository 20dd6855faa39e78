"""Vidur profile readers, and the three held-out checks of the cost models on real GPU rows.

Rows: ../shared/profiles/vidur/ (Vidur's A100/H100 measurements; skipped when absent). Each check
predicts rows the model never saw: another GPU, larger steps, another model. The metric is the
MAPE of the per-layer non-attention time (`profiler.vidur.layer_time_s`) over every step size.
"""
import numpy as np
import pytest

from profiler import get_model_spec
from profiler.fitted import FittedCostModel, op_features
from profiler.profile_data import Profile, ProfileError
from profiler.roofline_tuning import tune_roofline
from profiler.vidur import LAYER_OPS, layer_time_s, measured_op_time_s, read_vidur_all_reduce, read_vidur_mlp
from tests.conftest import shared_path

LLAMA_2_7B, LLAMA_3_8B = get_model_spec("llama-2-7b"), get_model_spec("llama-3-8b")


def mlp_csv(gpu: str, model_dir: str):
    return shared_path("profiles", "vidur", "compute", gpu, "meta-llama", model_dir, "mlp.csv")


def mape_pct(predicted, measured) -> float:
    return float(np.mean(np.abs(np.asarray(predicted) - measured) / measured) * 100)


def fitted_layer_time_s(model: FittedCostModel, num_tokens):
    return layer_time_s(model.catalogue, lambda name, t: model.op_time_s(name, {"num_tokens": t}), num_tokens)


@pytest.fixture(scope="module")
def a100_llama2() -> Profile:
    return read_vidur_mlp(mlp_csv("a100", "Llama-2-7b-hf"), 1, LLAMA_2_7B)


def test_mlp_reader_maps_ops_converts_ms_and_filters_tp(a100_llama2):
    qkv = a100_llama2.rows("qkv_proj").set_index("num_tokens")
    assert qkv.loc[1, "time_median_s"] == pytest.approx(0.065e-3)  # 0.065 ms in the CSV
    assert qkv.loc[4096, "time_median_s"].mean() == pytest.approx((1.911e-3 + 1.8865e-3) / 2)
    assert len(a100_llama2.rows("rmsnorm")) == 2 * len(qkv)  # input and post-attention norms
    assert a100_llama2.meta["rates"]["peak_flops"] == 312e12  # a100 folder -> a100-80gb datasheet
    tp4 = read_vidur_mlp(mlp_csv("a100", "Llama-2-7b-hf"), 4, LLAMA_2_7B)
    assert tp4.rows("qkv_proj")["time_median_s"].min() < qkv["time_median_s"].min()
    with pytest.raises(ProfileError, match="num_key_value_heads is 32 in the profile but 8"):
        read_vidur_mlp(mlp_csv("a100", "Llama-2-7b-hf"), 1, LLAMA_3_8B)
    with pytest.raises(ProfileError, match="num_tensor_parallel_workers = 3"):
        read_vidur_mlp(mlp_csv("a100", "Llama-2-7b-hf"), 3)


def test_all_reduce_reader_sizes_in_bytes_and_seconds():
    table = read_vidur_all_reduce(shared_path("profiles", "vidur", "network", "a100_pairwise_nvlink",
                                              "all_reduce.csv"))
    first = table.iloc[0]
    assert (first["num_workers"], first["size_bytes"]) == (2, 4096)  # 2,048 fp16 elements
    assert first["time_median_s"] == pytest.approx(0.007e-3)
    assert set(table["num_workers"]) >= {2, 4}


def test_roofline_tuned_on_a100_predicts_h100_layer_time_within_25_percent(a100_llama2):
    samples = []
    for name in LAYER_OPS:
        op, rows = a100_llama2.catalogue.op(name), a100_llama2.rows(name)
        X = op_features(a100_llama2.catalogue, a100_llama2.meta["rates"], op, {"num_tokens": rows["num_tokens"]})
        samples.append((np.full(len(rows), op.family), X[:, 0], X[:, 1], rows["time_median_s"].to_numpy()))
    efficiency = tune_roofline(*(np.concatenate(parts) for parts in zip(*samples)))
    assert 0.5 < efficiency.flops_efficiency < 0.8  # a plausible A100 GEMM efficiency

    h100 = read_vidur_mlp(mlp_csv("h100", "Llama-2-7b-hf"), 1, LLAMA_2_7B)
    catalogue, rates = h100.catalogue, h100.meta["rates"]  # H100 datasheet peaks

    def roofline_s(name, tokens):
        op = catalogue.op(name)
        X = op_features(catalogue, rates, op, {"num_tokens": tokens})
        return efficiency.op_time_s(op.family, X[:, 0], X[:, 1])
    tokens = np.unique(h100.rows("qkv_proj")["num_tokens"])
    assert tokens.min() == 1 and tokens.max() == 4096
    error = mape_pct(layer_time_s(catalogue, roofline_s, tokens),
                     layer_time_s(catalogue, measured_op_time_s(h100), tokens))
    assert error <= 25.0  # measured: 9.2 % (at tp 2, 4, 8: 9.5, 7.8, 6.0 %)


def test_fit_on_small_steps_extrapolates_to_2048_4096_within_15_percent(a100_llama2):
    small = Profile(a100_llama2.meta, {f: t[t["num_tokens"] <= 1024] for f, t in a100_llama2.tables.items()})
    model = FittedCostModel.fit(small, "median")
    tokens = np.unique(a100_llama2.rows("qkv_proj")["num_tokens"])
    tokens = tokens[(tokens >= 2048) & (tokens <= 4096)]
    error = mape_pct(fitted_layer_time_s(model, tokens),
                     layer_time_s(model.catalogue, measured_op_time_s(a100_llama2), tokens))
    assert error <= 15.0  # measured: 1.6 % (at tp 2, 4, 8: 14.1, 8.9, 5.0 %)


def test_fit_on_llama2_predicts_llama3_within_20_percent(a100_llama2):
    """Llama-3-8B: GQA (8 KV heads, so a QKV GEMM half as wide), a 14,336-wide MLP, steps to 32k."""
    model = FittedCostModel.fit(a100_llama2, "median").for_model(LLAMA_3_8B)
    llama3 = read_vidur_mlp(mlp_csv("a100", "Meta-Llama-3-8B"), 1, LLAMA_3_8B)
    tokens = np.unique(llama3.rows("qkv_proj")["num_tokens"])
    assert tokens.max() == 32768
    error = mape_pct(fitted_layer_time_s(model, tokens),
                     layer_time_s(model.catalogue, measured_op_time_s(llama3), tokens))
    assert error <= 20.0  # measured: 2.9 % (at tp 2, 4, 8: 2.6, 4.2, 4.0 %)
