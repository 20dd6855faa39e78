"""Models whose attention or layers only the roofline prices (sliding windows, sinks, soft-capping,
MLA, dense layers among experts): `auto` becomes `roofline`; a `measured:` or `profile:` cost model
is refused naming only the features the model has (experiments.point.roofline_only_cost_model)."""
from __future__ import annotations

import pytest

from experiments.point import roofline_only_cost_model
from profiler.model_spec import get_model_spec


def test_auto_and_roofline_become_roofline_and_a_plain_model_keeps_its_cost_model():
    assert roofline_only_cost_model("auto", get_model_spec("gemma-3-27b")) == "roofline"
    assert roofline_only_cost_model("roofline", get_model_spec("deepseek-v3")) == "roofline"
    assert roofline_only_cost_model("measured:/x", get_model_spec("llama-3-8b")) == "measured:/x"


@pytest.mark.parametrize("name, features", [
    # deepseek-v3: MLA (kv_lora_rank 512), first 3 layers dense; no window, sinks or capping.
    ("deepseek-v3", "MLA (kv_lora_rank 512), 3 dense layers among its experts; "),
    # gpt-oss-20b: 12 of 24 layers windowed over 128 tokens, with attention sinks.
    ("gpt-oss-20b", "12 sliding-window layers (window 128), attention sinks; "),
])
def test_a_measured_cost_model_is_refused_naming_only_what_the_model_has(name, features):
    with pytest.raises(ValueError) as info:
        roofline_only_cost_model("measured:/tables", get_model_spec(name))
    assert str(info.value).startswith(f"cost_model measured:/tables: model {name!r} has {features}")
