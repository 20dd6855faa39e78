"""Which term of TTFT is off against a recording (experiments/verification/ttft_terms.py): hand values."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from experiments.verification.ttft_terms import term_verdict, ttft_terms


def _measured():
    # Two requests on the engine clock: queued 0 / 1 s, scheduled 0.01 / 1.03 s, first token
    # 0.05 / 1.10 s: TTFT 50 / 100 ms = queue 10 / 30 ms + after-scheduled 40 / 70 ms.
    return pd.DataFrame({"arrival_s": [0.0, 1.0], "scheduled_s": [0.01, 1.03], "first_token_s": [0.05, 1.10]})


def _simulated(first_token_s=(0.05, 1.06)):
    # Request order reversed in the frame: matched by request_id. Queues 10 / 30 ms as measured;
    # after-scheduled 40 / 30 ms, of which the step in flight 10 / 10 ms.
    return pd.DataFrame({"request_id": [1, 0], "arrival_s": [1.0, 0.0], "first_scheduled_s": [1.03, 0.01],
                         "first_token_s": [first_token_s[1], first_token_s[0]], "schedule_wait_s": [0.01, 0.01]})


def test_the_ttft_gap_is_split_between_the_terms_by_their_means():
    terms = ttft_terms(_measured(), _simulated()).set_index("metric")
    # mean TTFT measured 75 ms, simulated 55 ms: -20 ms, all of it after scheduling.
    assert terms.loc["ttft_s", "measured mean s"] == pytest.approx(0.075)
    assert terms.loc["ttft_s", "simulated mean s"] == pytest.approx(0.055)
    assert terms.loc["ttft_s", "mean diff ms"] == pytest.approx(-20.0)
    assert terms.loc["queue_s", "mean diff ms"] == pytest.approx(0.0, abs=1e-9)
    assert terms.loc["first_token_after_scheduled_s", "mean diff ms"] == pytest.approx(-20.0)
    # -20 ms of a measured mean TTFT of 75 ms; of a measured mean 55 ms after scheduling.
    assert terms.loc["first_token_after_scheduled_s", "mean diff % of measured TTFT"] == pytest.approx(-26.667, abs=1e-3)
    assert terms.loc["first_token_after_scheduled_s", "term error %"] == pytest.approx(-36.364, abs=1e-3)
    assert terms.loc["queue_s", "mean diff % of measured TTFT"] == pytest.approx(0.0, abs=1e-9)
    assert terms.loc["schedule_wait_s", "simulated mean s"] == pytest.approx(0.01)
    assert terms.loc["prefill_s", "simulated P50 s"] == pytest.approx(0.025)  # 30 and 20 ms
    assert math.isnan(terms.loc["prefill_s", "measured mean s"])
    verdict = term_verdict(terms.reset_index())
    assert "mean TTFT -20.0 ms (-26.7 %)" in verdict and verdict.endswith("first_token_after_scheduled_s")
    assert "first_token_after_scheduled_s -20.0 ms (-36.4 % of its own)" in verdict


def test_mismatched_request_counts_are_refused():
    with pytest.raises(ValueError, match="1 requests, the recording 2"):
        ttft_terms(_measured(), _simulated().iloc[:1])


def test_requests_without_a_first_token_are_left_out():
    terms = ttft_terms(_measured(), _simulated(first_token_s=(0.05, math.nan))).set_index("metric")
    assert terms.loc["ttft_s", "requests"] == 1
    assert terms.loc["ttft_s", "mean diff ms"] == pytest.approx(0.0, abs=1e-9)


def test_engine_intake_is_the_end_of_the_step_under_way_or_the_arrival_when_idle():
    from experiments.verification.ttft_terms import engine_intake_s

    steps = pd.DataFrame({"replica_id": [0, 0, 1], "start_s": [0.0, 0.1, 0.05], "duration_s": [0.1, 0.1, 0.1]})
    sim = pd.DataFrame({"request_id": [4, 3, 2, 1, 0], "replica_id": [1, 1, 0, 0, 0],
                        "arrival_s": [0.06, 0.0, 0.1, 0.25, 0.05]})
    # 0: mid-step on replica 0 -> 0.1; 1: replica 0 idle -> 0.25; 2: at a step's start -> its end 0.2;
    # 3: replica 1 idle until 0.05 -> 0.0; 4: replica 1 mid-step -> 0.15
    assert engine_intake_s(sim, steps).tolist() == pytest.approx([0.1, 0.25, 0.2, 0.0, 0.15])


def test_a_request_in_the_step_starting_at_its_arrival_was_taken_in_at_its_arrival():
    """A lone request on an idle replica: its own first step starts at its arrival (0.0, to 0.3637);
    its intake is 0.0, not that step's end (which gave queue_s -0.3637 s from the intake on a
    one-request recording). Another arriving at 0.0 but scheduled only at 0.3637 still waits."""
    from experiments.verification.ttft_terms import engine_intake_s

    steps = pd.DataFrame({"replica_id": [0, 0], "start_s": [0.0, 0.3637], "duration_s": [0.3637, 0.07]})
    sim = pd.DataFrame({"request_id": [0, 1], "replica_id": [0, 0], "arrival_s": [0.0, 0.0],
                        "first_scheduled_s": [0.0, 0.3637]})
    assert engine_intake_s(sim, steps).tolist() == pytest.approx([0.0, 0.3637])


def test_behind_a_front_end_the_intake_starts_from_the_engine_arrival():
    """A request sent at 0.0 reaches the engine core at 0.0125 (frontend_in_s), inside the step
    [0.0, 0.1): taken in at 0.1; one reaching it at 0.15 on the idle replica: at 0.15. From their
    client arrivals (-0.0125, before any step; 0.14) they were taken in 25 and 10 ms too early."""
    from experiments.verification.ttft_terms import engine_intake_s

    steps = pd.DataFrame({"replica_id": [0], "start_s": [0.0], "duration_s": [0.1]})
    sim = pd.DataFrame({"request_id": [0, 1], "replica_id": [0, 0], "arrival_s": [-0.0125, 0.14],
                        "engine_arrival_s": [0.0125, 0.15], "first_scheduled_s": [0.1, 0.15]})
    assert engine_intake_s(sim, steps).tolist() == pytest.approx([0.1, 0.15])


def test_lockstep_ranks_take_requests_in_at_the_groups_step_ends():
    from experiments.verification.ttft_terms import engine_intake_s

    # The group steps [0, 0.1) (both ranks' rows) and [0.1, 0.2) (rank 0 only; rank 1 runs a dummy batch).
    steps = pd.DataFrame({"replica_id": [0, 1, 0], "start_s": [0.0, 0.0, 0.1], "duration_s": [0.1, 0.1, 0.1]})
    sim = pd.DataFrame({"request_id": [0], "replica_id": [1], "arrival_s": [0.15]})
    assert engine_intake_s(sim, steps, lockstep=True).tolist() == pytest.approx([0.2])
    assert engine_intake_s(sim, steps, lockstep=False).tolist() == pytest.approx([0.15])


def test_terms_from_the_intake():
    # The simulated requests taken in 5 ms after their replayed arrivals: TTFT from intake 45 / 55 ms.
    terms = ttft_terms(_measured(), _simulated(), intake_s=[0.005, 1.005]).set_index("metric")
    assert terms.loc["ttft_s from intake", "simulated mean s"] == pytest.approx(0.05)
    assert terms.loc["ttft_s from intake", "measured mean s"] == pytest.approx(0.075)
    assert terms.loc["queue_s from intake", "simulated P50 s"] == pytest.approx(0.015)  # 5 and 25 ms
    verdict = term_verdict(terms.reset_index())
    assert verdict.endswith("from the engine's intake (where vLLM stamps queued_ts): TTFT P50 -33.3 %, mean -33.3 %")


def test_a_frame_from_the_intake_and_its_summary():
    from experiments.verification.ttft_terms import from_intake, with_latencies_of

    sim = pd.DataFrame({"request_id": [1, 0], "arrival_s": [1.0, 0.0], "first_scheduled_s": [1.03, 0.01],
                        "first_token_s": [1.06, 0.05], "completion_s": [2.0, 1.0]})
    aligned = from_intake(sim, [0.005, 1.01])  # request_id order
    assert aligned["replayed_arrival_s"].tolist() == [0.0, 1.0]
    assert aligned["ttft_s"].tolist() == pytest.approx([0.045, 0.05])
    assert aligned["e2e_s"].tolist() == pytest.approx([0.995, 0.99])
    assert aligned["scheduling_delay_s"].tolist() == pytest.approx([0.005, 0.02])
    summary = with_latencies_of({"ttft_s_p50": 9.0, "tpot_s_p50": 0.1}, aligned)
    assert summary["ttft_s_p50"] == pytest.approx(0.0475) and summary["tpot_s_p50"] == 0.1
