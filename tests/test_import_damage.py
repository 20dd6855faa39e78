"""`profile import` on damaged or mismatched sources (the breaker pass's d02-d05): a `--device` that
contradicts the GPU a source records is refused, a corrupt YAML sidecar is named like a device
file, a text cell is an error naming the file, column and row, NaN / non-positive times and sizes
are dropped and counted, a Vidur mlp.csv missing an op or an all_reduce.csv of another GPU (or
without rows) is refused, and re-importing into a folder removes the earlier import's tables
(and refuses a folder of the user's). Every source here is a small synthetic file in tmp_path."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.cli.main import app
from profiler.importers.aiconfigurator import import_aiconfigurator
from profiler.importers.llmservingsim import import_llmservingsim
from profiler.importers.vidur import import_vidur
from profiler.measured.tables import MeasuredTableError, MeasuredTables
from profiler.model_spec import get_model_spec
from profiler.vidur import VIDUR_OPS
from tests.test_importers_aiconfigurator import _system as _aic_system  # a system folder with one gemm_perf

LLAMA_31_8B = get_model_spec("llama-3.1-8b")


def _cli(*args: str):
    return CliRunner().invoke(app, ["profile", "import", *map(str, args)])


# -- AIConfigurator ------------------------------------------------------------------------------

def _gemm(m, latency_ms=None, **extra):
    latency_ms = latency_ms or [0.01 * (i + 1) for i in range(len(m))]
    return pd.DataFrame({"m": m, "n": 4096, "k": 4096, "gemm_dtype": "bfloat16", "latency": latency_ms, **extra})


def test_aiconfigurator_device_that_contradicts_the_folder_is_refused(tmp_path):
    system = _aic_system(tmp_path, _gemm([1, 2]))
    with pytest.raises(MeasuredTableError, match=r"h100_sxm: the tables were measured on h100-sxm \(folder h100_sxm "
                                                 r"says 'h100_sxm'\), but --device b200 was given"):
        import_aiconfigurator(system, "b200")
    assert import_aiconfigurator(system, "h100-sxm").meta["device"]["key"] == "h100-sxm"  # the same: accepted
    result = _cli(system, "--from", "aiconfigurator", "--device", "b200", "--out", tmp_path / "out")
    assert result.exit_code == 2 and "but --device b200 was given" in result.output
    assert not (tmp_path / "out").exists()


def test_aiconfigurator_device_column_names_the_gpu_of_a_renamed_folder(tmp_path):
    system = _aic_system(tmp_path, _gemm([1, 2], device="NVIDIA GeForce RTX 4090"), name="my_copy")
    assert import_aiconfigurator(system).meta["device"] == {"name": "NVIDIA GeForce RTX 4090", "key": "rtx-4090",
                                                            "system": "my_copy"}
    with pytest.raises(MeasuredTableError, match=r"measured on rtx-4090 \(gemm_perf.parquet column 'device' says "
                                                 r"'NVIDIA GeForce RTX 4090'\), but --device h100-sxm"):
        import_aiconfigurator(system, "h100-sxm")


def test_aiconfigurator_folder_and_files_of_two_gpus_are_refused(tmp_path):
    system = _aic_system(tmp_path, _gemm([1, 2], device="NVIDIA B200"))
    with pytest.raises(MeasuredTableError, match=r"its records name different GPUs \(gemm_perf.parquet column "
                                                 r"'device' says 'NVIDIA B200' \(b200\); folder h100_sxm"):
        import_aiconfigurator(system)


def test_corrupt_system_yaml_exits_2_naming_the_file(tmp_path):
    system = _aic_system(tmp_path, _gemm([1, 2]))
    (system / "system.yaml").write_text("gpu:\n  bfloat16_tc_flops: 989000000000000\n  bad: [\n")
    with pytest.raises(MeasuredTableError, match=r"system.yaml: not valid YAML: "):
        import_aiconfigurator(system)
    result = _cli(system, "--from", "aiconfigurator", "--out", tmp_path / "out")
    assert result.exit_code == 2 and f"{system / 'system.yaml'}: not valid YAML" in result.output.replace("\n", "")
    assert "Traceback" not in result.output
    (system / "system.yaml").write_text("- gpu\n")
    with pytest.raises(MeasuredTableError, match=r"system.yaml: must hold a YAML mapping .* got list"):
        import_aiconfigurator(system)
    (system / "system.yaml").write_text("gpu:\n  bfloat16_tc_flops: fast\n")
    with pytest.raises(MeasuredTableError, match=r"system.yaml: gpu.bfloat16_tc_flops is 'fast'; expected a number"):
        import_aiconfigurator(system)



@pytest.mark.parametrize("text", ["", "gpu:\n", "data_dir: data/h100_sxm\n"])
def test_system_yaml_without_gpu_figures_is_refused(tmp_path, text):
    # Recheck v03: an empty system.yaml skipped the unit checks and the faster-than-datasheet filter.
    system = _aic_system(tmp_path, _gemm([1, 2]))
    (system / "system.yaml").write_text(text)
    message = (f"{system / 'system.yaml'}: the file has no gpu figures (gpu.bfloat16_tc_flops in FLOP/s, gpu.mem_bw "
               "in bytes/s): the importer checks the tables' latency unit and drops rows faster than the datasheet "
               "against them; give AIConfigurator's system.yaml")
    with pytest.raises(MeasuredTableError) as info:
        import_aiconfigurator(system)
    assert str(info.value) == message
    result = _cli(system, "--from", "aiconfigurator", "--out", tmp_path / "out")
    assert result.exit_code == 2 and message in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_system_yaml_with_one_gpu_figure_says_which_checks_are_skipped(tmp_path):
    system = _aic_system(tmp_path, _gemm([1, 2]))  # bfloat16_tc_flops only
    skipped = ["no gpu.mem_bw: decode-attention latency-unit check and faster-than-datasheet filter not made"]
    assert import_aiconfigurator(system).meta["datasheet_checks_skipped"] == skipped
    result = _cli(system, "--from", "aiconfigurator", "--out", tmp_path / "out")
    assert result.exit_code == 0 and f"note: {skipped[0]}" in " ".join(result.output.split())
    assert json.loads((tmp_path / "out" / "measured.json").read_text())["datasheet_checks_skipped"] == skipped
    (system / "system.yaml").write_text("gpu:\n  mem_bw: 3350000000000\n")
    assert import_aiconfigurator(system).meta["datasheet_checks_skipped"] == [
        "no gpu.bfloat16_tc_flops: GEMM latency-unit check and faster-than-datasheet filter not made"]

def test_gemm_text_size_names_file_column_and_row(tmp_path):
    system = _aic_system(tmp_path, _gemm(["1", "big", "4"]))
    with pytest.raises(MeasuredTableError, match=r"gemm_perf.parquet: column 'm' row 2 is 'big', not a number"):
        import_aiconfigurator(system)
    system = _aic_system(tmp_path / "half", _gemm([1.0, 2.5]))
    with pytest.raises(MeasuredTableError, match=r"column 'm' row 2 is 2.5, not a whole number"):
        import_aiconfigurator(system)


def test_gemm_shapes_of_size_zero_are_dropped_and_counted(tmp_path):
    tables = import_aiconfigurator(_aic_system(tmp_path, _gemm([0, 2, 4, 8], [0.01, 0.02, 0.03, math.nan])))
    gemm = tables.tables["gemm"]
    assert gemm["m"].tolist() == [2, 4] and gemm["time_s"].tolist() == pytest.approx([0.02e-3, 0.03e-3])
    assert tables.meta["dropped_rows"] == {"gemm_perf.parquet": 2}  # m = 0, and a NaN latency
    with pytest.raises(MeasuredTableError, match=r"gemm_perf.parquet: column 'm' has no value > 0"):
        import_aiconfigurator(_aic_system(tmp_path / "zero", _gemm([0, 0])))


# -- LLMServingSim -------------------------------------------------------------------------------

META = "gpu: NVIDIA GeForce RTX 4090\nhardware: RTX4090\nvllm_version: 0.19.0\ntp_degrees: [1]\n"


def _lss_profile(tmp_path, meta: str = META, dense_tokens=(1, 2)):
    root = tmp_path / "RTX4090" / "meta-llama" / "Llama-3.1-8B" / "bf16"
    (root / "tp1").mkdir(parents=True)
    (root / "meta.yaml").write_text(meta)
    pd.DataFrame({"layer": "qkv_proj", "tokens": list(dense_tokens), "time_us": [10.0, 20.0]}).to_csv(
        root / "tp1" / "dense.csv", index=False)
    pd.DataFrame({"layer": "lm_head", "sequences": [1], "time_us": [30.0]}).to_csv(
        root / "tp1" / "per_sequence.csv", index=False)
    pd.DataFrame({"prefill_chunk": [16, 0], "kv_prefill": [0, 0], "n_decode": [0, 4], "kv_decode": [0, 100],
                  "time_us": [40.0, 50.0]}).to_csv(root / "tp1" / "attention.csv", index=False)
    return root


def test_llmservingsim_device_that_contradicts_meta_yaml_is_refused(tmp_path):
    root = _lss_profile(tmp_path)
    with pytest.raises(MeasuredTableError, match=r"meta.yaml: the tables were measured on rtx-4090 \(meta.yaml gpu "
                                                 r"says 'NVIDIA GeForce RTX 4090'\), but --device h100-sxm was given"):
        import_llmservingsim(root, LLAMA_31_8B, 1, "h100-sxm")
    tables = import_llmservingsim(root, LLAMA_31_8B, 1)
    assert tables.meta["device"]["key"] == "rtx-4090"
    assert tables.tables["layer_ops"]["time_s"].tolist() == pytest.approx([10e-6, 20e-6])
    assert tables.tables["mixed_attention"]["num_decodes"].tolist() == [0, 4]  # 0 decodes: a valid row


def test_corrupt_meta_yaml_exits_2_naming_the_file(tmp_path):
    root = _lss_profile(tmp_path, META + "tp_degrees: [1\n")
    with pytest.raises(MeasuredTableError, match=r"meta.yaml: not valid YAML: "):
        import_llmservingsim(root, LLAMA_31_8B, 1)
    result = _cli(root, "--from", "llmservingsim", "--model", "llama-3.1-8b", "--out", tmp_path / "out")
    assert result.exit_code == 2 and "meta.yaml: not valid YAML" in result.output and "Traceback" not in result.output
    (root / "meta.yaml").write_text(META.replace("[1]", "[one]"))
    with pytest.raises(MeasuredTableError, match=r"meta.yaml: tp_degrees holds 'one'; expected a whole number"):
        import_llmservingsim(root, LLAMA_31_8B, 1)


def test_llmservingsim_text_token_count_is_named_and_zero_is_dropped(tmp_path):
    root = _lss_profile(tmp_path, dense_tokens=("1", "two"))
    with pytest.raises(MeasuredTableError, match=r"dense.csv: column 'tokens' row 2 is 'two', not a number"):
        import_llmservingsim(root, LLAMA_31_8B, 1)
    root = _lss_profile(tmp_path / "zero", dense_tokens=(0, 2))
    tables = import_llmservingsim(root, LLAMA_31_8B, 1)
    assert tables.tables["layer_ops"]["num_tokens"].tolist() == [2] and tables.meta["dropped_rows"] == {"dense.csv": 1}


# -- Vidur ---------------------------------------------------------------------------------------

STATS = ("min", "max", "mean", "median", "std")



def _attention(root, rows) -> Path:
    path = root / "tp1" / "attention.csv"
    pd.DataFrame(rows, columns=["prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"]).to_csv(
        path, index=False)
    return path


def test_llmservingsim_attention_rows_of_no_size_are_dropped_and_counted(tmp_path):
    # Recheck v05: rows that measure nothing (no chunk and no decodes; a prefill context without its
    # chunk; a decode context without decodes) are dropped and counted as the other tables' size-0 rows.
    root = _lss_profile(tmp_path)
    _attention(root, [(16, 0, 0, 0, 40.0), (0, 0, 4, 100, 50.0), (0, 0, 0, 0, 7.0), (0, 64, 2, 10, 8.0),
                      (16, 0, 0, 32, 9.0), (16, 0, 0, 0, 40.0)])  # the last repeats row 1 exactly: kept once
    tables = import_llmservingsim(root, LLAMA_31_8B, 1)
    mixed = tables.tables["mixed_attention"]
    assert mixed[["prefill_tokens", "prefill_context_tokens", "num_decodes", "decode_context_tokens"]].values.tolist() \
        == [[16, 0, 0, 0], [0, 0, 4, 100]]
    assert mixed["time_s"].tolist() == pytest.approx([40e-6, 50e-6])
    assert tables.meta["dropped_rows"] == {"attention.csv": 3}
    _attention(root, [(0, 0, 0, 0, 7.0), (0, 64, 0, 0, 8.0)])
    with pytest.raises(MeasuredTableError) as info:
        import_llmservingsim(root, LLAMA_31_8B, 1)
    assert str(info.value) == f"{root / 'tp1' / 'attention.csv'}: no row with a meaningful size (every row was dropped)"


def test_llmservingsim_one_shape_with_two_times_is_refused_naming_the_rows(tmp_path):
    # Recheck v05: prefill_chunk zeroed on every row made 1,068 keys with two times, imported silently.
    root = _lss_profile(tmp_path)
    path = _attention(root, [(0, 0, 1, 16, 9.3), (16, 0, 1, 16, 12.0), (0, 0, 1, 16, 9.3), (0, 0, 1, 16, 9.7)])
    message = (f"{path}: rows 1 and 4 measure the same shape (prefill_chunk 0, kv_prefill 0, n_decode 1, kv_decode 16) "
               "with different time_us (9.3 and 9.7); each shape must be measured once")
    with pytest.raises(MeasuredTableError) as info:
        import_llmservingsim(root, LLAMA_31_8B, 1)
    assert str(info.value) == message
    result = _cli(root, "--from", "llmservingsim", "--model", "llama-3.1-8b", "--out", tmp_path / "out")
    assert result.exit_code == 2 and message in " ".join(result.output.split()) and not (tmp_path / "out").exists()
    pd.DataFrame({"layer": ["qkv_proj", "o_proj", "qkv_proj"], "tokens": [1, 1, 1], "time_us": [10.0, 5.0, 11.0]}).to_csv(
        root / "tp1" / "dense.csv", index=False)
    with pytest.raises(MeasuredTableError) as info:
        import_llmservingsim(root, LLAMA_31_8B, 1)
    assert str(info.value) == (f"{root / 'tp1' / 'dense.csv'}: rows 1 and 3 measure the same shape (layer qkv_proj, "
                               "tokens 1) with different time_us (10 and 11); each shape must be measured once")

def _mlp(tokens=(1, 2, 4), tp=1) -> pd.DataFrame:
    """Llama-3.1-8B's shapes; op i's median is (i + 1) × num_tokens × 0.001 ms."""
    table = pd.DataFrame({"n_head": 32, "n_kv_head": 8, "n_embd": 4096, "n_expanded_embd": 14336,
                          "vocab_size": 128256, "use_gated_mlp": True, "num_tokens": list(tokens),
                          "num_tensor_parallel_workers": tp})
    for i, op in enumerate(VIDUR_OPS):
        for stat in STATS:
            table[f"time_stats.{op}.{stat}"] = [(i + 1) * t * 0.001 for t in tokens]
    return table


def _write_mlp(tmp_path, table: pd.DataFrame, gpu: str = "h100"):
    path = tmp_path / "compute" / gpu / "meta-llama" / "Llama-3.1-8B" / "mlp.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False)
    return path


def _ops(tables: MeasuredTables, op: str) -> list[tuple[int, float]]:
    rows = tables.tables["layer_ops"]
    rows = rows[rows["op"] == op]
    return list(zip(rows["num_tokens"].tolist(), rows["time_s"].tolist()))


def test_vidur_text_cell_names_file_column_and_row(tmp_path):
    table = _mlp().astype(object)
    table.loc[1, "time_stats.mlp_up_proj.median"] = "oops"
    path = _write_mlp(tmp_path, table)
    with pytest.raises(MeasuredTableError, match=r"mlp.csv: column 'time_stats.mlp_up_proj.median' row 2 is 'oops', "
                                                 r"not a number"):
        import_vidur(path)
    result = _cli(path, "--from", "vidur", "--out", tmp_path / "out")
    assert result.exit_code == 2 and "row 2 is 'oops'" in result.output and "Traceback" not in result.output


def test_vidur_nan_and_negative_medians_are_dropped_and_counted(tmp_path):
    table = _mlp()
    table.loc[0, "time_stats.mlp_up_proj.median"] = math.nan
    table.loc[2, "time_stats.mlp_up_proj.median"] = -3.0
    tables = import_vidur(_write_mlp(tmp_path, table))
    # mlp_up_proj is op 7 of VIDUR_OPS (gate_up_proj): 7 × 2 × 0.001 ms at 2 tokens; the others are kept.
    assert _ops(tables, "gate_up_proj") == [(2, pytest.approx(14e-6))]
    assert _ops(tables, "down_proj") == [(1, pytest.approx(9e-6)), (2, pytest.approx(18e-6)), (4, pytest.approx(36e-6))]
    assert tables.meta["dropped_rows"] == {"mlp.csv": 2}
    saved = MeasuredTables.load(tables.save(tmp_path / "out"))  # the tables are whole
    assert len(saved.tables["layer_ops"]) == len(tables.tables["layer_ops"])


def test_vidur_missing_op_columns_are_named(tmp_path):
    table = _mlp()
    path = _write_mlp(tmp_path, table[[c for c in table.columns if "mlp_up_proj" not in c]])
    with pytest.raises(MeasuredTableError, match=r"mlp.csv: missing the columns of ops mlp_up_proj \(gate_up_proj\): "
                                                 r"\['time_stats.mlp_up_proj.min', "):
        import_vidur(path)
    path = _write_mlp(tmp_path / "std", table.drop(columns=["time_stats.add.std"]))
    with pytest.raises(MeasuredTableError, match=r"ops add \(residual_add\): \['time_stats.add.std'\]"):
        import_vidur(path)


def test_vidur_zero_token_rows(tmp_path):
    with pytest.raises(MeasuredTableError, match=r"mlp.csv: column 'num_tokens' has no value > 0"):
        import_vidur(_write_mlp(tmp_path, _mlp(tokens=(0, 0))))
    tables = import_vidur(_write_mlp(tmp_path / "some", _mlp(tokens=(0, 2))))
    assert _ops(tables, "qkv_proj") == [(2, pytest.approx(8e-6))]  # attn_pre_proj is op 4: 4 × 2 × 0.001 ms
    assert tables.meta["dropped_rows"] == {"mlp.csv": 1} and tables.model.max_model_len == 2


def test_vidur_device_is_recorded_or_given(tmp_path):
    path = _write_mlp(tmp_path, _mlp())
    with pytest.raises(MeasuredTableError, match=r"measured on h100-sxm \(folder h100 says 'h100'\), "
                                                 r"but --device a100-80gb was given"):
        import_vidur(path, device="a100-80gb")
    loose = tmp_path / "mine.csv"
    _mlp().to_csv(loose, index=False)
    with pytest.raises(MeasuredTableError, match=r"mine.csv: cannot tell the device from the path"):
        import_vidur(loose)
    tables = import_vidur(loose, device="h100-sxm")
    assert tables.meta["device"] == {"name": "h100-sxm", "key": "h100-sxm"}
    assert tables.label == "vidur (sarathi-serve (vidur profiling) 7d47513, h100-sxm)"


def _all_reduce(tmp_path, folder: str, sizes=(1024, 2048), medians=(0.01, 0.02)):
    path = tmp_path / "network" / folder / "all_reduce.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pd.DataFrame({"num_workers": 2, "size": list(sizes), "rank": 0})
    for stat in STATS:
        table[f"time_stats.all_reduce.{stat}"] = list(medians)
    table.to_csv(path, index=False)
    return path


def test_vidur_all_reduce_of_another_gpu_or_without_rows_is_refused(tmp_path):
    mlp = _write_mlp(tmp_path, _mlp(tp=2))
    other = _all_reduce(tmp_path, "a100_pairwise_nvlink")
    with pytest.raises(MeasuredTableError, match=r"a100_pairwise_nvlink/all_reduce.csv: measured on a100-80gb \(folder "
                                                 r"a100_pairwise_nvlink\), but the compute tables are of h100-sxm"):
        import_vidur(mlp, tensor_parallel_size=2, all_reduce_csv=other)
    empty = _all_reduce(tmp_path, "h100_pairwise_nvlink", sizes=(), medians=())
    with pytest.raises(MeasuredTableError, match=r"all_reduce.csv: no rows \(only the header\)"):
        import_vidur(mlp, tensor_parallel_size=2, all_reduce_csv=empty)
    result = _cli(mlp, "--from", "vidur", "--tp", "2", "--all-reduce", empty, "--out", tmp_path / "out")
    assert result.exit_code == 2 and "no rows (only the header)" in result.output


def test_vidur_all_reduce_rows_of_nan_or_size_zero_are_dropped_and_counted(tmp_path):
    mlp = _write_mlp(tmp_path, _mlp(tp=2))
    ar = _all_reduce(tmp_path, "h100_pairwise_nvlink", sizes=(0, 1024, 2048), medians=(0.01, 0.02, math.nan))
    tables = import_vidur(mlp, tensor_parallel_size=2, all_reduce_csv=ar)
    # size 1024 fp16 elements = 2048 bytes, 0.02 ms.
    assert tables.tables["all_reduce"][["size_bytes", "time_s"]].values.tolist() == [[2048, pytest.approx(2e-5)]]
    assert tables.meta["dropped_rows"] == {"all_reduce.csv": 2}


# -- re-importing into a folder ------------------------------------------------------------------

def _two_tables(tmp_path) -> MeasuredTables:
    system = _aic_system(tmp_path / "src", _gemm([1, 2]))
    folder = system / "comm" / "vllm" / "0.19.0"
    folder.mkdir(parents=True)
    pd.DataFrame({"num_gpus": 2, "message_size": [1024], "backend": "vllm_graph", "allreduce_dtype": "bfloat16",
                  "latency": [0.01]}).to_parquet(folder / "custom_allreduce_perf.parquet")
    return import_aiconfigurator(system)


def test_reimport_removes_the_earlier_imports_tables(tmp_path):
    out = tmp_path / "out"
    _two_tables(tmp_path).save(out)
    assert sorted(p.name for p in out.iterdir()) == ["all_reduce.csv", "gemm.csv", "measured.json"]
    import_aiconfigurator(_aic_system(tmp_path / "one", _gemm([8]))).save(out)
    assert sorted(p.name for p in out.iterdir()) == ["gemm.csv", "measured.json"]
    assert MeasuredTables.load(out).tables["gemm"]["m"].tolist() == [8]
    _two_tables(tmp_path / "again").save(out, compress=True)
    assert sorted(p.name for p in out.iterdir()) == ["all_reduce.csv.gz", "gemm.csv.gz", "measured.json"]


def test_reimport_into_a_folder_of_the_users_is_refused(tmp_path):
    out = tmp_path / "out"
    _two_tables(tmp_path).save(out)
    (out / "notes.txt").write_text("mine\n")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(MeasuredTableError, match=r"out: holds notes.txt, which no earlier import wrote there"):
        import_aiconfigurator(_aic_system(tmp_path / "one", _gemm([8]))).save(out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    result = _cli(tmp_path / "one" / "h100_sxm", "--from", "aiconfigurator", "--out", out)
    assert result.exit_code == 2 and "holds notes.txt" in result.output
    # A sidecar that lists a file outside the folder's own tables: neither trusted nor deleted.
    (out / "notes.txt").unlink()
    meta = json.loads((out / "measured.json").read_text())
    meta["tables"]["gemm"]["file"] = "../victim.csv"
    (out / "measured.json").write_text(json.dumps(meta))
    (tmp_path / "victim.csv").write_text("keep\n")
    with pytest.raises(MeasuredTableError, match=r"holds gemm.csv, which no earlier import wrote"):
        import_aiconfigurator(_aic_system(tmp_path / "two", _gemm([8]))).save(out)
    assert (tmp_path / "victim.csv").read_text() == "keep\n"
    (out / "measured.json").write_text("{not json")
    with pytest.raises(MeasuredTableError, match=r"holds measured.json \(and 2 more\)"):
        import_aiconfigurator(_aic_system(tmp_path / "three", _gemm([8]))).save(out)


def test_a_bad_table_writes_nothing(tmp_path):
    tables = import_aiconfigurator(_aic_system(tmp_path, _gemm([1, 2])))
    tables.tables["gemm"].loc[1, "time_s"] = math.nan
    with pytest.raises(MeasuredTableError, match=r"table gemm \(to be written to .*gemm.csv\): column 'time_s'"):
        tables.save(tmp_path / "out")
    assert not (tmp_path / "out").exists()
