"""The KV link of a disaggregated cluster (`simulator.disaggregated`): its latency and bandwidth,
the FIFO transfer queue into each decode rank (a transfer starts when the decode rank can hold
the prompt's KV: vLLM's decode-side `allocate_slots` on admission), and the log of transfers.
The semantics, with vLLM 0.19's code paths, are in `simulator.disaggregated`'s docstring."""
from __future__ import annotations

from typing import TYPE_CHECKING

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import pandas as pd
import simpy

from simulator.replica import wait_until
from simulator.scheduler import FinishedRequest
from traces import Request

if TYPE_CHECKING:
    from simulator.pool import PoolScheduler


@dataclass(frozen=True)
class KvLink:
    """The link a prompt's KV crosses from a prefill instance into a decode instance.

    Attributes:
        bandwidth_bytes_per_s: bytes per second one tensor-parallel rank's link moves
            (e.g. 50e9 for 400 Gb/s InfiniBand, 450e9 for NVLink 4 one way).
        latency_s: fixed cost per transfer (handshake, first byte), seconds.

    Raises:
        ValueError: a bandwidth that is not > 0 and finite, or a latency < 0.
    """

    bandwidth_bytes_per_s: float
    latency_s: float = 0.0
    layer_pipelined: bool = False
    num_layers: int = 1

    def __post_init__(self) -> None:
        if not (self.bandwidth_bytes_per_s > 0 and math.isfinite(self.bandwidth_bytes_per_s)):
            raise ValueError(f"link bandwidth must be > 0 bytes/s and finite, got {self.bandwidth_bytes_per_s!r}")
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise ValueError(f"link latency must be >= 0 s and finite, got {self.latency_s!r}")
        if self.num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {self.num_layers}")

    def transfer_s(self, num_bytes: float) -> float:
        """Seconds to move `num_bytes`: latency + bytes / bandwidth."""
        return self.latency_s + num_bytes / self.bandwidth_bytes_per_s

    def end_s(self, num_bytes: float, start_s: float, prefill_end_s: float) -> float:
        """When a transfer begun at `start_s` ends. Layer-pipelined (each layer's KV sent as that
        layer of the last prefill step is computed, as LMCache's layerwise connector does), it
        can begin with that step and ends no earlier than one layer's share after the step:
        max(start + T, prefill end + latency + bytes / (layers × bandwidth)), T = `transfer_s`."""
        end_s = start_s + self.transfer_s(num_bytes)
        if self.layer_pipelined:
            last_layer_s = self.latency_s + num_bytes / (self.num_layers * self.bandwidth_bytes_per_s)
            end_s = max(end_s, prefill_end_s + last_layer_s)
        return end_s


@dataclass
class Transfer:
    request: Request
    prefill: FinishedRequest
    num_bytes: float
    source: PoolScheduler
    last_step_start_s: float  # start of the prefill's last step: a layer-pipelined transfer may begin there


class DecodeInbox:
    """The transfer queue and inbound link of one decode instance (FIFO, one transfer at a time).

    The head starts when the decode instance's scheduler would admit it in vLLM: at a step
    boundary (after the step's plan is built, as vLLM allocates remote-KV requests in loop 2 of
    `schedule()`) or at once when the instance is idle, if nothing waits before it, fewer than
    max_num_seqs run, and its prompt + one token fit the free blocks above the watermark. It
    then holds the prompt's blocks there while it crosses the link.
    """

    def __init__(self, env: simpy.Environment, target: PoolScheduler, link: KvLink, log: "TransferLog"):
        self.env, self.target, self.link, self.log = env, target, link, log
        self.queue: deque[Transfer] = deque()
        self.in_flight_end_s = math.inf
        self.link_free_s = -math.inf  # end of the last transfer
        self._wake = env.event()
        target.on_step_end = self.poke
        target.transfer_waiting = lambda: bool(self.queue)
        env.process(self._run())

    @property
    def num_outstanding(self) -> int:
        """Requests routed here and not finished (the least-outstanding router reads it)."""
        return self.target.replica.num_outstanding + self.num_transfers

    @property
    def num_transfers(self) -> int:
        """Requests whose KV is queued for or crossing this link (in vLLM, waiting for remote KV)."""
        return len(self.queue) + (self.in_flight_end_s < math.inf)

    def put(self, transfer: Transfer) -> None:
        self.queue.append(transfer)
        if not self.target.inner.has_work():
            self.poke()  # an idle instance admits it now; a busy one at its next step boundary

    def poke(self) -> None:
        if self.queue and not self._wake.triggered:
            self._wake.succeed()

    def _fits(self, transfer: Transfer) -> bool:
        t = self.target
        return (not t.waiting and len(t.running) < t.config.max_num_seqs
                and t.can_hold(transfer.request.prompt_tokens + 1))

    def _run(self):
        while True:
            if not self.queue or not self._fits(self.queue[0]):
                self._wake = self.env.event()
                yield self._wake
                continue
            transfer = self.queue.popleft()
            rid = transfer.request.request_id
            self.target.hold(rid, transfer.request.prompt_tokens)
            start_s = self.env.now
            prefill_end_s = transfer.prefill.first_token_s
            if self.link.layer_pipelined and start_s == prefill_end_s:
                # Not queued: it streamed from its last prefill step on, once the link was free.
                start_s = min(start_s, max(transfer.last_step_start_s, self.link_free_s))
            end_s = self.link.end_s(transfer.num_bytes, start_s, prefill_end_s)
            self.in_flight_end_s = end_s
            yield from wait_until(self.env, end_s)
            self.in_flight_end_s = math.inf
            self.link_free_s = self.env.now
            self.log.add(transfer, start_s, self.env.now, self.target.replica.replica_id)
            transfer.source.release(rid)
            self.target.release(rid)
            self.target.expect(transfer.prefill)
            self.target.replica.submit(transfer.request, sent_at_s=start_s)


TRANSFER_COLUMNS = {"request_id": np.int64, "prefill_replica_id": np.int64, "prefill_end_s": np.float64,
                     "kv_transfer_start_s": np.float64, "kv_transfer_end_s": np.float64, "decode_replica_id": np.int64}


class TransferLog:
    """Per transferred request: prefill replica, prefill end (= first token), transfer start and
    end, decode replica; in typed columns at the end (`frame`), or taken as they come by a run
    that writes its records as it goes (`take`, `ClusterRequestsStream`)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, float, float, float, int]] = []

    def take(self) -> list[tuple[int, int, float, float, float, int]]:
        """The rows logged since the last `take`, removed from the log."""
        rows, self.rows = self.rows, []
        return rows

    def add(self, transfer: Transfer, start_s: float, end_s: float, decode_replica: int) -> None:
        prefill = transfer.prefill
        self.rows.append((prefill.request_id, transfer.source.replica.replica_id, prefill.first_token_s,
                          start_s, end_s, decode_replica))

    def frame(self) -> pd.DataFrame:
        if not self.rows:  # typed even when no request crossed the link (pandas would make them object)
            return pd.DataFrame({name: np.empty(0, dtype) for name, dtype in TRANSFER_COLUMNS.items()})
        return pd.DataFrame(self.rows, columns=list(TRANSFER_COLUMNS))
