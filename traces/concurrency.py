"""Concurrency-limited clients as benchmark tools run them: a send schedule capped at N requests
in flight, and N closed-loop streams started one after another.

Each tool's rule (read in its source):

- `vllm bench serve --max-concurrency N` (vllm-project/vllm 009e6d4, `vllm/benchmarks/serve.py`
  `benchmark`): the send schedule (`get_request`: rate, burstiness, ramp-up) creates a task per
  request on time; each task waits on an `asyncio.Semaphore(N)` and only then sends, taking its
  start time inside the request function, so TTFT and E2E exclude the wait
  (`client_queue_time` is kept apart). Request i is sent at max(t_i, the time a slot frees for
  it): `ScheduledConcurrency`. With `--request-rate inf` every t_i is 0: a closed loop of N.
  `--num-warmups K` sends K copies of the first prompt before the timed run (excluded).
- GuideLLM `concurrent@N` (vllm-project/guidellm, `src/guidellm/scheduler/strategies.py`
  `ConcurrentStrategy`): N streams, each sending its next request when the previous completes;
  with `rampup_duration` R the first requests start at R × k / N (k = 1 .. N - 1; the N-th at
  the start), a stagger of R / N: `staggered_starts_s` with the same set of start times.
  `throughput` with `max_concurrency` is the same cap over an unlimited rate.
- inference-perf `concurrent` stages (kubernetes-sigs/inference-perf 7de5ef2,
  `inference_perf/loadgen/load_generator.py`): `num_requests` at `concurrency_level`, the
  level split across worker processes as per-worker semaphores over a `constant` timer at
  rate num_requests / 1 s: in effect all are scheduled within the first second and the
  semaphores cap them, a closed loop of N (its per-worker split is not modelled).
- AIPerf `--concurrency N` (ai-dynamo/aiperf db4f639, `aiperf/common/config/loadgen_config.py`):
  N in flight; with `--request-rate` too, the rate's schedule capped at N, as vLLM's.
  `--warmup-request-count K` sends K requests before the profiling phase (excluded).
"""
from __future__ import annotations

import numpy as np

from traces.arrivals import check_count
from traces.closed_loop import ClosedLoopWorkload
from traces.request import Request


class ScheduledConcurrency(ClosedLoopWorkload):
    """Requests sent on a schedule, at most `num_clients` in flight (`vllm bench --max-concurrency`).

    Request i (in schedule order) is sent at max(schedule_s[i], the time the previous holder of
    its slot completed): the first N at their scheduled times, then each completion releases the
    next request, sent then or at its scheduled time, whichever is later. Slots are claimed in
    request order as completions come, which is the FIFO semaphore's order. A schedule need not
    be sorted: times (0.5, 1.0, 0, 0) with N = 2 are two streams started at 0.5 and 1.0 s whose
    next requests go as soon as a slot frees (GuideLLM's ramped `concurrent`).

    Args:
        requests: the requests in send order, `arrival_s` their scheduled send times, ids
            0..n-1; their lengths and prefix ids are kept.
        num_clients: N, >= 1.

    Raises:
        ValueError: N < 1, or ids not 0..n-1 in order.
    """

    def __init__(self, requests: list[Request], num_clients: int) -> None:
        check_count(num_clients, "num_clients")
        if num_clients < 1:
            raise ValueError("num_clients (max concurrency) must be >= 1")
        if any(r.request_id != i for i, r in enumerate(requests)):
            raise ValueError("the scheduled requests must be numbered 0..n-1 in schedule order")
        self.num_clients = num_clients
        self.think_time_s = 0.0
        self.num_requests = len(requests)
        self.seed = 0
        self._scheduled = requests
        self._client_of: list[int] = []

    def initial_requests(self) -> list[Request]:
        """The first min(N, n) requests, each at its scheduled time (raises if already started)."""
        if self.num_issued:
            raise ValueError(f"the closed loop has already started ({self.num_issued} requests issued)")
        return [self._issue(client, self._scheduled[client].arrival_s) for client in range(min(self.num_clients,
                                                                                               self.num_requests))]

    def _issue(self, client_id: int, arrival_s: float) -> Request:
        request = self._scheduled[self.num_issued]
        self._client_of.append(client_id)
        if arrival_s == request.arrival_s:
            return request
        return Request(request.request_id, float(arrival_s), request.prompt_tokens, request.output_tokens,
                       request.priority, request.prefix_hash_ids, request.prefix_block_tokens)

    def next_request(self, client_id: int, now_s: float) -> Request | None:
        """The next scheduled request, sent at max(its time, now_s) by the slot `client_id` freed."""
        if self.num_issued >= self.num_requests:
            return None
        scheduled_s = self._scheduled[self.num_issued].arrival_s
        return self._issue(int(client_id), max(scheduled_s, float(now_s)))


def staggered_starts_s(num_clients: int, rampup_s: float) -> np.ndarray:
    """Start time of each of N closed-loop streams ramped up over `rampup_s` seconds: stream k at
    k × rampup_s / N (k = 0 .. N - 1), shape (N,): GuideLLM's `rampup_duration` start times (module
    docstring). rampup_s = 0: all at 0 s.

    Raises:
        ValueError: N < 1 or rampup_s < 0 or not finite.
    """
    check_count(num_clients, "num_clients")
    if num_clients < 1:
        raise ValueError("num_clients must be >= 1")
    if not (np.isfinite(rampup_s) and rampup_s >= 0):
        raise ValueError(f"rampup_s must be a finite number of seconds >= 0, got {rampup_s!r}")
    return np.arange(num_clients, dtype=float) * (rampup_s / num_clients)


class StaggeredClosedLoop(ClosedLoopWorkload):
    """A closed loop of N clients whose first requests start at `staggered_starts_s(N, rampup_s)`
    instead of all at 0 s (GuideLLM `concurrent` with `rampup_duration`); otherwise
    `ClosedLoopWorkload` (same lengths for a seed, next request `think_time_s` after a completion).
    A stagger breaks the lockstep in which clients of fixed lengths started together stay.

    Raises:
        ValueError: as `ClosedLoopWorkload`, or a bad rampup_s.
    """

    def __init__(self, num_clients: int, rampup_s: float, **kwargs) -> None:
        super().__init__(num_clients, **kwargs)
        self.starts_s = staggered_starts_s(num_clients, rampup_s)

    def initial_requests(self) -> list[Request]:
        """Client k's first request at its start time (raises if already started)."""
        if self.num_issued:
            raise ValueError(f"the closed loop has already started ({self.num_issued} requests issued)")
        return [self._issue(client_id, float(self.starts_s[client_id]))
                for client_id in range(min(self.num_clients, self.num_requests))]
