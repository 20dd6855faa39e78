"""Global routing of arriving requests across replicas (Vidur's global schedulers)."""
from __future__ import annotations

from typing import Protocol

import numpy as np

ROUTERS = ("round_robin", "least_outstanding", "random", "vllm_dp")


class _HasOutstanding(Protocol):
    num_outstanding: int


class Router:
    """Picks the replica for each arriving request.

    Policies (Vidur `vidur/scheduler/global_scheduler/`): `round_robin` (request i to replica
    i mod R), `least_outstanding` (fewest submitted-but-unfinished requests; lowest index on
    ties; Vidur's `lor`), `random` (uniform, seeded); `vllm_dp`: vLLM's data-parallel load balancer
    (`DPLBAsyncMPClient.get_core_engine_for_request`, vllm/v1/engine/core_client.py): the lowest
    waiting × 4 + running of each replica's scheduler, the lowest index on ties.

    Raises:
        ValueError: unknown policy (lists the valid ones).
    """

    def __init__(self, policy: str, replicas: list[_HasOutstanding], seed: int = 0):
        if policy not in ROUTERS:
            raise ValueError(f"unknown router {policy!r}; valid: {', '.join(ROUTERS)}")
        self.policy = policy
        self.replicas = replicas
        self._count = 0
        self._rng = np.random.default_rng(seed)

    def pick(self) -> int:
        """Index of the replica for the next request."""
        n = len(self.replicas)
        if self.policy == "round_robin":
            index = self._count % n
        elif self.policy == "least_outstanding":
            index = min(range(n), key=lambda i: self.replicas[i].num_outstanding)
        elif self.policy == "vllm_dp":
            index = min(range(n), key=lambda i: 4 * len(self.replicas[i].scheduler.waiting)
                        + len(self.replicas[i].scheduler.running))
        else:
            index = int(self._rng.integers(n))
        self._count += 1
        return index
