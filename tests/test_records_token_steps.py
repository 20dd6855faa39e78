"""A request's token steps guessed at consecutive steps after its first token
(`RequestRecords._add_token_steps`), looked up where the guess is wrong, and TPOT from the flat
token times (`simulator.records._tpot_s`), by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.records import RequestRecords, _tpot_s, request_views, requests_table
from simulator.scheduler import FinishedRequest


def finished(request_id, times):
    return FinishedRequest(request_id=request_id, arrival_s=0.0, prompt_tokens=4, output_tokens=len(times),
                           finish_reason="completed", generated_tokens=len(times), first_scheduled_s=0.0,
                           first_token_s=times[0], completion_s=times[-1], token_times_s=list(times))


def test_steps_off_the_consecutive_guess_are_looked_up():
    records = RequestRecords()
    records.note_step_ends([0.5, 1.0, 1.5, 2.0, 2.5, 3.0])  # steps 0..5
    records.add([finished(0, [1.0, 1.5, 2.0]),          # every step: the guess holds
                 finished(1, [0.5, 0.5, 0.5, 1.0]),     # a speculative emission of 3, then one
                 finished(2, [0.5, 2.0, 2.5, 3.0]),     # paused (preempted) after its first token
                 finished(3, [3.0])])
    records.flush()
    steps = np.concatenate(list(records.token_steps.drain()))
    assert steps.tolist() == [1, 2, 3, 0, 0, 0, 1, 0, 3, 4, 5, 5]


def test_a_time_off_the_steps_after_a_good_first_token_is_an_error():
    records = RequestRecords()
    records.note_step_ends([0.1, 0.2, 0.3])
    records.add([finished(0, [0.1, 0.2, 0.35])])  # the guess (0.3) misses, and 0.35 is no step end
    with pytest.raises(RuntimeError, match="not the end of a step"):
        records.flush()


def test_a_token_after_the_last_step_noted_is_an_error():
    records = RequestRecords()
    records.note_step_ends([0.1, 0.2])
    records.add([finished(0, [0.1, 0.2, 0.3])])  # the guess runs past the steps (clipped, then missed)
    with pytest.raises(RuntimeError, match="not the end of a step"):
        records.flush()


def test_frame_times_and_tpot_by_hand():
    records = RequestRecords()
    records.note_step_ends([0.5, 1.0, 1.5, 2.5])
    records.add([finished(9, [1.0, 1.5, 2.5]), finished(4, [0.5])])
    frame = requests_table([records])
    assert frame["request_id"].tolist() == [4, 9]
    assert [t.tolist() for t in frame["token_times_s"]] == [[0.5], [1.0, 1.5, 2.5]]
    assert math.isnan(frame["tpot_s"][0]) and frame["tpot_s"][1] == 0.75  # (2.5 - 1.0) / 2


def test_tpot_is_the_same_float_as_the_python_formula():
    times = np.array([0.1, 0.3, 0.7, 2.0, 2.0, 5.0, 0.2, 0.2000001])
    lengths = np.array([3, 0, 1, 2, 2])  # [0.1, 0.3, 0.7], [], [2.0], [2.0, 5.0], [0.2, 0.2000001]
    got = _tpot_s(times, lengths)
    assert got[0] == (0.7 - 0.1) / 2 and got[3] == 3.0 and got[4] == (0.2000001 - 0.2) / 1
    assert math.isnan(got[1]) and math.isnan(got[2])


def test_request_views_cut_the_flat_values_in_order():
    views = request_views(np.arange(6.0), np.array([2, 0, 3, 1]))
    assert [v.tolist() for v in views] == [[0.0, 1.0], [], [2.0, 3.0, 4.0], [5.0]]
    assert request_views(np.empty(0), np.empty(0, dtype=np.int64)) == []
