"""The closed-loop workload (traces/closed_loop.py): clients, think time, seeding, limits."""
from __future__ import annotations

import pytest

from traces import ClosedLoopWorkload


def test_each_client_starts_at_zero_and_sends_again_after_think_time():
    workload = ClosedLoopWorkload(num_clients=3, think_time_s=0.5, prompt=100, output=(10, 20), num_requests=5)
    first = workload.initial_requests()
    assert [(r.request_id, r.arrival_s, r.prompt_tokens) for r in first] == [(0, 0.0, 100), (1, 0.0, 100), (2, 0.0, 100)]
    assert [workload.client_of(i) for i in range(3)] == [0, 1, 2]
    again = workload.next_request(1, now_s=2.25)
    assert (again.request_id, again.arrival_s) == (3, 2.75)
    assert workload.client_of(3) == 1
    assert workload.next_request(0, now_s=3.0).request_id == 4
    assert workload.next_request(2, now_s=3.5) is None  # 5 issued: the loop is done
    assert workload.num_issued == 5


def test_lengths_follow_issue_order_whatever_the_timing():
    def lengths(order):
        workload = ClosedLoopWorkload(2, prompt={"dist": "lognormal", "mean": 500, "std": 200}, output=(1, 300),
                                      num_requests=6, seed=9)
        issued = workload.initial_requests()
        issued += [workload.next_request(client, now_s) for client, now_s in order]
        return [(r.request_id, r.prompt_tokens, r.output_tokens) for r in issued]

    fast_client_0 = lengths([(0, 1.0), (0, 2.0), (0, 3.0), (1, 9.0)])
    fast_client_1 = lengths([(1, 0.5), (0, 4.0), (1, 5.0), (0, 6.0)])
    assert fast_client_0 == fast_client_1
    assert len({p for _, p, _ in fast_client_0}) > 1  # really drawn, not constant


def test_fewer_requests_than_clients_and_the_single_start():
    workload = ClosedLoopWorkload(num_clients=32, num_requests=3)
    assert len(workload.initial_requests()) == 3
    with pytest.raises(ValueError, match="already started"):
        workload.initial_requests()


@pytest.mark.parametrize("kwargs, message", [
    ({"num_clients": 0}, "num_clients must be >= 1"),
    ({"num_clients": 2, "think_time_s": -1.0}, "think_time_s must be a number of seconds from 0 to 1e9"),
    ({"num_clients": 2, "think_time_s": float("inf")}, "think_time_s must be a number of seconds from 0 to 1e9"),
    ({"num_clients": 2, "think_time_s": 2e9}, r"from 0 to 1e9 \(31.7 years, the longest a trace may span\), got 2000000000.0"),
    ({"num_clients": 2, "prompt": 0}, "tokens must be a whole number of tokens >= 1"),
    ({"num_clients": 2, "num_requests": -5}, "num_requests must be an int >= 0"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ClosedLoopWorkload(**kwargs)


def test_next_request_checks_client_and_time():
    workload = ClosedLoopWorkload(num_clients=2, num_requests=10)
    workload.initial_requests()
    with pytest.raises(ValueError, match=r"client_id must be an int in 0..1, got 2"):
        workload.next_request(2, 1.0)
    with pytest.raises(ValueError, match="now_s must be a finite time"):
        workload.next_request(0, float("nan"))
