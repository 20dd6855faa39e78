"""`trace: {kind: stages}`, `trace.prompts`, `max_concurrency` and `rampup_s` in configs, and the
per-stage columns of a row."""
from __future__ import annotations

import numpy as np
import pytest

from experiments.config import ConfigError, SweepConfig, load_config
from experiments.point import run_point

ENGINE = {"scheduler": "vllm_v1", "chunk_size": 512}
TWO_STAGES = {"kind": "stages", "arrival": "constant", "prompt_tokens": 64, "output_tokens": 8,
              "stages": [{"rate": 2, "duration_s": 3}, {"rate": 4, "duration_s": 1}]}


def test_a_two_stage_constant_profile_and_its_stage_columns():
    result = run_point(SweepConfig(trace=TWO_STAGES, engine=ENGINE))
    arrivals = result.requests.sort_values("request_id")["arrival_s"].tolist()
    assert arrivals == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.25, 3.5, 3.75]
    row = result.row
    assert (row["stage0_requests"], row["stage1_requests"]) == (6, 4)
    assert (row["stage0_offered_qps"], row["stage1_offered_qps"]) == (2.0, 4.0)
    assert row["stage0_completed"] == 6 and row["stage0_output_throughput_tps"] == 6 * 8 / 3
    assert row["stage1_ttft_s_p50"] > 0 and row["trace_source"] == "stages 2 (constant)"


def test_a_pool_in_a_stages_trace_hits_as_computed_by_hand():
    # 2 groups x 2 prompts of 32 system + 16 question tokens (48), 1 req/s: the first 4 hit their
    # group's 2 system blocks (32) but each group's first (0); repeats hit (48 - 1) // 16 = 2 blocks.
    trace = {"kind": "stages", "arrival": "constant", "output_tokens": 4, "stages": [{"rate": 1, "duration_s": 8}],
             "prompts": {"groups": 2, "per_group": 2, "system_tokens": 32, "question_tokens": 16}}
    result = run_point(SweepConfig(trace=trace, engine={**ENGINE, "enable_prefix_caching": True}))
    cached = result.requests.sort_values("request_id")["cached_tokens"].tolist()
    assert cached == [0, 32, 0, 32] + [32] * 4


def test_max_concurrency_and_rampup_in_configs():
    capped = SweepConfig(trace={"kind": "synthetic", "qps": 1000, "num_requests": 6, "arrival": "constant",
                                "prompt_tokens": 16, "output_tokens": 3, "max_concurrency": 2}, engine=ENGINE)
    arrivals = run_point(capped).requests.sort_values("request_id")["arrival_s"].to_numpy()
    assert arrivals[0] == 0.0 and arrivals[1] == pytest.approx(0.001)
    assert (np.diff(arrivals[2:]) >= 0).all() and arrivals[2] > 0.002  # sent when a slot frees, not at 2 ms
    ramped = SweepConfig(trace={"kind": "closed_loop", "clients": 4, "rampup_s": 2.0, "num_requests": 8,
                                "prompt_tokens": 16, "output_tokens": 3}, engine=ENGINE)
    first = run_point(ramped).requests.sort_values("request_id")["arrival_s"].tolist()[:4]
    assert first == [0.0, 0.5, 1.0, 1.5]  # each client's first request (ids 0..3, issued first)


@pytest.mark.parametrize("trace, message", [
    ({**TWO_STAGES, "stages": [{"rate": 2, "duration_s": 0}]}, r"trace\.stages\.0\.duration_s \(line \d+\): Input should be greater than 0"),
    ({**TWO_STAGES, "stages": []}, "at least 1 item"),
    ({**TWO_STAGES, "stages": [{"rate": 2, "duration_s": 3, "burstiness": 2}]}, r"stages\[0\]: burstiness applies"),
    ({**TWO_STAGES, "prompts": {"groups": 4, "per_group": 4}}, "leave out trace.prompt_tokens"),
    ({"kind": "stages", "stages": [{"rate": 1, "duration_s": 10}], "prompts": {"groups": 4, "per_group": 4}},
     "holds 16 prompts but the trace sends about 10 requests"),
    ({"kind": "synthetic", "qps": 1, "num_requests": 5, "prompts": {"groups": 1, "per_group": 2, "order": "sorted"}},
     "order"),
    ({"kind": "sessions", "clients": 2, "turns": 2, "rampup_s": 1.0}, "session_qps, not rampup_s"),
])
def test_bad_staged_and_pooled_traces_are_config_errors(tmp_path, trace, message):
    import yaml
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"trace": trace, "engine": ENGINE}))
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_a_search_over_a_staged_trace_is_refused(tmp_path):
    import yaml
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"trace": TWO_STAGES, "engine": ENGINE, "slo": {"ttft_p90_s": 1.0},
                                    "search": {"qps": [1, 10]}}))
    with pytest.raises(ConfigError, match="a staged trace sets each stage's rate"):
        load_config(path)
