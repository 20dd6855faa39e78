"""Vidur importer (through profiler/vidur.py's readers): milliseconds → seconds and fp16 elements →
bytes checked by hand on two rows per file. Rows: ../shared/profiles/vidur/ (skipped when absent)."""
from __future__ import annotations

import pytest

from profiler.importers.vidur import import_vidur
from profiler.measured.tables import MeasuredTableError
from profiler.model_spec import get_model_spec
from tests.conftest import shared_path


@pytest.fixture(scope="module")
def a100_70b():
    mlp = shared_path("profiles", "vidur", "compute", "a100", "meta-llama", "Llama-2-70b-hf", "mlp.csv")
    ar = shared_path("profiles", "vidur", "network", "a100_pairwise_nvlink", "all_reduce.csv")
    return import_vidur(mlp, get_model_spec("llama-2-70b"), 2, all_reduce_csv=ar)


def _time(table, **keys) -> float:
    rows = table
    for k, v in keys.items():
        rows = rows[rows[k] == v]
    return float(rows["time_s"].iloc[0])


def test_layer_ops_in_seconds(a100_70b):
    ops = a100_70b.tables["layer_ops"]
    # mlp.csv, tp 2: attn_pre_proj median 0.064 ms at 64 tokens; mlp_act median 0.048 ms at 512.
    assert _time(ops, op="qkv_proj", num_tokens=64) == pytest.approx(0.064e-3)
    assert _time(ops, op="act_fn", num_tokens=512) == pytest.approx(0.048e-3)
    assert set(ops["op"]) >= {"layernorm", "residual_add", "rotary_emb", "o_proj", "down_proj", "gate_up_proj"}


def test_all_reduce_in_bytes_and_seconds(a100_70b):
    ar = a100_70b.tables["all_reduce"]
    # all_reduce.csv, 2 workers: size 2048 fp16 elements median 0.007 ms; 10240 elements 0.045 ms.
    assert _time(ar, num_gpus=2, size_bytes=4096) == pytest.approx(7e-6)
    assert _time(ar, num_gpus=2, size_bytes=20480) == pytest.approx(45e-6)
    assert set(ar["mode"]) == {"graph"}


def test_provenance(a100_70b):
    meta = a100_70b.meta
    assert (meta["source"]["name"], meta["licence"], meta["device"]["key"]) == ("vidur", "MIT", "a100-80gb")
    assert "sarathi-serve" in meta["engine"] and meta["tensor_parallel_size"] == 2


def test_a_model_with_other_shapes_is_refused():
    mlp = shared_path("profiles", "vidur", "compute", "a100", "meta-llama", "Llama-2-70b-hf", "mlp.csv")
    with pytest.raises(MeasuredTableError, match="hidden_size is 8192 in the profile but 4096"):
        import_vidur(mlp, get_model_spec("llama-3-8b"), 2)
