"""FittedCostModel on a recorded CPU profile of the tiny model (tests/data/profiles/cpu-tiny-llama,
taken with `sarathi-sim profile --model profiler/data/models/tiny-llama --device cpu --budget-s 900`
on the 2-core CI machine kind): fit quality on held-out shapes, step semantics, persistence."""
from pathlib import Path

import numpy as np
import pytest

from profiler import CostModel, get_model_spec
from profiler.fit_report import held_out_errors
from profiler.fitted import FittedCostModel
from profiler.profile_data import Profile

RECORDED = Path(__file__).parent / "data" / "profiles" / "cpu-tiny-llama"


@pytest.fixture(scope="module")
def profile() -> Profile:
    return Profile.load(RECORDED)


@pytest.fixture(scope="module")
def model(profile) -> FittedCostModel:
    return FittedCostModel.fit(profile)


def step(model, q, c, p):
    return model.predict_step_s(np.array(q), np.array(c), np.array(p, dtype=bool))


def test_every_op_predicts_held_out_shapes_within_10_percent(profile):
    errors = held_out_errors(profile).set_index("op")
    assert set(errors.index) == {op.name for op in profile.catalogue.ops}
    assert (errors["held_out"] >= 7).all()
    worst = errors["mape_pct"].idxmax()
    assert errors["mape_pct"].max() <= 10.0, f"{worst}: {errors.loc[worst, 'mape_pct']:.1f} %"


def test_step_is_the_sum_of_its_parts_and_grows_with_work(model):
    assert isinstance(model, CostModel)
    assert step(model, [], [], []) == 0.0
    decodes = ([1] * 16, [200] * 16, [False] * 16)
    parts = model.breakdown(*(np.array(a) for a in decodes))
    assert sum(parts.values()) == pytest.approx(step(model, *decodes), rel=1e-12)
    assert parts["attention_prefill_s"] == 0.0 and parts["attention_decode_s"] > 0
    hybrid = step(model, [1] * 16 + [256], [200] * 16 + [0], [False] * 16 + [True])
    assert hybrid > step(model, *decodes)
    assert step(model, [512], [0], [True]) > step(model, [64], [0], [True])
    assert step(model, [1] * 16, [1500] * 16, [False] * 16) > step(model, *decodes)
    one = model.breakdown(np.array([100]), np.array([40]), np.array([True]))["attention_prefill_s"]
    two = model.breakdown(np.array([100, 100]), np.array([40, 40]), np.array([True, True]))
    assert two["attention_prefill_s"] == pytest.approx(2 * one, rel=1e-12)  # scalar and array paths agree
    with pytest.raises(ValueError, match="must align"):
        model.breakdown(np.array([1, 2]), np.array([1]), np.array([True]))


def test_steps_beyond_the_profiled_range_are_counted(profile):
    model = FittedCostModel.fit(profile)
    largest = model.profiled_max["tokens"]
    step(model, [64], [0], [True])
    assert sum(model.out_of_range.values()) == 0
    far = step(model, [int(largest) * 4], [0], [True])
    assert model.out_of_range["tokens"] == 1 and model.num_predictions == 2
    assert far > 2 * step(model, [int(largest)], [0], [True])  # the roofline base keeps growing


def test_saved_model_reloads_and_predicts_identical_values(model, tmp_path):
    path = model.save(tmp_path / "cost_model.joblib")
    again = FittedCostModel.load(path)
    for q, c, p in [([1] * 8 + [100], [300] * 8 + [0], [False] * 8 + [True]), ([700], [900], [True])]:
        assert step(again, q, c, p) == step(model, q, c, p)
    assert again.regressors.keys() == model.regressors.keys()


def test_fit_transfers_to_another_model_through_the_roofline_features(model):
    wider = get_model_spec("profiler/data/models/tiny-llama")
    wider = type(wider)(**{**wider.__dict__, "name": "tiny-wide", "intermediate_size": 4 * 688})
    other = model.for_model(wider)
    assert other.catalogue.model.intermediate_size == 2752
    assert step(other, [256], [0], [True]) > step(model, [256], [0], [True])


def test_a_one_token_prefill_chunk_is_priced_as_a_decode():
    # A prompt's last token attends as a decode does (and the engine's attention batches it with
    # the decodes): the step costs what the same step of decodes costs, and no prefill call.
    from profiler.shipped import load_fitted

    fitted = load_fitted(Path(__file__).parent / "data" / "verify" / "profile")
    q, c = np.array([1, 1, 1]), np.array([40, 56, 20])
    as_prefill = fitted.predict_step_s(q, c, np.array([False, True, False]))
    assert as_prefill == fitted.predict_step_s(q, c, np.array([False, False, False]))
    assert fitted.breakdown(q, c, np.array([False, True, False]))["attention_prefill_s"] == 0.0
    two = fitted.breakdown(np.array([1, 2]), np.array([40, 56]), np.array([False, True]))
    assert two["attention_prefill_s"] > 0  # two tokens: a prefill call of its own


def thin_copy(tmp_path, keep: dict[str, int]) -> Path:
    """The recorded profile with only the first `keep[op]` shapes of some ops."""
    import shutil

    import pandas as pd

    directory = tmp_path / "thin"
    shutil.copytree(RECORDED, directory)
    for csv in directory.glob("*.csv"):
        table = pd.read_csv(csv)
        for op, n in keep.items():
            rows = table.index[table["op"] == op]
            table = table.drop(rows[n:])
        table.to_csv(csv, index=False)
    return directory


def test_fit_refuses_a_profile_with_too_few_shapes_and_writes_nothing(tmp_path):
    from profiler.fit_report import MODEL_FILE, REPORT_JSON, fit_directory
    from profiler.profile_data import ProfileError

    directory = thin_copy(tmp_path, {"attention_prefill": 1, "down_proj": 3})
    with pytest.raises(ProfileError) as info:
        fit_directory(directory)
    # Recorded: 59 shapes of each of 10 token ops, 72 prefill, 85 decode, 37 of each of 3 sequence
    # ops = 858 rows; kept: 858 - (72 - 1) - (59 - 3) = 731.
    assert str(info.value) == (
        f"{directory}: too few profiled shapes to fit a cost model (731 shapes timed in all): "
        "attention_prefill has 1, down_proj has 3; each of qkv_proj, o_proj, gate_up_proj, down_proj, "
        "attention_prefill, attention_decode needs at least 4. Profile again with a larger --budget-s "
        "(or import a table that covers them)")
    assert not (directory / MODEL_FILE).exists() and not (directory / REPORT_JSON).exists()


def test_fit_at_the_minimum_names_the_ops_that_fall_back(tmp_path):
    from profiler.fit_report import REPORT_JSON, fit_directory
    import json

    directory = thin_copy(tmp_path, {op: 4 for op in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj",
                                                      "attention_prefill", "attention_decode")}
                          | {"sampler": 3, "rotary_emb": 0})
    model, _ = fit_directory(directory)
    report = json.loads((directory / REPORT_JSON).read_text())
    assert report["fallback_ops"] == ["rotary_emb", "sampler"]  # catalogue order
    assert "attention_prefill" in model.regressors and "sampler" not in model.regressors
    assert "(rotary_emb, sampler)" in (directory / "fit_report.md").read_text()
