"""Closed-loop load: a fixed number of clients, each sending its next request when one completes.

Unlike an open-loop arrival process, arrival times depend on how fast requests are served, so
the simulator drives this workload: it starts `initial_requests()` at 0 s and, each time a
request finishes at time t, asks `next_request(client_of(request_id), t)` for that client's next
one (arriving at t + think_time_s). This is the "N concurrent requests" load of benchmarks such
as `vllm bench serve --max-concurrency N` with a saturating request rate.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from traces.arrivals import check_count
from traces.length_distributions import length_distribution, sample_lengths
from traces.request import Request
from traces.time_bounds import MAX_SPAN_S, short_number


class ClosedLoopWorkload:
    """`num_clients` clients issuing `num_requests` requests in all, one outstanding per client.

    Lengths are drawn up front, in issue order, from `numpy.random.default_rng(seed)` (one
    `sample_lengths` call for all requests), so the k-th request issued has the same lengths for
    a seed whatever the timings; request ids are 0..num_requests-1 in issue order.

    Args:
        num_clients: concurrent clients, >= 1.
        think_time_s: seconds between a client's completion and its next request, 0 to MAX_SPAN_S.
        prompt, output: length specs (`traces.length_distributions.length_distribution`).
        num_requests: requests issued in all, >= 0; then `next_request` returns None.
        seed: seeds the length draws.

    Raises:
        ValueError: a bad count, think time or length spec.
    """

    def __init__(
        self,
        num_clients: int,
        think_time_s: float = 0.0,
        prompt: Any = 512,
        output: Any = 128,
        num_requests: int = 2048,
        seed: int = 0,
    ) -> None:
        check_count(num_clients, "num_clients")
        if num_clients < 1:
            raise ValueError("num_clients must be >= 1")
        if isinstance(think_time_s, bool) or not (math.isfinite(think_time_s) and 0 <= think_time_s <= MAX_SPAN_S):
            raise ValueError(f"think_time_s must be a number of seconds from 0 to {short_number(MAX_SPAN_S)} "
                             f"(31.7 years, the longest a trace may span), got {think_time_s!r}")
        check_count(num_requests)
        self.num_clients = num_clients
        self.think_time_s = float(think_time_s)
        self.num_requests = num_requests
        self.seed = seed
        prompt_dist, output_dist = length_distribution(prompt, "prompt"), length_distribution(output, "output")
        self._prompt_tokens, self._output_tokens = sample_lengths(
            prompt_dist, output_dist, num_requests, np.random.default_rng(seed)
        )
        self._client_of: list[int] = []  # request id -> client, in issue order

    @property
    def num_issued(self) -> int:
        """Requests handed out so far."""
        return len(self._client_of)

    def initial_requests(self) -> list[Request]:
        """Each client's first request, all arriving at 0.0 s (fewer if num_requests < num_clients).

        Raises:
            ValueError: requests were already issued (the loop starts once).
        """
        if self.num_issued:
            raise ValueError(f"the closed loop has already started ({self.num_issued} requests issued)")
        return [self._issue(client_id, 0.0) for client_id in range(min(self.num_clients, self.num_requests))]

    def next_request(self, client_id: int, now_s: float) -> Request | None:
        """The request `client_id` sends after its previous one completed at `now_s` seconds.

        It arrives at now_s + think_time_s. Returns None once num_requests have been issued.

        Raises:
            ValueError: client_id outside 0..num_clients-1, or now_s not a finite time >= 0.
        """
        if isinstance(client_id, bool) or not isinstance(client_id, (int, np.integer)) or not 0 <= client_id < self.num_clients:
            raise ValueError(f"client_id must be an int in 0..{self.num_clients - 1}, got {client_id!r}")
        if not (math.isfinite(now_s) and now_s >= 0):
            raise ValueError(f"now_s must be a finite time in seconds >= 0, got {now_s!r}")
        if self.num_issued >= self.num_requests:
            return None
        return self._issue(int(client_id), now_s + self.think_time_s)

    def client_of(self, request_id: int) -> int:
        """The client that sent request `request_id` (IndexError if not issued yet)."""
        return self._client_of[request_id]

    def _issue(self, client_id: int, arrival_s: float) -> Request:
        request_id = self.num_issued
        self._client_of.append(client_id)
        return Request(
            request_id, float(arrival_s),
            int(self._prompt_tokens[request_id]), int(self._output_tokens[request_id]),
        )
