"""The real `sarathi-sim profile` and `sarathi-sim fit` on a tiny model in CI: they run within the
budget and write a valid profile, a fitted model and a report (no assertion on the live timings)."""
import json
import os

import numpy as np
import pytest
from typer.testing import CliRunner

from experiments.cli.main import app
from profiler.fitted import FittedCostModel
from profiler.profile_data import Profile, ProfileError

TINY = "profiler/data/models/tiny-llama"
BUDGET_S = 10


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("profile") / "tiny"
    result = CliRunner().invoke(app, ["profile", "--model", TINY, "--device", "cpu",
                                      "--budget-s", str(BUDGET_S), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_profile_writes_every_family_and_a_sidecar_within_budget(profiled):
    profile = Profile.load(profiled)
    meta = profile.meta
    assert set(profile.tables) == {"linear", "elementwise", "attention_prefill", "attention_decode", "cpu_overhead"}
    assert meta["elapsed_s"] <= BUDGET_S * 1.2  # the budget bounds the timing loop
    assert meta["model"]["hidden_size"] == 256 and meta["model"]["num_layers"] == 2
    assert meta["dtype"] == "float32" and meta["device"]["kind"] == "cpu" and meta["clock"] == ["thread_cpu_clock"]
    assert meta["attention_backend"] == "gpu_engine.attention.paged_attention_torch"
    assert meta["device"]["versions"]["torch"].startswith("2.")
    assert meta["rates"]["peak_flops"] > 1e8 and meta["rates"]["mem_bandwidth_bytes_per_s"] > 1e8
    assert set(profile.op_names) == {op.name for op in profile.catalogue.ops}  # level 0 reaches every op
    for table in profile.tables.values():
        assert (table["time_min_s"] <= table["time_median_s"]).all()
        assert (table["time_median_s"] <= table["time_max_s"]).all() and (table["time_min_s"] > 0).all()
    # What the budget left out is listed, shape by shape.
    timed = sum(len(t) for t in profile.tables.values())
    assert all(set(s) == {"op", "shape", "reason"} for s in meta["skipped"])
    assert timed + len(meta["skipped"]) >= 500


def test_fit_writes_model_and_report_and_the_model_reloads_identically(profiled):
    result = CliRunner().invoke(app, ["fit", str(profiled)])
    assert result.exit_code == 0, result.output
    report = json.loads((profiled / "fit_report.json").read_text())
    assert report["statistic"] == "median" and "qkv_proj" in report["fitted_ops"]
    assert (profiled / "fit_report.md").read_text().startswith("# Fit report")
    model = FittedCostModel.load(profiled / "cost_model.joblib")
    again = FittedCostModel.load(profiled / "cost_model.joblib")
    steps = [([1] * 8 + [100], [300] * 8 + [0], [False] * 8 + [True]), ([512], [1024], [True]), ([1], [5], [False])]
    for q, c, p in steps:
        args = (np.array(q), np.array(c), np.array(p))
        assert model.predict_step_s(*args) == again.predict_step_s(*args) > 0


def test_profile_and_fit_errors_exit_2_with_a_message(tmp_path):
    result = CliRunner().invoke(app, ["profile", "--model", "no-such-model", "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "unknown model" in result.output
    result = CliRunner().invoke(app, ["fit", str(tmp_path)])
    assert result.exit_code == 2 and "not a profile directory" in result.output
    with pytest.raises(ProfileError, match="not a profile directory"):
        Profile.load(tmp_path)


def test_cuda_path_is_wired_but_refused_without_a_gpu(tmp_path):
    """What a GPU run would use (not exercised here: no GPU in CI): CUDA events for kernels, the
    synchronised host clock for input preparation, the engine's Triton kernel, bf16, larger grids."""
    from profiler.harness import DTYPES, clock_for, run_profile
    from profiler.ops import OpCatalogue
    from profiler.shape_grid import default_limits
    from profiler.timing import cuda_event_clock, cuda_host_clock
    from profiler.torch_ops import attention_backend
    from profiler import get_model_spec

    os.environ.setdefault("TRITON_INTERPRET", "1")  # as the engine's kernel tests: no GPU here
    catalogue = OpCatalogue(get_model_spec("llama-3-8b"))
    assert clock_for(catalogue.op("qkv_proj"), "cuda", 1) is cuda_event_clock
    assert clock_for(catalogue.op("cpu_overhead"), "cuda", 1) is cuda_host_clock
    assert DTYPES["cuda"] == ("bfloat16", 2)
    assert default_limits(8192, "cuda").max_tokens == 8192 and default_limits(32768, "cuda").max_tokens == 16384
    assert attention_backend("cuda")[1] == "gpu_engine.triton_attention.paged_attention_triton"
    with pytest.raises(ValueError, match="no CUDA device"):
        run_profile(get_model_spec(TINY), "cuda", 5, tmp_path / "x")


def test_profile_that_timed_one_shape_exits_2_naming_the_directory_and_the_missing_ops(tmp_path, monkeypatch):
    # The budget reaches one shape only (issue 14: `profile` that timed 1 shape exited 0).
    import profiler.harness as harness

    real_grid = harness.shape_grid
    monkeypatch.setattr(harness, "shape_grid", lambda ops, limits, seed: [real_grid(ops, limits, seed)[0][:1]])
    out = tmp_path / "thin"
    result = CliRunner().invoke(app, ["profile", "--model", TINY, "--budget-s", "1", "--out", str(out)])
    assert result.exit_code == 2, result.output
    error = result.output.strip().splitlines()[-1]
    assert error.startswith(f"error: {out}: too few profiled shapes to fit a cost model (1 shape timed in all): "
                            "qkv_proj has 0, attention_prefill has 0, attention_decode has 0, o_proj has 0, "
                            "gate_up_proj has 0, down_proj has 0;")
    assert "wrote" not in result.output  # no success line
    # The directory keeps what was timed; `fit` refuses it the same way, writing nothing.
    assert Profile.load(out).tables["elementwise"]["op"].tolist() == ["embedding"]
    result = CliRunner().invoke(app, ["fit", str(out)])
    assert result.exit_code == 2 and "too few profiled shapes" in result.output
    assert not (out / "cost_model.joblib").exists()
