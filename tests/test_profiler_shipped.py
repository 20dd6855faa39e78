"""`cost_model: profile:DIR | auto | roofline` in configs, and a simulated point priced by a profile."""
import shutil
import textwrap
from pathlib import Path

import pytest

from experiments.config import ConfigError, SweepConfig, load_config
from experiments.point import build_cost_model, run_point
from profiler import get_model_spec
from profiler.fitted import FittedCostModel
from profiler.profile_data import ProfileError
from profiler.shipped import load_fitted, profile_dir_for, shipped_profile_dir

RECORDED = Path(__file__).parent / "data" / "profiles" / "cpu-tiny-llama"
TINY = str(Path("profiler/data/models/tiny-llama").resolve())
# The host as a device named cpu, inline (as tests/data/engine/tiny_engine.yaml describes it).
CPU = ("{name: cpu, memory_gib: 23.5, dense_bf16_tflops: 0.0688, memory_bandwidth_gb_per_s: 12.4, "
       "gpu_link: {kind: pcie, gb_per_s_per_direction: 12.4}, host_link: {gb_per_s_per_direction: 12.4}}")


def config(tmp_path, cost_model: str, device: str = CPU) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(f"""
        model: {TINY}
        device: {device}
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
    # No profile directory is shipped for the built-in models, so auto does not price them with a
    # fitted profile (it uses the shipped kernel tables or the roofline: profiler.measured).
    base, points = load_config(config(tmp_path, "auto", "h100-sxm"))
    assert not isinstance(build_cost_model(SweepConfig.model_validate({**points[0], "model": "llama-3-8b"})),
                          FittedCostModel)


def test_a_profile_refuses_another_model_or_tp():
    with pytest.raises(ProfileError, match="shapes differ"):
        load_fitted(RECORDED, get_model_spec("llama-3-8b"))
    with pytest.raises(ProfileError, match="tensor_parallel_size 1"):
        load_fitted(RECORDED, get_model_spec(TINY), tensor_parallel_size=2)


def points_of(path: Path) -> SweepConfig:
    return SweepConfig.model_validate(load_config(path)[1][0])


def unchecked(tmp_path, cost_model: str, device: str = CPU) -> SweepConfig:
    """A point priced by `cost_model` that the config check would refuse (it checks the profile
    when the config loads): loaded on the roofline, the cost model set after validation, so the
    check where the cost model is built is tested too."""
    return points_of(config(tmp_path, "roofline", device)).model_copy(update={"cost_model": cost_model})


def test_a_cpu_profile_does_not_price_a_gpu(tmp_path):
    # Issue 14: a CPU profile priced an H100 (P99 TBT 159 s, exit 0). Refused, both devices named.
    point = unchecked(tmp_path, f"profile:{RECORDED}", "h100-sxm")
    expected = (f"{RECORDED}: measured on 'cpu' (AMD EPYC, cpu; profile.json device), but the point prices "
                "device 'h100-sxm': a profile prices only the device it was measured on; a CPU profile prices "
                "the CPU engine: give device: a device file with name: cpu describing the host (as "
                "tests/data/engine/tiny_engine.yaml does), or use a profile measured on 'h100-sxm'")
    for build in (build_cost_model, run_point):
        with pytest.raises(ProfileError) as info:
            build(point)
        assert str(info.value) == expected
    with pytest.raises(ConfigError) as info:  # and refused when the config loads, before any point runs
        load_config(config(tmp_path, f"profile:{RECORDED}", "h100-sxm"))
    assert str(info.value) == f"{tmp_path / 'c.yaml'}: cost_model (line 4): {expected}"


def gpu_profile(tmp_path, spec_name, name: str) -> Path:
    """The recorded profile relabelled as measured on a GPU (spec_name: its built-in key or None)."""
    import json

    directory = tmp_path / "gpu-profile"
    shutil.copytree(RECORDED, directory)
    sidecar = directory / "profile.json"
    meta = json.loads(sidecar.read_text())
    meta["device"].update(kind="cuda", name=name, spec_name=spec_name)
    sidecar.write_text(json.dumps(meta))
    return directory


def test_a_gpu_profile_prices_only_its_own_gpu(tmp_path):
    directory = gpu_profile(tmp_path, "h100-sxm", "NVIDIA H100 80GB HBM3")
    assert isinstance(build_cost_model(points_of(config(tmp_path, f"profile:{directory}", "h100-sxm"))),
                      FittedCostModel)
    with pytest.raises(ProfileError) as info:
        build_cost_model(unchecked(tmp_path, f"profile:{directory}", "a100-80gb"))
    assert str(info.value) == (
        f"{directory}: measured on 'h100-sxm' (NVIDIA H100 80GB HBM3, cuda; profile.json device), but the "
        "point prices device 'a100-80gb': a profile prices only the device it was measured on; set device: "
        "h100-sxm, or use a profile measured on 'a100-80gb'")


def test_a_gpu_without_a_builtin_name_matches_a_device_described_under_its_name(tmp_path):
    directory = gpu_profile(tmp_path, None, "NVIDIA RTX 6000 Ada Generation")
    with pytest.raises(ProfileError, match=r"measured on 'NVIDIA RTX 6000 Ada Generation' \(NVIDIA RTX 6000 Ada "
                                           r"Generation, cuda; .*set device: a device file named "
                                           r"'NVIDIA RTX 6000 Ada Generation'"):
        build_cost_model(unchecked(tmp_path, f"profile:{directory}", "l40s"))
    described = CPU.replace("name: cpu", "name: NVIDIA RTX 6000 Ada Generation")
    assert isinstance(build_cost_model(points_of(config(tmp_path, f"profile:{directory}", described))),
                      FittedCostModel)


def test_auto_refuses_a_shipped_profile_of_another_device(tmp_path, monkeypatch):
    # A profile filed under profiler/data/h100-sxm/ that was measured on a CPU is refused too.
    import profiler.shipped as shipped

    shutil.copytree(RECORDED, tmp_path / "data" / "h100-sxm" / "tiny-llama")
    monkeypatch.setattr(shipped, "DATA_DIR", tmp_path / "data")
    monkeypatch.setattr(shipped.profile_dir_for, "__defaults__", (tmp_path / "data",))
    with pytest.raises(ProfileError, match=r"measured on 'cpu' .* prices device 'h100-sxm'"):
        build_cost_model(points_of(config(tmp_path, "auto", "h100-sxm")))


def test_a_profile_too_thin_to_fit_is_refused_for_a_point(tmp_path):
    import pandas as pd

    directory = tmp_path / "thin"
    shutil.copytree(RECORDED, directory)
    table = pd.read_csv(directory / "attention_decode.csv")
    table.head(2).to_csv(directory / "attention_decode.csv", index=False)
    with pytest.raises(ProfileError, match=rf"^{directory}: too few profiled shapes .*: attention_decode has 2;"):
        build_cost_model(unchecked(tmp_path, f"profile:{directory}"))


@pytest.mark.parametrize("edit, match", [
    (lambda meta: {**meta, "model": {**meta["model"], "num_experts": 8}}, r"model: not a model spec \(.*num_experts"),
    (lambda meta: {**meta, "model": {**meta["model"], "hidden_size": 0}}, r"model: not a model spec \(.*hidden_size"),
    (lambda meta: [meta], r"must hold a JSON object, got list"),
])
def test_a_bad_sidecar_is_a_profile_error_naming_it(tmp_path, edit, match):
    import json

    from profiler.profile_data import Profile

    directory = tmp_path / "bad"
    shutil.copytree(RECORDED, directory)
    sidecar = directory / "profile.json"
    sidecar.write_text(json.dumps(edit(json.loads(sidecar.read_text()))))
    with pytest.raises(ProfileError, match=rf"^{sidecar}: {match}"):
        Profile.load(directory)
    sidecar.write_text("{truncated")
    with pytest.raises(ProfileError, match=rf"^{sidecar}: not readable JSON"):
        Profile.load(directory)


def test_checked_profile_refuses_without_fitting(tmp_path, monkeypatch):
    # The checks a point needs, cheap enough for a config check before any point runs.
    from profiler.fitted import FittedCostModel as Fitted
    from profiler.shipped import checked_profile

    monkeypatch.setattr(Fitted, "fit", classmethod(lambda cls, *a, **k: pytest.fail("fitted")))
    assert checked_profile(RECORDED, get_model_spec(TINY), 1, "cpu").meta["device"]["kind"] == "cpu"
    with pytest.raises(ProfileError, match="prices device 'h100-sxm'"):
        checked_profile(RECORDED, get_model_spec(TINY), 1, "h100-sxm")


class _Planted:
    """Unpickling this creates a file: what a crafted cost_model.joblib could do."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_a_profile_folders_joblib_is_never_unpickled(tmp_path):
    """`profile:DIR` fits in memory from the CSVs (deterministic, ~0.2 s); a cost_model.joblib in
    a folder others can write is not loaded, so a crafted one runs nothing."""
    import joblib

    from profiler.fit_report import MODEL_FILE
    from profiler.fitted import FittedCostModel
    from profiler.shipped import load_fitted

    directory = tmp_path / "profile"
    shutil.copytree(Path(__file__).parent / "data" / "verify" / "profile", directory)
    marker = tmp_path / "ran"
    joblib.dump(_Planted(marker), directory / MODEL_FILE)
    fitted = load_fitted(directory)
    assert isinstance(fitted, FittedCostModel) and not marker.exists()
