"""Identical requests across points, and sustained throughput without the drain (issue 29, item 6)."""
from __future__ import annotations

import pandas as pd
import pytest

from experiments.planning.request_notes import identical_groups, identical_lines, sustained_throughput_rps


def _requests(point_id: int, ttft_s: list[float], completion_s: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"point_id": point_id, "request_id": range(len(ttft_s)), "arrival_s": [0.0, 1.0, 2.0, 3.0],
                         "ttft_s": ttft_s, "completion_s": completion_s, "generated_tokens": 10,
                         "finish_reason": "completed"})


def test_points_with_equal_requests_are_named_once():
    same = ([0.1, 0.1, 0.2, 0.1], [1.0, 2.5, 3.5, 9.0])
    requests = pd.concat([_requests(0, *same), _requests(1, [0.1, 0.1, 0.3, 0.1], same[1]), _requests(2, *same)])
    assert identical_groups(requests) == [[0, 2]]
    (line,) = identical_lines(requests, {0: "vllm_v1", 1: "sarathi chunk=256", 2: "sarathi"})
    assert line.startswith("Identical requests: vllm_v1, sarathi gave every request the same arrival")


def test_sustained_throughput_leaves_out_the_drain():
    # Arrivals 0..3 s; completions at 1, 2.5 and 3.5 and 9 s: two complete while requests arrive (≤ 3 s),
    # 2 / 3 s; over the makespan it would be 4 / 9 s.
    rate = sustained_throughput_rps(_requests(0, [0.1] * 4, [1.0, 2.5, 3.5, 9.0]))
    assert rate[0] == pytest.approx(2 / 3)
