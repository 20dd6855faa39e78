"""The waiting queue under the two policies: FCFS (a deque) or priority (kept sorted)."""
from __future__ import annotations

from bisect import insort
from collections import deque
from typing import Iterator

from simulator.scheduler.sequence import Sequence


def fcfs_key(seq: Sequence) -> tuple[float, int]:
    """Older arrival first, file order for ties."""
    return (seq.request.arrival_s, seq.request_id)


def priority_key(seq: Sequence) -> tuple[int, float, int]:
    """Lower `priority` first, then arrival (vLLM's --scheduling-policy priority)."""
    return (seq.request.priority, seq.request.arrival_s, seq.request_id)


class WaitingQueue:
    """Requests not running, head first.

    FCFS: arrivals join the tail; a preempted request returns to the head (Sarathi-Serve and vLLM).
    Priority: always ordered by `priority_key`, so a preempted request also goes back to its place.
    """

    def __init__(self, policy: str):
        self.policy = policy
        self.key = priority_key if policy == "priority" else fcfs_key
        self._items: deque[Sequence] | list[Sequence] = deque() if policy == "fcfs" else []
        # The same container, head first, for the scheduler's per-step checks (C-level
        # truthiness and `[0]` instead of this class's methods); read it, never modify it.
        self.items = self._items

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __iter__(self) -> Iterator[Sequence]:
        return iter(self._items)

    def head(self) -> Sequence:
        return self._items[0]

    def pop_head(self) -> Sequence:
        return self._items.popleft() if self.policy == "fcfs" else self._items.pop(0)

    def add_arrival(self, seq: Sequence) -> None:
        if self.policy == "fcfs":
            self._items.append(seq)
        else:
            insort(self._items, seq, key=self.key)

    def add_preempted(self, seq: Sequence) -> None:
        if self.policy == "fcfs":
            self._items.appendleft(seq)
        else:
            insort(self._items, seq, key=self.key)
