"""AIConfigurator importer: unit conversions checked by hand on two rows per table (milliseconds →
seconds; all-reduce bf16 elements → bytes), and bad tables (missing column, NaN latency, a unit
that does not match) refused or counted with the file and column named.

Real rows: ../shared/profiles/aiconfigurator/ (skipped when absent); the bad-table cases are
small parquet files written here."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from profiler.importers import import_source
from profiler.importers.aiconfigurator import import_aiconfigurator
from profiler.measured.tables import MeasuredTableError, MeasuredTables
from profiler.model_spec import ModelSpec, get_model_spec
from tests.conftest import shared_path


@pytest.fixture(scope="module")
def h100():
    return import_aiconfigurator(shared_path("profiles", "aiconfigurator", "h100_sxm"))


def _row(table: pd.DataFrame, **keys) -> pd.Series:
    rows = table
    for k, v in keys.items():
        rows = rows[rows[k] == v]
    assert len(rows) == 1, keys
    return rows.iloc[0]


def test_gemm_rows_in_seconds(h100):
    gemm = h100.tables["gemm"]
    # gemm_perf.parquet, bfloat16: (m 1, n 4096, k 4096) latency 0.016059 ms; (2048, 6144, 4096) 0.130042 ms.
    assert _row(gemm, m=1, n=4096, k=4096)["time_s"] == pytest.approx(0.016059e-3, rel=1e-4)
    assert _row(gemm, m=2048, n=6144, k=4096)["time_s"] == pytest.approx(0.130042e-3, rel=1e-4)
    # That GEMM runs at 2·2048·6144·4096 / 130.042 µs = 792 TFLOP/s: 80 % of the 989 dense peak (a sane unit).
    assert 2 * 2048 * 6144 * 4096 / 0.130042e-3 == pytest.approx(792.7e12, rel=1e-3)


def test_attention_rows_in_seconds(h100):
    ctx = h100.tables["context_attention"]
    # context_attention_perf, heads 32/8, head_dim 128, bf16 KV, no window: (b 1, isl 1024) 0.029035 ms, (4, 4096) 0.851941 ms.
    assert _row(ctx, num_heads=32, num_kv_heads=8, head_dim=128, batch_size=1, query_tokens=1024)["time_s"] == \
        pytest.approx(0.029035e-3, rel=1e-4)
    assert _row(ctx, num_heads=32, num_kv_heads=8, head_dim=128, batch_size=4, query_tokens=4096)["time_s"] == \
        pytest.approx(0.851941e-3, rel=1e-4)
    dec = h100.tables["decode_attention"]
    # generation_attention_perf: (b 64, step 1023) 0.102928 ms, (b 1, step 4095) 0.014501 ms; step is kv_tokens.
    assert _row(dec, num_heads=32, num_kv_heads=8, head_dim=128, batch_size=64, kv_tokens=1023)["time_s"] == \
        pytest.approx(0.102928e-3, rel=1e-4)
    assert _row(dec, num_heads=32, num_kv_heads=8, head_dim=128, batch_size=1, kv_tokens=4095)["time_s"] == \
        pytest.approx(0.014501e-3, rel=1e-4)


def test_all_reduce_rows_in_bytes_and_seconds(h100):
    ar = h100.tables["all_reduce"]
    # custom_allreduce_perf, 2 GPUs: 8192 elements graph 0.004411 ms; 1048576 elements eager 0.020775 ms.
    assert _row(ar, num_gpus=2, mode="graph", size_bytes=16384)["time_s"] == pytest.approx(4.411e-6, rel=1e-4)
    assert _row(ar, num_gpus=2, mode="eager", size_bytes=2097152)["time_s"] == pytest.approx(20.775e-6, rel=1e-4)


def test_provenance_metadata(h100):
    meta = h100.meta
    assert meta["source"]["name"] == "aiconfigurator" and meta["licence"] == "Apache-2.0"
    assert meta["engine"] == "vllm" and meta["engine_version"] == "0.19.0"
    assert meta["device"] == {"name": "NVIDIA H100 80GB HBM3", "key": "h100-sxm", "system": "h100_sxm"}
    assert "milliseconds" in meta["units"]["time_s"]


def test_round_trip_keeps_rows(h100, tmp_path):
    h100.save(tmp_path / "plain")
    h100.save(tmp_path / "packed", compress=True)
    for folder in ("plain", "packed"):
        back = MeasuredTables.load(tmp_path / folder)
        assert {k: len(v) for k, v in back.tables.items()} == {k: len(v) for k, v in h100.tables.items()}
        assert back.meta["licence"] == "Apache-2.0"
        row = _row(back.tables["gemm"], m=1, n=4096, k=4096)
        assert row["time_s"] == pytest.approx(0.016059e-3, rel=1e-4)  # 5 significant digits on disk


def test_model_coverage_is_checked(tmp_path):
    system = shared_path("profiles", "aiconfigurator", "h100_sxm")
    ok = import_source("aiconfigurator", system, model=get_model_spec("llama-3-8b"), tensor_parallel_size=2)
    assert "gemm" in ok.tables
    # The tables have head_dim 64 and 128 only: a head_dim of 96 is not covered.
    with pytest.raises(MeasuredTableError, match=r"context_attention \(columns num_heads, num_kv_heads, head_dim\) "
                                                 r"has no rows at 16, 4, 96"):
        import_source("aiconfigurator", system, model=ModelSpec("odd", 2, 3072, 32, 8, 96, 8192, 32000, 4096),
                      tensor_parallel_size=2)


# -- bad tables ---------------------------------------------------------------------------------

def _system(tmp_path, gemm: pd.DataFrame, name: str = "h100_sxm"):
    system = tmp_path / name
    folder = system / "gemm" / "vllm" / "0.19.0"
    folder.mkdir(parents=True)
    (system / "system.yaml").write_text("gpu:\n  bfloat16_tc_flops: 989000000000000\n")
    gemm.to_parquet(folder / "gemm_perf.parquet")
    return system


def _gemm(latencies, dtype="bfloat16"):
    n = len(latencies)
    return pd.DataFrame({"m": [1 << i for i in range(n)], "n": [4096] * n, "k": [4096] * n,
                         "gemm_dtype": [dtype] * n, "latency": latencies})


def test_missing_column_names_file_and_column(tmp_path):
    system = _system(tmp_path, _gemm([0.01, 0.02]).drop(columns=["k"]))
    with pytest.raises(MeasuredTableError, match=r"gemm_perf.parquet: missing columns \['k'\]"):
        import_aiconfigurator(system)


def test_nan_latencies_are_dropped_and_counted(tmp_path):
    tables = import_aiconfigurator(_system(tmp_path, _gemm([0.01, math.nan, 0.03, -1.0])))
    assert len(tables.tables["gemm"]) == 2
    assert tables.meta["dropped_rows"] == {"gemm_perf.parquet": 2}


def test_all_nan_latencies_are_an_error(tmp_path):
    with pytest.raises(MeasuredTableError, match="gemm_perf.parquet: column 'latency' has no finite value"):
        import_aiconfigurator(_system(tmp_path, _gemm([math.nan, math.nan])))


def test_latency_in_the_wrong_unit_is_refused(tmp_path):
    # Seconds written where milliseconds belong: 1000× faster GEMMs than the 989 TFLOP/s peak allows.
    m = [1024, 2048, 4096, 8192]
    seconds = [2 * x * 4096 * 4096 / 700e12 for x in m]  # 700 TFLOP/s, in seconds
    frame = pd.DataFrame({"m": m, "n": 4096, "k": 4096, "gemm_dtype": "bfloat16", "latency": seconds})
    with pytest.raises(MeasuredTableError, match="unit does not match"):
        import_aiconfigurator(_system(tmp_path, frame))
    frame["latency"] = [s * 1e3 for s in seconds]  # the same times in milliseconds: accepted
    assert len(import_aiconfigurator(_system(tmp_path / "ok", frame)).tables["gemm"]) == 4


def test_unknown_system_needs_a_device(tmp_path):
    with pytest.raises(MeasuredTableError, match="unknown system 'my_gpu'; pass --device"):
        import_aiconfigurator(_system(tmp_path, _gemm([0.01, 0.02]), name="my_gpu"))
    assert import_aiconfigurator(tmp_path / "my_gpu", device="h100-sxm").meta["device"]["key"] == "h100-sxm"


def test_a_csv_with_nan_is_refused_on_load(tmp_path):
    tables = import_aiconfigurator(_system(tmp_path, _gemm([0.01, 0.02])))
    tables.save(tmp_path / "out")
    path = tmp_path / "out" / "gemm.csv"
    path.write_text(path.read_text().replace("1e-05", "nan", 1))
    with pytest.raises(MeasuredTableError, match=r"gemm.csv: column 'time_s' is empty or NaN in row 1"):
        MeasuredTables.load(tmp_path / "out")


def test_decode_latency_in_the_wrong_unit_is_refused(tmp_path):
    system = _system(tmp_path, _gemm([0.01, 0.02]))
    (system / "system.yaml").write_text("gpu:\n  bfloat16_tc_flops: 989000000000000\n  mem_bw: 3350000000000\n")
    folder = system / "attention" / "vllm" / "0.19.0"
    folder.mkdir(parents=True)
    b, s = [1, 8, 64, 256], [1023, 4095, 16383, 65535]
    rows = pd.DataFrame([(bb, ss) for bb in b for ss in s], columns=["batch_size", "step"])
    kv_bytes = rows["batch_size"] * rows["step"] * 8 * 128 * 2 * 2  # 8 KV heads of 128, K and V, bf16
    rows = rows.assign(num_heads=32, num_key_value_heads=8, head_dim=128, kv_cache_dtype="bfloat16",
                       latency=kv_bytes / 2.5e12)  # 2.5 TB/s, but in seconds: 1000× too fast
    rows.to_parquet(folder / "generation_attention_perf.parquet")
    with pytest.raises(MeasuredTableError, match="generation_attention_perf.parquet: column 'latency'.*unit does not match"):
        import_aiconfigurator(system)
    rows.assign(latency=rows["latency"] * 1e3).to_parquet(folder / "generation_attention_perf.parquet")
    assert len(import_aiconfigurator(system).tables["decode_attention"]) == 16  # milliseconds: accepted


def test_sidecar_problems_are_named(tmp_path):
    import json

    tables = import_aiconfigurator(_system(tmp_path, _gemm([0.01, 0.02])))
    tables.save(tmp_path / "out")
    sidecar = tmp_path / "out" / "measured.json"
    meta = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**meta, "format_version": 9}))
    with pytest.raises(MeasuredTableError, match="measured.json: format_version 9"):
        MeasuredTables.load(tmp_path / "out")
    del meta["licence"]
    sidecar.write_text(json.dumps(meta))
    with pytest.raises(MeasuredTableError, match=r"measured.json: missing keys \['licence'\]"):
        MeasuredTables.load(tmp_path / "out")
    with pytest.raises(MeasuredTableError, match="not a measured-table directory"):
        MeasuredTables.load(tmp_path)


def test_rows_faster_than_the_datasheet_are_dropped_and_counted(tmp_path):
    from profiler.importers.aiconfigurator import faster_than_datasheet

    # 1024³ GEMM on 1e15 FLOP/s and 1e12 B/s: max(2·1024³ / 1e15, 2·3·1024² / 1e12) = max(2.15, 6.29) µs.
    gemm = pd.DataFrame({"m": [1024, 1024], "n": 1024, "k": 1024, "time_s": [5e-6, 7e-6]})
    assert faster_than_datasheet("gemm", gemm, 1e15, 1e12).tolist() == [True, False]
    # 2 decodes over 1000 KV tokens, 8 KV heads of 128: 2·1000·2·8·128·2 B = 8.19 MB → 8.19 µs at 1e12 B/s.
    dec = pd.DataFrame({"batch_size": 2, "kv_tokens": 1000, "num_heads": 32, "num_kv_heads": 8, "head_dim": 128,
                        "time_s": [8.0e-6, 8.4e-6]})
    assert faster_than_datasheet("decode_attention", dec, 1e15, 1e12).tolist() == [True, False]
    # Through the importer: system.yaml's figures, the count in measured.json.
    m = [1024, 2048, 4096]
    frame = pd.DataFrame({"m": m, "n": 4096, "k": 4096, "gemm_dtype": "bfloat16",
                          "latency": [2 * 1024 * 4096 * 4096 / 2e15 * 1e3, 0.1, 0.2]})  # first: 2× the peak, others 70 %
    system = _system(tmp_path, frame)
    assert import_aiconfigurator(system).meta["dropped_faster_than_datasheet"] == {}  # no mem_bw: not checked
    (system / "system.yaml").write_text("gpu:\n  bfloat16_tc_flops: 989000000000000\n  mem_bw: 3350000000000\n")
    tables = import_aiconfigurator(system)
    assert tables.meta["dropped_faster_than_datasheet"] == {"gemm_perf.parquet": 1}
    assert tables.tables["gemm"]["m"].tolist() == [2048, 4096]
