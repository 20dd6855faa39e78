"""`cost_model: profile:DIR | auto | roofline` in configs, and a simulated point priced by a profile."""
import shutil
import textwrap
from pathlib import Path

import pytest

from experiments.config import ConfigError, SweepConfig, load_config
from experiments.point import build_cost_model, run_point
from profiler import RooflineCostModel, get_model_spec
from profiler.fitted import FittedCostModel
from profiler.profile_data import ProfileError
from profiler.shipped import load_fitted, profile_dir_for, shipped_profile_dir

RECORDED = Path(__file__).parent / "data" / "profiles" / "cpu-tiny-llama"
TINY = str(Path("profiler/data/models/tiny-llama").resolve())


def config(tmp_path, cost_model: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(f"""
        model: {TINY}
        device: h100-sxm
        cost_model: {cost_model}
        trace: {{kind: poisson, qps: 20, num_requests: 40, prompt_tokens: [20, 300], output_tokens: [5, 30]}}
        engine: {{scheduler: sarathi, chunk_size: 256, max_num_seqs: 32}}
        """))
    return path


def test_profile_dir_config_prices_a_point_with_the_fitted_model(tmp_path):
    base, points = load_config(config(tmp_path, f"profile:{RECORDED}"))
    point = SweepConfig.model_validate(points[0])
    assert isinstance(build_cost_model(point), FittedCostModel)
    result = run_point(point)
    assert result.row["completed"] == 40
    # A decode step of the tiny model on this CPU takes milliseconds, not an H100's microseconds.
    assert result.steps["duration_s"].median() > 1e-3


def test_bad_profile_dir_is_a_config_error_naming_the_key(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(config(tmp_path, f"profile:{tmp_path / 'missing'}"))
    assert "cost_model" in str(info.value) and "not a profile directory" in str(info.value)
    with pytest.raises(ConfigError, match="auto, roofline, profile:DIR"):
        load_config(config(tmp_path, "vidur"))


def test_auto_uses_a_shipped_profile_only_when_present(tmp_path):
    assert shipped_profile_dir("h100-sxm", TINY, tmp_path) is None
    assert profile_dir_for("auto", "h100-sxm", TINY, tmp_path) is None
    shutil.copytree(RECORDED, tmp_path / "h100-sxm" / "tiny-llama")
    assert shipped_profile_dir("h100-sxm", TINY, tmp_path) == tmp_path / "h100-sxm" / "tiny-llama"
    assert profile_dir_for("roofline", "h100-sxm", TINY, tmp_path) is None
    # Nothing is shipped for the built-in models yet, so auto prices them with the roofline.
    base, points = load_config(config(tmp_path, "auto"))
    assert isinstance(build_cost_model(SweepConfig.model_validate({**points[0], "model": "llama-3-8b"})),
                      RooflineCostModel)


def test_a_profile_refuses_another_model_or_tp():
    with pytest.raises(ProfileError, match="shapes differ"):
        load_fitted(RECORDED, get_model_spec("llama-3-8b"))
    with pytest.raises(ProfileError, match="tensor_parallel_size 1"):
        load_fitted(RECORDED, get_model_spec(TINY), tensor_parallel_size=2)
