"""LLMServingSim importer: microseconds → seconds checked by hand on two rows per file, the model
checked against meta.yaml's hf_overrides, and bad files refused or counted with file and column.

Real rows: ../shared/profiles/llmservingsim/ (skipped when absent); bad files are written here."""
from __future__ import annotations

import shutil

import pandas as pd
import pytest

from profiler.importers import import_source
from profiler.importers.llmservingsim import import_llmservingsim
from profiler.measured.tables import MeasuredTableError
from profiler.model_spec import get_model_spec
from tests.conftest import shared_path

QWEN = ("profiles", "llmservingsim", "RTXPRO6000", "Qwen", "Qwen3-32B", "bf16")


@pytest.fixture(scope="module")
def qwen_tp2():
    return import_llmservingsim(shared_path(*QWEN), get_model_spec("qwen3-32b"), 2)


def _time(table: pd.DataFrame, **keys) -> float:
    rows = table
    for k, v in keys.items():
        rows = rows[rows[k] == v]
    assert len(rows) == 1, keys
    return float(rows["time_s"].iloc[0])


def test_dense_rows_in_seconds(qwen_tp2):
    ops = qwen_tp2.tables["layer_ops"]
    # tp2/dense.csv: "qkv_proj,64,45.2053" and "layernorm,512,6.0745" (µs).
    assert _time(ops, op="qkv_proj", num_tokens=64) == pytest.approx(45.2053e-6)
    assert _time(ops, op="layernorm", num_tokens=512) == pytest.approx(6.0745e-6)


def test_per_sequence_rows_in_seconds(qwen_tp2):
    ops = qwen_tp2.tables["sequence_ops"]
    # tp2/per_sequence.csv: "lm_head,8,531.988" and "sampler,128,82.741".
    assert _time(ops, op="lm_head", num_seqs=8) == pytest.approx(531.988e-6)
    assert _time(ops, op="sampler", num_seqs=128) == pytest.approx(82.741e-6)


def test_attention_rows_in_seconds(qwen_tp2):
    rows = qwen_tp2.tables["mixed_attention"]
    # tp2/attention.csv: "512,1024,0,0,66.5923" and "0,0,64,1024,125.42".
    assert _time(rows, prefill_tokens=512, prefill_context_tokens=1024, num_decodes=0,
                 decode_context_tokens=0) == pytest.approx(66.5923e-6)
    assert _time(rows, prefill_tokens=0, prefill_context_tokens=0, num_decodes=64,
                 decode_context_tokens=1024) == pytest.approx(125.42e-6)


def test_provenance_and_model(qwen_tp2):
    meta = qwen_tp2.meta
    assert (meta["source"]["name"], meta["licence"], meta["engine_version"]) == ("llmservingsim", "MIT", "0.19.0")
    assert meta["device"]["key"] == "rtx-pro-6000" and meta["tensor_parallel_size"] == 2
    assert qwen_tp2.model == get_model_spec("qwen3-32b")
    assert meta["measured_with"]["enforce_eager"] is True


def test_a_model_that_contradicts_hf_overrides_is_refused():
    # meta.yaml: intermediate_size 12800 = 25600 / 2; llama-3-8b's 14336 matches no tp in [1, 2].
    with pytest.raises(MeasuredTableError, match="hf_overrides.intermediate_size is 12800, but model 'llama-3-8b'"):
        import_llmservingsim(shared_path(*QWEN), get_model_spec("llama-3-8b"), 2)


def test_model_is_required_and_tp_folder_must_exist():
    with pytest.raises(MeasuredTableError, match="needs --model"):
        import_source("llmservingsim", shared_path(*QWEN))
    with pytest.raises(MeasuredTableError, match=r"no tp4/ folder \(has \['tp1', 'tp2'\]\)"):
        import_llmservingsim(shared_path(*QWEN), get_model_spec("qwen3-32b"), 4)


@pytest.fixture
def copy(tmp_path):
    target = tmp_path / "RTXPRO6000" / "Qwen" / "Qwen3-32B" / "bf16"
    shutil.copytree(shared_path(*QWEN), target)
    return target


def test_missing_column_names_file_and_column(copy):
    path = copy / "tp2" / "attention.csv"
    pd.read_csv(path).drop(columns=["kv_decode"]).to_csv(path, index=False)
    with pytest.raises(MeasuredTableError, match=r"tp2/attention.csv: missing columns \['kv_decode'\]"):
        import_llmservingsim(copy, get_model_spec("qwen3-32b"), 2)


def test_nan_times_are_dropped_and_counted(copy):
    path = copy / "tp2" / "dense.csv"
    table = pd.read_csv(path)
    table.loc[[0, 5], "time_us"] = float("nan")
    table.to_csv(path, index=False)
    tables = import_llmservingsim(copy, get_model_spec("qwen3-32b"), 2)
    assert tables.meta["dropped_rows"] == {"dense.csv": 2}
    assert len(tables.tables["layer_ops"]) == len(table) - 2


def test_unknown_dense_op_is_an_error(copy):
    path = copy / "tp2" / "dense.csv"
    table = pd.read_csv(path)
    table.loc[0, "layer"] = "mystery_op"
    table.to_csv(path, index=False)
    with pytest.raises(MeasuredTableError, match=r"dense.csv: column 'layer' has unknown ops \['mystery_op'\]"):
        import_llmservingsim(copy, get_model_spec("qwen3-32b"), 2)
