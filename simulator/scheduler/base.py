"""What every scheduler shares: queues, admission-time rejections, KV reservation, preemption,
speculative draft grants and step completion.

A subclass only decides *which* sequences run in a step and how many tokens each computes
(`_build_plan`), from the helpers here. The scheduler has no clock: time is passed in, so the
SimPy replica and the real engine drive the same object.
"""
from __future__ import annotations

import random
from bisect import insort
from itertools import accumulate, compress, repeat, starmap
from operator import add, attrgetter, ge, gt, lt, sub
from typing import NamedTuple

import numpy as np

from simulator.scheduler.block_manager import BlockManager, blocks_for
from simulator.scheduler.hybrid_block_manager import HybridBlockManager
from simulator.scheduler.config import SchedulerConfig
from simulator.scheduler.kv_offload import KvOffload
from simulator.scheduler.prefix_cache import PrefixCachingBlockManager
from simulator.scheduler.plan import (
    COMPLETED,
    REJECTED_BUDGET,
    REJECTED_KV_CAPACITY,
    REJECTED_TOO_LONG,
    TRUNCATED,
    BatchPlan,
    FinishedRequest,
    PlanColumns,
    StepOutcome,
)
from simulator.scheduler.sequence import Sequence
from simulator.scheduler.waiting_queue import WaitingQueue
from traces import Request

# One scheduled entry: (sequence, query tokens, draft tokens among them).
Entry = tuple[Sequence, int, int]


class PrefillWindow(NamedTuple):
    """Steps a replica may take at once (`Scheduler.prefill_window`, `admission_window`): step j
    runs one token of each of `decodes` and `chunks[j]` tokens of `partial`'s prompt; with
    `admit` = (sequence, tokens), the last step also admits that head of `waiting` with that
    first chunk (Sarathi-Serve's pass C in the budget the prompt's last chunk leaves).
    `last_has_leftover`: the last step leaves budget an arriving request could take, so the
    replica keeps it only if no arrival is due before it starts."""

    partial: Sequence
    decodes: list[Sequence]
    chunks: list[int]
    last_has_leftover: bool
    admit: tuple[Sequence, int] | None = None


class PlainDecodeEntries(list):
    """Entries that start with plain decodes: (seq, 1, 0) for each of `decodes` (running decodes
    with their token slot reserved, no drafts), in order; a policy may append entries after them
    but never removes or reorders these. `schedule` then fills their columns by list repetition
    (a plain decode is not a prefill and always samples) instead of reading each sequence.

    Only the appended entries are stored as the list's items (`tail`), so the decodes' entries
    are not built every step; iterating, `len`, truthiness and indexing see every entry."""

    __slots__ = ("decodes",)

    def __init__(self, decodes: list[Sequence]):
        super().__init__()
        self.decodes = decodes

    @property
    def tail(self) -> list[Entry]:
        """The entries after the decodes' (a copy)."""
        return list(list.__iter__(self))

    def __iter__(self):
        yield from ((seq, 1, 0) for seq in self.decodes)
        yield from list.__iter__(self)

    def __len__(self) -> int:
        return len(self.decodes) + list.__len__(self)

    def __bool__(self) -> bool:
        return bool(self.decodes) or list.__len__(self) > 0

    def __getitem__(self, index):
        return list(self)[index]

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, list) else NotImplemented

    __hash__ = None


_REQUEST_ID = attrgetter("request_id")


class Scheduler:
    """Base replica scheduler. API (DESIGN.md): add_request, schedule, complete_step, has_work.

    Class attributes a subclass sets:
        name: the config name.
        chunked: True if prompts are split into chunks within `chunk_size` (the budget key is
            `chunk_size`); False if whole prompts run within `max_num_batched_tokens`.
        watermark_fraction: share of the pool kept free at admission unless the config sets it.
        supports_prefix_caching: the policy allocates KV only for the tokens it computes, so a
            block is full of final tokens exactly when it can be cached (vllm_v1); policies that
            reserve a whole prompt (or max_model_len) up front cannot use the cache.
        prefix_caching_default: `enable_prefix_caching` when the config leaves it None.
        running_in_admission_order: admitted requests join the tail of `running` (vLLM V1's
            `self.running.append`), instead of their place in policy order.
        prefill_windows: the policy's step is Sarathi-Serve's three passes over one token
            budget (decodes, then running prefills, then admissions), so the steps that finish
            a running prompt next to plain decodes can be taken at once (`prefill_window`).

    Raises (constructor):
        ValueError: a bad budget, or enable_prefix_caching=True for a policy without support.
    """

    name = "base"
    chunked = True
    watermark_fraction = 0.01
    supports_prefix_caching = False
    prefix_caching_default = False
    running_in_admission_order = False
    prefill_windows = False

    def __init__(self, config: SchedulerConfig):
        self.config = config
        caching = config.enable_prefix_caching
        if caching is None:
            caching = self.prefix_caching_default
        if caching and not self.supports_prefix_caching:
            raise ValueError(f"enable_prefix_caching is not supported by scheduler {self.name!r} (only by vllm_v1): "
                             "it reserves KV beyond the tokens it computes, so freed blocks are not full of final tokens")
        self.prefix_caching = bool(caching)
        # n-gram proposal lengths, drawn per decode step (`_drafts_for`); () = always split_n.
        self._proposals, self._proposal_rng = config.draft_proposals, random.Random(config.proposal_seed)
        watermark = self.watermark_fraction if config.watermark_fraction is None else config.watermark_fraction
        if config.kv_groups is not None and config.kv_groups[1]:
            self.block_manager = self._hybrid_block_manager(config, watermark)
        else:
            manager = PrefixCachingBlockManager if self.prefix_caching else BlockManager
            self.block_manager = manager(config.num_gpu_blocks, config.block_size, watermark)
        self._hybrid_kv = config.kv_groups is not None and bool(config.kv_groups[1])
        self.waiting = WaitingQueue(config.policy)
        self._waiting_items = self.waiting.items  # its container, head first (per-step checks)
        self.running: list[Sequence] = []  # ordered by policy: oldest / most important first
        self._in_flight: dict[int, Sequence] = {}  # running sequences by request id
        # Request ids of each plan scheduled and not yet completed (pipeline parallelism keeps
        # several in flight; the plain loop one at a time), as the plans' own id lists: a step
        # then costs an append and a removal, not a set update over its batch (`_executing`).
        self._in_flight_plans: list[list[int]] = []
        self._executing_ids: set[int] | None = set()
        self.token_budget = self._token_budget()
        self._swap_in_tokens = 0
        self._swap_out_tokens = 0
        self._now_s = 0.0  # time of the schedule() call under way
        self._partial_prefill: Sequence | None = None  # a prompt the latest plan left unfinished (`decode_window`)
        self.kv_offload: KvOffload | None = None  # the offloading connector (`attach_kv_offload`)
        self._last_step_end_s = 0.0  # end of the latest step completed

    def _hybrid_block_manager(self, config: SchedulerConfig, watermark: float) -> HybridBlockManager:
        """The pool of a model with sliding-window KV cache groups (`config.kv_groups`): vLLM V1's
        hybrid KV cache manager (`simulator.scheduler.hybrid_block_manager`).

        Raises:
            ValueError: a scheduler other than vllm_v1 (the others keep every layer's KV: give
                them no kv_groups), prefix caching (vLLM's hit rule with windowed groups is not
                modelled: set enable_prefix_caching false), or a draft model's lookahead slots.
        """
        if self.name != "vllm_v1":
            raise ValueError(f"kv_groups with sliding-window groups: only vllm_v1 runs vLLM's hybrid KV cache "
                             f"manager, not scheduler {self.name!r}")
        if self.prefix_caching:
            raise ValueError("enable_prefix_caching with sliding-window layers: vLLM's prefix-cache hits over "
                             "windowed KV cache groups are not modelled; set engine.enable_prefix_caching: false")
        if config.num_lookahead_tokens:
            raise ValueError("a draft model's lookahead slots with sliding-window layers are not modelled")
        full, sliding, window = config.kv_groups
        return HybridBlockManager(config.num_gpu_blocks, config.block_size, watermark, full, sliding, window)

    def attach_kv_offload(self, offload: KvOffload) -> None:
        """Put an offload tier behind this scheduler's prefix cache (`simulator.scheduler.kv_offload`).

        Raises:
            ValueError: the scheduler has no prefix cache (vLLM's offloading connector keys
                blocks by their prefix-cache hashes), or a block size other than the pool's.
        """
        if not (self.supports_prefix_caching and self.prefix_caching):
            raise ValueError(f"KV offload needs the prefix cache (scheduler vllm_v1 with enable_prefix_caching), "
                             f"scheduler {self.name!r} has it {'on' if self.prefix_caching else 'off'}")
        if offload.block_size != self.config.block_size:
            raise ValueError(f"KV offload block size {offload.block_size} != the pool's {self.config.block_size}")
        self.kv_offload = offload

    def next_load_done_s(self) -> float:
        """When the earliest KV load in flight is done (inf with none): a replica with nothing
        else to run waits until then (vLLM's engine polls the loads with empty steps)."""
        return self.kv_offload.next_load_done_s() if self.kv_offload is not None else float("inf")

    def _token_budget(self) -> int:
        c = self.config
        if self.chunked:
            if c.chunk_size is None or c.chunk_size < 1:
                raise ValueError(f"{self.name} needs chunk_size >= 1, got {c.chunk_size}")
            return c.chunk_size
        return c.max_num_batched_tokens or c.max_model_len

    # ----- public API ---------------------------------------------------------------------
    def add_request(self, request: Request) -> FinishedRequest | None:
        """Queue a request, or reject it at once if it can never be served.

        Returns:
            None when queued; a `FinishedRequest` with a `rejected_*` finish reason otherwise.
        """
        output_tokens = self._output_limit(request)
        reason = self._rejection_reason(request, output_tokens)
        if reason is not None:
            return FinishedRequest(
                request.request_id, request.arrival_s, request.prompt_tokens, request.output_tokens, reason
            )
        seq = Sequence(request)
        seq.max_output_tokens = output_tokens
        self.waiting.add_arrival(seq)
        return None

    def _output_limit(self, request: Request) -> int:
        """Tokens the request will generate: all it asks for, or, under the opt-in `truncate`
        policy, only up to max_model_len (vLLM stops a sequence there with finish reason
        "length"); the request then ends as `truncated`, its tokens counted."""
        room = self.config.max_model_len - request.prompt_tokens
        if self.config.on_too_long == "truncate" and 0 < room < request.output_tokens:
            return room
        return request.output_tokens

    def has_work(self) -> bool:
        return bool(self._waiting_items or self.running)

    @property
    def num_executing(self) -> int:
        """Sequences inside plans that were scheduled but not yet completed."""
        return sum(map(len, self._in_flight_plans))

    @property
    def _executing(self) -> set[int]:
        """Request ids inside plans that were scheduled but not yet completed (do not modify)."""
        if self._executing_ids is None:
            self._executing_ids = set().union(*self._in_flight_plans)
        return self._executing_ids

    def schedule(self, now_s: float) -> BatchPlan:
        """Build the next step's plan at time `now_s` (allocates its KV blocks).

        Sequences inside a plan that has not been completed yet (pipeline parallelism keeps
        several micro-batches in flight) are not scheduled again until it is.
        """
        self._now_s = now_s  # admissions stamp first_scheduled_s with it (`_admit_head`)
        offload = self.kv_offload
        if offload is not None:
            offload.poll(now_s)  # loads and stores done by now (vLLM: after the step that just ended)
        entries, preempted = self._build_plan(now_s)
        if offload is not None:  # write-through: the blocks this step fills (few entries fill one)
            size, stored = offload.block_size, offload.stored_blocks
            for seq, tokens in [(seq, c + q) for seq, q, _ in entries
                                if (c := seq.num_computed_tokens) + q >= (stored.get(seq.request_id, 0) + 1) * size]:
                offload.note_scheduled(seq, tokens)
        if entries:
            seqs, queries, drafts, ids, contexts, prefills, emits, counts = self._plan_columns(entries)
        else:
            seqs, queries, drafts, ids, contexts, prefills, emits, counts = [], [], [], [], [], [], [], (0, 0, 0, 0)
        if ids:
            self._in_flight_plans.append(ids)
            self._executing_ids = None
        plan = BatchPlan.from_columns(
            PlanColumns(ids, queries, contexts, prefills, emits, drafts, self.block_manager.block_tables_column(ids)), seqs,
            tuple(map(_REQUEST_ID, preempted)) if preempted else (), self.block_manager.num_used,
            self._swap_in_tokens, self._swap_out_tokens, counts, len(getattr(entries, "decodes", ())))
        self._swap_in_tokens = self._swap_out_tokens = 0
        return plan

    def _plan_columns(self, entries: list[Entry]) -> tuple[list, ...]:
        """(seqs, queries, drafts, ids, contexts, prefills, emits, (prefill tokens, prefill
        sequences, draft tokens, query tokens)) of non-empty `entries`: column-wise with C-level maps, as this
        runs once per step over every scheduled sequence; `PlainDecodeEntries` by
        `_decode_led_columns`."""
        decodes = getattr(entries, "decodes", None)
        if decodes is not None:
            return self._decode_led_columns(entries, decodes)
        seqs, queries, drafts = map(list, zip(*entries))
        # Comprehensions, not map(attrgetter): CPython specialises their slot reads (2x faster).
        ids = [seq.request_id for seq in seqs]
        contexts = [seq.num_computed_tokens for seq in seqs]
        targets = [seq.prefill_target_tokens for seq in seqs]
        prefills = list(map(lt, contexts, targets))
        # The step samples when it computes every pending token (+ its drafts):
        # q - d + computed == prompt + generated. A scheduled sequence never computes past its
        # pending tokens, a prefill's pending tokens end at its target (nothing is generated
        # while it prefills) and a decode has exactly one pending token, so this is
        # q - d + computed >= target (one comparison with a column already built).
        reach = map(add, queries, contexts)
        if self.config.split_n:
            reach = map(sub, reach, drafts)
        emits = list(map(ge, reach, targets))
        # A prefill chunk that does not sample leaves its prompt unfinished: `decode_window`
        # checks that sequence first (every plan's running set has at most a few prefills).
        self._partial_prefill = next(compress(seqs, map(gt, prefills, emits)), None)
        counts = (sum(compress(queries, prefills)), sum(prefills), sum(drafts) if self.config.split_n else 0,
                  sum(queries))
        return seqs, queries, drafts, ids, contexts, prefills, emits, counts

    def _decode_led_columns(self, entries: list[Entry], decodes: list[Sequence]) -> tuple[list, ...]:
        """`_plan_columns` of `PlainDecodeEntries`: the leading plain decodes (1 query token, no
        drafts, not a prefill, samples) by list repetition and two comprehensions, the one or two
        entries after them (chunks, admissions) one by one, with the same tests."""
        k = len(decodes)
        seqs = list(decodes)
        ids = [seq.request_id for seq in decodes]
        contexts = [seq.num_computed_tokens for seq in decodes]
        queries, drafts, prefills, emits = [1] * k, [0] * k, [False] * k, [True] * k
        split = self.config.split_n
        prefill_tokens = prefill_seqs = draft_tokens = 0
        num_tokens = k
        partial = None
        for seq, q, d in list.__iter__(entries):  # the entries after the decodes (`PlainDecodeEntries.tail`)
            computed, target = seq.num_computed_tokens, seq.prefill_target_tokens
            prefill = computed < target
            emit = (q + computed - d if split else q + computed) >= target  # as `_plan_columns`
            seqs.append(seq)
            ids.append(seq.request_id)
            contexts.append(computed)
            queries.append(q)
            drafts.append(d)
            prefills.append(prefill)
            emits.append(emit)
            num_tokens += q
            if prefill:
                prefill_tokens += q
                prefill_seqs += 1
                if not emit and partial is None:
                    partial = seq
            draft_tokens += d
        self._partial_prefill = partial
        return seqs, queries, drafts, ids, contexts, prefills, emits, (prefill_tokens, prefill_seqs,
                                                                       draft_tokens if split else 0, num_tokens)

    def complete_step(self, plan: BatchPlan, outcome: StepOutcome | None, now_s: float) -> list[FinishedRequest]:
        """Apply a step's outcome at its end time `now_s`; return the requests that finished.

        A verify that emitted k tokens accepted k - 1 of its drafts; the KV slots of the
        rejected drafts are released. `outcome=None` is `StepOutcome.without_speculation(plan)`
        (one token per emitting sequence) without building it: the simulator's default.
        """
        finished = []
        self._last_step_end_s = now_s  # a decode window's first step starts here (`_offload_window`)
        c = plan.columns
        seqs = plan.scheduled or [self._in_flight[rid] for rid in c.request_ids]
        self._end_flight(c.request_ids)
        if not self.config.split_n:  # no drafts: every emission is one token (the hot path)
            k = plan.num_plain_decodes
            if outcome is None:  # every emitting entry emits one token; plain decodes all emit
                emitted_each = c.emits_token
                plain = k
            else:
                emitted_each = outcome.tokens_emitted
                plain = k and type(emitted_each) in (tuple, list) and emitted_each[:k].count(1) == k
            if plain:  # plain decodes, 1 token each
                for seq in seqs[:k]:  # the loop below with q = 1 and emitted = 1
                    seq.num_computed_tokens += 1
                    generated = seq.num_generated_tokens
                    if not generated:
                        seq.first_token_s = now_s
                    seq.token_times_s.append(now_s)
                    seq.num_generated_tokens = generated = generated + 1
                    if generated >= seq.max_output_tokens:
                        finished.append(self._finish(seq, now_s))
                if k == len(seqs):
                    return finished
                rest = zip(seqs[k:], c.query_tokens[k:], emitted_each[k:])
            else:
                rest = zip(seqs, c.query_tokens, emitted_each)
            for seq, q, emitted in rest:
                seq.num_computed_tokens += q
                if emitted:
                    generated = seq.num_generated_tokens
                    if not generated:
                        seq.first_token_s = now_s
                    seq.token_times_s.append(now_s)
                    seq.num_generated_tokens = generated = generated + 1
                    if generated >= seq.max_output_tokens:
                        finished.append(self._finish(seq, now_s))
            return finished
        if outcome is None:
            outcome = StepOutcome.without_speculation(plan)
        for seq, q, drafts, emitted in zip(seqs, c.query_tokens, c.draft_tokens, outcome.tokens_emitted):
            if drafts:
                rejected = drafts - max(0, emitted - 1)
                seq.num_computed_tokens += q - rejected
                if rejected:  # their KV slots go back (never below what the policy keeps reserved)
                    self.block_manager.shrink_to(seq.request_id, max(seq.num_computed_tokens,
                                                                     self._reserved_floor_tokens(seq)))
            else:
                seq.num_computed_tokens += q
            if emitted:
                generated = seq.num_generated_tokens
                if generated == 0:
                    seq.first_token_s = now_s
                if emitted == 1:  # a running sequence always has at least one token to go
                    seq.token_times_s.append(now_s)
                    generated += 1
                else:  # a verify may accept past the request's end: count only what it wants
                    emitted = min(emitted, seq.max_output_tokens - generated)
                    seq.token_times_s.extend([now_s] * emitted)
                    generated += emitted
                seq.num_generated_tokens = generated
                if generated >= seq.max_output_tokens:
                    finished.append(self._finish(seq, now_s))
        return finished

    def _end_flight(self, request_ids: list[int]) -> None:
        """The plan with these request ids completed: its sequences may be scheduled again."""
        plans = self._in_flight_plans
        for i, ids in enumerate(plans):
            if ids is request_ids:  # the plan this scheduler built (the usual case: the first)
                del plans[i]
                self._executing_ids = None
                return
        if request_ids and plans:  # an equal plan rebuilt elsewhere (e.g. from its sequences): by value
            done = set(request_ids)
            plans[:] = [kept for kept in ([r for r in ids if r not in done] for ids in plans) if kept]
            self._executing_ids = None

    # ----- decode windows (the simulator's fast path) ---------------------------------------
    def decode_window(self) -> tuple[list[Sequence], int]:
        """Running sequences and the most steps that are certain to be plain decodes of all of
        them, with no scheduling decision in between: nothing waiting or in flight, no drafts,
        every running sequence decoding, no completion before the last of those steps, and free KV
        blocks for every token. (0 steps when any of that fails; the caller also stops a window at
        the next arrival.) Applying it with `advance_decodes` gives exactly the state the same
        number of `schedule`/`complete_step` calls would, bar which physical block ids are used.
        """
        running = self.running
        if (self._waiting_items or self._in_flight_plans or not running or self.config.split_n or self._hybrid_kv
                or not self._decodes_all_run(len(running))):
            return running, 0
        offload = self.kv_offload
        if offload is not None:  # a store refused (a full tier) is tried again every step: step by step
            stored, size = offload.stored_blocks, offload.block_size
            if [seq for seq in running if stored.get(seq.request_id, 0) < seq.num_computed_tokens // size]:
                return running, 0
        partial = self._partial_prefill
        if partial is not None and partial.num_computed_tokens < partial.prefill_target_tokens \
                and partial.request_id in self._in_flight:
            return running, 0  # the last plan's unfinished prompt: still prefilling (the common "no")
        if [seq for seq in running if seq.num_computed_tokens < seq.prefill_target_tokens]:
            return running, 0  # a prefill among them
        steps = min([seq.max_output_tokens - seq.num_generated_tokens for seq in running])
        return running, self._kv_limited_steps(running, steps)

    def _decodes_all_run(self, num_decodes: int) -> bool:
        """Whether a step with only these decodes runs all of them (a budget may cap them)."""
        return True

    def _kv_limited_steps(self, running: list[Sequence], steps: int) -> int:
        """Largest m <= steps such that m more tokens per sequence fit the free blocks."""
        bm = self.block_manager
        size = bm.block_size
        if len(running) * -(-steps // size) <= bm.num_free:
            # A sequence's computed tokens always have their blocks, so even one with no room
            # left in its last block needs at most ceil(steps / block_size) new ones.
            return steps
        held = bm.blocks_held_each([seq.request_id for seq in running])
        room = [h * size - seq.num_computed_tokens for h, seq in zip(held, running)]  # tokens before a new block
        return _steps_fitting(room, size, bm.num_free, steps)

    def advance_decodes(self, step_end_s: list[float]) -> tuple[list[int], list[FinishedRequest]]:
        """Apply len(step_end_s) decode steps of every running sequence (from `decode_window`),
        ending at the given times.

        Returns:
            (KV blocks in use during each step, as its plan would report; requests finished at
            the last step).
        """
        bm = self.block_manager
        bm.forget_block_tables()  # the last plan completed before the window: its tables were read
        used = bm.num_used  # before this window's growth and the finishes' frees
        new_blocks, finished = self._advance_plain_decodes(list(self.running), step_end_s)
        kv_used = list(accumulate(new_blocks, initial=used))
        del kv_used[0]  # each step's count after its own new blocks
        self._after_decode_window()
        return kv_used, finished

    def _advance_plain_decodes(self, decodes: list[Sequence], step_end_s: list[float]
                               ) -> tuple[list[int], list[FinishedRequest]]:
        """One plain decode of each of `decodes` in each step ending at `step_end_s` (the free
        blocks cover them: `_kv_limited_steps`). Returns (blocks first needed at each step,
        requests finished at the last step, in `decodes` order)."""
        bm = self.block_manager
        size = bm.block_size
        steps = len(step_end_s)
        new_blocks = [0] * steps  # blocks first needed at each step
        finished = []
        caching = self.prefix_caching
        if self.kv_offload is not None:
            self._offload_window(decodes, step_end_s)
        # The plain pool's growth inline (`BlockManager.grow_to`): `decode_window` checked that
        # the free blocks cover the window, and a decoding sequence always holds a table.
        tables = bm._tables if type(bm) is BlockManager else None
        free_blocks = bm._free
        for seq, held in zip(decodes, bm.blocks_held_each([seq.request_id for seq in decodes])):
            computed = seq.num_computed_tokens
            room = held * size - computed  # tokens that fit before a new block
            if room < steps:
                if room + size >= steps:  # one new block, first written at step `room` (the usual case)
                    new_blocks[room] += 1
                    extra = 1
                else:
                    first_needed = range(room, steps, size)  # step j writes token computed + j + 1
                    extra = len(first_needed)
                    for j in first_needed:
                        new_blocks[j] += 1
                if tables is None:
                    bm.grow_to(seq.request_id, computed + steps)
                elif extra == 1:  # ceil((computed + steps) / size) - held new blocks
                    tables[seq.request_id].append(free_blocks.popleft())
                else:
                    tables[seq.request_id].extend(starmap(free_blocks.popleft, repeat((), extra)))
            if caching and seq.request.prefix_hash_ids:  # as each step's would (others: lazily)
                bm.cache_blocks(seq.request_id, computed + steps, seq.request)
            seq.num_computed_tokens = computed + steps
            seq.num_generated_tokens = generated = seq.num_generated_tokens + steps
            seq.token_times_s.extend(step_end_s)
            if generated >= seq.max_output_tokens:
                finished.append(self._finish(seq, step_end_s[-1]))
        return new_blocks, finished

    def _offload_window(self, decodes: list[Sequence], step_end_s: list[float]) -> None:
        """The offload tier's work in a window of plain decode steps ending at `step_end_s`, as
        those steps' `schedule` calls would do it: step j starts at the previous step's end (the
        first at the last step completed), polls the tier there (`KvOffload.poll`: submits the
        stores of step j - 1, completes those due) and stores the blocks step j fills, in plan
        order. Only steps that fill a block, and the steps after them (which submit those
        stores), do anything but poll; a poll's completions only matter to the next store or
        lookup, so polling there leaves the tier as every step's poll would. `decode_window` checked that no store is
        owed from before (every running sequence's computed blocks are stored)."""
        offload = self.kv_offload
        size = offload.block_size
        steps = len(step_end_s)
        events: dict[int, list[Sequence]] = {}  # step -> sequences filling a block in it, plan order
        for seq in decodes:
            computed = seq.num_computed_tokens
            for j in range(size - 1 - computed % size, steps, size):  # step j writes token computed + j
                events.setdefault(j, []).append(seq)
        for j in sorted(events):
            offload.poll(step_end_s[j - 1] if j else self._last_step_end_s)
            for seq in events[j]:
                offload.note_scheduled(seq, seq.num_computed_tokens + j + 1)
            if j < steps - 1:
                offload.poll(step_end_s[j])  # step j + 1 starts: submits them
        self._last_step_end_s = step_end_s[-1]

    def prefill_window(self, chain_admissions: bool = True) -> PrefillWindow | None:
        """The next steps that are certain to be the running decodes plus the next chunks of the
        one prompt the last plan left unfinished, with no scheduling decision in between; None
        when there are none (the caller then schedules a step).

        Returns:
            A `PrefillWindow` of P (the prefilling sequence), the decodes in plan order and P's
            chunk in each step. Step j computes one token of every decode and chunk j of P; only
            P's last chunk can leave budget for an admission (pass C), so every earlier step is
            the same whatever arrives meanwhile, and the last one is when its leftover is 0. A
            last step with leftover and a request waiting admits it there when that admission is
            certain (`_chained_admission`; not with `chain_admissions` False: a router reading
            the queues' lengths mid-window would see them before it), else is left out; with
            leftover still after that (or with nothing waiting) it is flagged: the caller takes
            it only if no arrival is due before it starts.

        Conditions (else None): `prefill_windows` policy, nothing in flight, no drafts, no prefix
        cache, the plain block pool, P still prefilling and every other running sequence
        decoding, budget left after the decodes; the steps stop at the first decode completion
        and where the free blocks stop covering the decodes' next tokens (as `decode_window`).
        P holds its whole prompt's blocks from its admission (`_admission_tokens`), so its
        chunks allocate nothing. Applying them with `advance_prefill_window` gives exactly the
        state that as many `schedule`/`complete_step` calls would, bar which block ids are used.
        """
        partial = self._partial_prefill
        if (partial is None or partial.num_computed_tokens >= partial.prefill_target_tokens
                or partial.request_id not in self._in_flight or not self.prefill_windows or self._in_flight_plans
                or self.config.split_n or self.prefix_caching or type(self.block_manager) is not BlockManager):
            return None
        running = self.running
        decodes = [seq for seq in running if seq.num_computed_tokens >= seq.prefill_target_tokens]
        if len(decodes) != len(running) - 1:
            return None  # another prompt is running too
        budget = self.token_budget - len(decodes)  # pass A's decodes each take a token
        if budget <= 0:
            return None
        return self._window_chunks(partial, decodes, [], partial.num_pending_tokens, budget, chain_admissions)

    def _window_chunks(self, partial: Sequence, decodes: list[Sequence], chunks: list[int], pending: int,
                       budget: int, chain_admissions: bool) -> PrefillWindow | None:
        """`prefill_window`'s answer: `chunks` (the steps already certain) and then `partial`'s
        `pending` tokens in chunks of the `budget` left after the decodes, up to the first
        decode completion and the free blocks' limit (None when no step is left)."""
        full = (pending - 1) // budget if pending else 0  # chunks that use the whole budget before the last one
        tail = [budget] * full + [pending - full * budget] if pending else []
        chunks += tail
        steps = len(chunks)
        if decodes:
            steps = self._kv_limited_steps(decodes, min(steps, min(
                [seq.max_output_tokens - seq.num_generated_tokens for seq in decodes])))
        last_has_leftover = steps == len(chunks) and chunks[-1] < budget
        del chunks[steps:]
        admit = None
        if last_has_leftover and self._waiting_items:  # the head of `waiting` may be admitted in that step
            leftover = budget - chunks[-1]
            admit = self._chained_admission(decodes, len(chunks), leftover) if chain_admissions else None
            if admit is None:
                del chunks[-1]
                last_has_leftover = False
            else:
                last_has_leftover = admit[1] < leftover  # budget still left after it
        if not chunks:
            return None
        return PrefillWindow(partial, decodes, chunks, last_has_leftover, admit)

    def _chained_admission(self, decodes: list[Sequence], steps: int, leftover: int) -> tuple[Sequence, int] | None:
        """`_certain_admission` in the last of `steps` window steps, in the `leftover` budget its
        prompt's last chunk leaves. FCFS only: arrivals during the window queue behind the head
        (under `priority` one may go ahead of it)."""
        if self.waiting.policy != "fcfs":
            return None
        return self._certain_admission(decodes, steps, leftover)

    def _certain_admission(self, decodes: list[Sequence], steps: int, leftover: int) -> tuple[Sequence, int] | None:
        """(head, first chunk) when pass C certainly admits the head of `waiting` in the
        `steps`-th step from now (1: the next), with `leftover` budget: a fresh request (no KV
        swapped out or recomputed), `max_num_seqs` room, the free blocks after `decodes`' growth
        through that step (pass A comes first) hold its reservation above the watermark
        (`_admit_head`), and no second admission is possible (its chunk takes the leftover, or
        it waits alone); else None."""
        waiting = self._waiting_items
        head = waiting[0]
        if head.swapped_tokens or head.num_preemptions or not self._can_admit_more():
            return None
        first = min(head.num_pending_tokens, leftover)
        if first < leftover and len(waiting) > 1:
            return None  # pass C would try the next one too
        bm = self.block_manager
        size = bm.block_size
        growth = 0
        for seq, held in zip(decodes, bm.blocks_held_each([seq.request_id for seq in decodes])):
            needed = -(-(seq.num_computed_tokens + steps) // size)  # its token of that step included
            if needed > held:
                growth += needed - held
        if bm.num_free - growth - blocks_for(self._admission_tokens(head, first), size) < bm.watermark_blocks:
            return None
        return head, first

    def admission_window(self, now_s: float, chain_admissions: bool = True) -> PrefillWindow | None:
        """`prefill_window` of the step at `now_s` that admits the head of `waiting` beside the
        running decodes (Sarathi-Serve's pass C), and the steps of its prompt after it: the head
        is admitted now, as `schedule(now_s)` would admit it, and its first chunk is the
        window's first step (never left out: the caller schedules nothing else at `now_s`).

        Only when that step is certain: nothing running prefills, the head is a fresh request
        (no KV swapped out or recomputed), `max_num_seqs` has room, the budget left after the
        decodes is not 0, another waiting request could not be admitted after it in that step
        (its chunk fills the budget, or it waits alone), and the free blocks hold the decodes'
        next tokens (pass A takes them first) and the head's admission reservation above the
        watermark (`_admit_head`). Otherwise None, and nothing changed.
        """
        if (not self._waiting_items or not self.prefill_windows or self._in_flight_plans or self.config.split_n
                or self.prefix_caching or type(self.block_manager) is not BlockManager):
            return None
        running = self.running
        if [seq for seq in running if seq.num_computed_tokens < seq.prefill_target_tokens]:
            return None
        budget = self.token_budget - len(running)
        if budget <= 0:
            return None
        admission = self._certain_admission(running, 1, budget)
        if admission is None:
            return None
        head, first = admission
        pending = head.num_pending_tokens
        decodes = list(running)
        self._admit_certain(head, first, now_s)
        return self._window_chunks(head, decodes, [first], pending - first, budget, chain_admissions)

    def decode_steps_after_prefill(self, partial: Sequence, decodes: list[Sequence], prefill_steps: int) -> int:
        """Plain decode steps of `decodes` and `partial` that certainly follow the first
        `prefill_steps` steps of a `prefill_window` whose last chunk finishes `partial`'s prompt
        (the replica also stops them at the next arrival): as `decode_window` would give then,
        counted from now. 0 when a decode finishes within those steps, `partial` samples its last
        token with its first, something waits, or `partial` is not last in `running` (the
        decode steps' plans follow `running`'s order, the window's the decodes then `partial`).
        """
        running = self.running
        if self._waiting_items or not running or running[-1] is not partial or not self._decodes_all_run(len(running)):
            return 0
        steps = partial.max_output_tokens - partial.num_generated_tokens - 1  # after its first token
        for seq in decodes:
            left = seq.max_output_tokens - seq.num_generated_tokens - prefill_steps
            if left < steps:
                steps = left
        if steps <= 0:
            return 0
        bm = self.block_manager
        size = bm.block_size
        free = bm.num_free
        if len(running) * -(-(prefill_steps + steps) // size) <= free:  # even with no room left anywhere
            return steps
        # Free blocks once the chunks' steps have grown the decodes, and each sequence's room then.
        room = []
        for seq, held in zip(decodes, bm.blocks_held_each([seq.request_id for seq in decodes])):
            computed = seq.num_computed_tokens + prefill_steps
            needed = -(-computed // size)
            if needed > held:
                free -= needed - held
                held = needed
            room.append(held * size - computed)
        room.append(bm.blocks_held(partial.request_id) * size - partial.prefill_target_tokens)
        return _steps_fitting(room, size, free, steps)

    def advance_prefill_window(self, partial: Sequence, decodes: list[Sequence], chunks: list[int],
                               step_end_s: list[float], admit: tuple[Sequence, int] | None = None,
                               admit_at_s: float = 0.0) -> tuple[list[int], list[FinishedRequest]]:
        """Apply the steps of a `prefill_window` ending at `step_end_s`, as `complete_step` would
        have applied each: the first len(chunks) carry P's chunks `chunks`; any after them are
        plain decodes of the decodes and P (`decode_steps_after_prefill`; then P's last chunk
        is among them and P is last in `running`). `admit` = (head of `waiting`, first chunk):
        the last chunk's step, which began at `admit_at_s`, admitted it (`_chained_admission`).

        Returns:
            (KV blocks in use during each step, as its plan would report; requests finished at
            the last step, in plan order: the decodes, then P, then the admitted head).
        """
        bm = self.block_manager
        bm.forget_block_tables()
        chunk_steps = len(chunks)
        used = bm.num_used  # before the decodes' growth and the finishes' frees
        new_blocks, finished = self._advance_plain_decodes(decodes, step_end_s)  # every step, one pass
        partial.num_computed_tokens += sum(chunks)
        if partial.num_computed_tokens >= partial.prefill_target_tokens:  # its last chunk ran: it samples
            if self._sample_token(partial, step_end_s[chunk_steps - 1]):
                finished.append(self._finish(partial, step_end_s[chunk_steps - 1]))
            self._partial_prefill = None
        else:
            self._partial_prefill = partial  # (an admission window's prompt: now the running one)
        if len(step_end_s) > chunk_steps:  # then P decodes too (nothing finished before: the window's bound)
            partial_blocks, partial_finished = self._advance_plain_decodes([partial], step_end_s[chunk_steps:])
            for j, n in enumerate(partial_blocks, chunk_steps):
                new_blocks[j] += n
            finished += partial_finished
            self._after_decode_window()
        kv_used = list(accumulate(new_blocks, initial=used))
        del kv_used[0]
        if admit is not None:
            self._apply_chained_admission(admit, admit_at_s, step_end_s[-1], kv_used, finished)
        return kv_used, finished

    def _apply_chained_admission(self, admit: tuple[Sequence, int], admitted_at_s: float, end_s: float,
                                 kv_used: list[int], finished: list[FinishedRequest]) -> None:
        """Admit `admit`'s head with its first chunk as the window's last step did (it began at
        `admitted_at_s`, ended at `end_s`): the step's block count gains its reservation, and a
        chunk that was the whole prompt samples its first token."""
        head, first = admit
        self._admit_certain(head, first, admitted_at_s)
        kv_used[-1] += self.block_manager.blocks_held(head.request_id)
        head.num_computed_tokens += first
        if head.num_computed_tokens >= head.prefill_target_tokens:
            self._partial_prefill = None
            if self._sample_token(head, end_s):
                finished.append(self._finish(head, end_s))
        else:
            self._partial_prefill = head

    def _admit_certain(self, head: Sequence, first: int, now_s: float) -> None:
        """Admit the head of `waiting` with its first chunk in the step beginning at `now_s`, as
        `_certain_admission` said pass C would (`_admit_head`, `first_scheduled_s` = now_s).

        Raises:
            RuntimeError: it was not admitted (a broken check: records would be wrong).
        """
        self._now_s = now_s
        if self._admit_head(first) is not head:
            raise RuntimeError("a prefill window's admission did not admit the head it was checked for")

    @staticmethod
    def _sample_token(seq: Sequence, now_s: float) -> bool:
        """One token sampled for `seq` at `now_s` (its first sets `first_token_s`); True when it was
        the request's last. (`complete_step` writes this out in its loops, once per token.)"""
        generated = seq.num_generated_tokens
        if not generated:
            seq.first_token_s = now_s
        seq.token_times_s.append(now_s)
        seq.num_generated_tokens = generated = generated + 1
        return generated >= seq.max_output_tokens

    def _after_decode_window(self) -> None:
        """State a subclass updates after decode-only steps (simple_chunking's turn)."""

    # ----- for subclasses: policy decisions -------------------------------------------------
    def _build_plan(self, now_s: float) -> tuple[list[Entry], list[Sequence]]:
        """Return the entries in scheduling order and the sequences preempted."""
        raise NotImplementedError

    def _admission_tokens(self, seq: Sequence, num_query_tokens: int) -> int:
        """KV tokens to hold when `seq` is admitted with a first chunk of `num_query_tokens`.

        Default (sarathi, vllm v0, faster_transformer): the whole prompt, plus the generated
        tokens after a recompute preemption.
        """
        return seq.num_tokens

    def _reserved_floor_tokens(self, seq: Sequence) -> int:
        """KV tokens the policy keeps reserved whatever was computed (rejected drafts never
        release below it): the prefill target for whole-prompt reservation."""
        return seq.prefill_target_tokens

    def _rejection_reason(self, request: Request, output_tokens: int) -> str | None:
        """Finish reason for a request that can never be served alone (generating
        `output_tokens`), else None.

        Usable pool = num_gpu_blocks − floor(watermark × num_gpu_blocks): a request is rejected
        when the most it will ever hold (`_peak_kv_tokens`) needs more blocks than that.
        """
        if request.prompt_tokens + output_tokens > self.config.max_model_len:
            return REJECTED_TOO_LONG
        peak_tokens = self._peak_kv_tokens(request.prompt_tokens + output_tokens - 1)
        bm = self.block_manager
        peak_blocks = (bm.peak_blocks(peak_tokens, self.token_budget) if self._hybrid_kv
                       else blocks_for(peak_tokens, self.config.block_size))
        if peak_blocks > bm.usable_blocks:
            return REJECTED_KV_CAPACITY
        if not self.chunked and request.prompt_tokens > self.token_budget:
            return REJECTED_BUDGET
        return None

    def _peak_kv_tokens(self, final_kv_tokens: int) -> int:
        """Most KV tokens a request holds, given its final footprint prompt + output − 1 (the
        last token is never cached): that footprint, unless the policy reserves more."""
        return final_kv_tokens

    # ----- helpers ----------------------------------------------------------------------------
    def _idle_running(self) -> list[Sequence]:
        """Running sequences not inside an executing plan, in policy order."""
        if not self._in_flight_plans:
            return list(self.running)
        executing = self._executing
        return [s for s in self.running if s.request_id not in executing]

    def _idle_running_to_read(self) -> list[Sequence]:
        """`_idle_running` for a caller that only reads it while nothing changes `running`
        (a comprehension): `running` itself when no plan is executing, without the copy."""
        return self._idle_running() if self._in_flight_plans else self.running

    def _can_admit_more(self) -> bool:
        return len(self.running) < self.config.max_num_seqs

    def _admit_whole_prompts(self, entries: list[Entry], budget: int) -> int:
        """Non-chunking admission: whole pending prompts from the head of `waiting` while they fit
        the remaining `budget` (vLLM v0, Orca). A recompute longer than the budget may run alone in
        its step rather than be dropped (vLLM v0 would mark it FINISHED_IGNORED). Returns the
        budget left."""
        while self.waiting:
            head = self.waiting.head()
            n = head.num_pending_tokens
            if n > budget and not (not entries and budget == self.token_budget and head.num_preemptions):
                break
            if self._admit_head(n) is None:
                break
            entries.append((head, n, 0))
            budget -= n
        return max(0, budget)

    def _partial_prefills(self, entries: list[Entry], budget: int, per_chunk_kv: bool = False) -> int:
        """Pass B: running prefills (admitted earlier) get min(pending, budget left), in order.

        With `per_chunk_kv` the chunk's KV is allocated now, shrunk to the free slots (no
        preemption); otherwise the whole prompt was reserved at admission. Returns the budget left.
        """
        bm = self.block_manager
        in_flight = self._in_flight
        if budget <= 0:
            return budget
        # The prefills first, in one comprehension (most of a busy running set decodes; nothing
        # below changes which sequences prefill).
        for seq in [s for s in self._idle_running_to_read() if s.num_computed_tokens < s.prefill_target_tokens]:
            if budget <= 0:
                break
            if seq.request_id not in in_flight:
                continue  # preempted as a victim this step
            n = min(seq.num_pending_tokens, budget)
            if per_chunk_kv:
                n = min(n, bm.capacity_tokens(seq.request_id) - seq.num_computed_tokens)
                if n <= 0:
                    continue
                bm.grow_to(seq.request_id, seq.num_computed_tokens + n)
            entries.append((seq, n, 0))
            budget -= n
        return budget

    def _admit_head(self, num_query_tokens: int, hit_blocks: list[int] | None = None) -> Sequence | None:
        """Admit the head of `waiting` with a first chunk of `num_query_tokens` if its KV fits.

        `hit_blocks`: prefix-cache hit of the head (`_cache_hit`): its first len(hit_blocks)
        blocks are taken as they are and the chunk starts after them. The check is vLLM's
        `allocate_slots`: new blocks plus hit blocks that sit in the free queue <= free blocks
        (minus the watermark).

        Returns the admitted sequence, or None (nothing changed) if the pool cannot hold its
        admission reservation above the watermark or `max_num_seqs` is reached.
        """
        if not self._waiting_items or not self._can_admit_more():
            return None
        seq = self._waiting_items[0]
        bm = self.block_manager
        hit_tokens = len(hit_blocks) * bm.block_size if hit_blocks else 0
        reserve = self._admission_tokens(seq, num_query_tokens) + hit_tokens
        loaded = self.kv_offload is not None and seq.load_started_s == seq.load_started_s  # its KV load is done
        if hit_tokens:
            needed = blocks_for(reserve, bm.block_size) - len(hit_blocks) + bm.num_evictable(hit_blocks)
            if bm.num_free - needed < bm.watermark_blocks:
                return None
        elif loaded:  # it holds the loaded blocks already
            if bm.num_free - bm._extra_blocks(seq.request_id, reserve) < bm.watermark_blocks:
                return None
        elif not bm.can_admit(reserve):
            return None
        self.waiting.pop_head()
        if seq.first_scheduled_s != seq.first_scheduled_s:  # NaN: its first time on the device
            seq.first_scheduled_s = self._now_s  # every admitted sequence runs in this step
        if hit_tokens:
            bm.admit_cached(seq.request_id, hit_blocks)
            seq.num_computed_tokens = hit_tokens
        bm.grow_to(seq.request_id, reserve)
        if loaded:
            seq.load_wait_s += self._now_s - seq.load_started_s
            seq.load_started_s = float("nan")
        elif self.prefix_caching:
            if not seq.swapped_tokens:
                seq.record_admission(hit_tokens)
            if seq.request.prefix_hash_ids:  # content others may hit; the rest lazily (free_sequence)
                bm.cache_blocks(seq.request_id, min(reserve, seq.num_tokens), seq.request)
        elif seq.dropped_tokens:
            seq.record_admission(0)
        running = self.running
        if self.running_in_admission_order:
            running.append(seq)
        else:
            key = self.waiting.key  # `running` is sorted by it
            if not running or key(running[-1]) <= key(seq):  # the newest (FCFS admits in order): insort's place
                running.append(seq)
            else:
                insort(running, seq, key=key)
        self._in_flight[seq.request_id] = seq
        if seq.swapped_tokens:
            self._swap_in_tokens += seq.swapped_tokens
            seq.swapped_tokens = 0
        return seq

    def _admit_chunks(self, entries: list[Entry], budget: int, max_chunk: int | None = None) -> int:
        """Pass C of Sarathi-Serve: admit from the head of `waiting`, strictly in order, each
        with its first chunk min(pending, budget, max_chunk), until the budget, `max_num_seqs` or
        the KV pool stops it. Returns the budget left."""
        waiting = self._waiting_items
        while budget > 0 and waiting:
            n = min(waiting[0].num_pending_tokens, budget, max_chunk or budget)
            seq = self._admit_head(n)
            if seq is None:
                break
            entries.append((seq, n, 0))
            budget -= n
        return budget

    def _cache_hit(self, seq: Sequence) -> list[int]:
        """Block ids of the longest cached prefix of `seq` (none without caching, or for a
        sequence whose KV is not dropped), at most num_tokens - 1 tokens: the last token is
        always computed, for its logits (vLLM `KVCacheManager.get_computed_blocks`)."""
        if not self.prefix_caching or seq.num_computed_tokens or seq.swapped_tokens:
            return []
        return self.block_manager.lookup(seq.request, (seq.num_tokens - 1) // self.config.block_size)

    def _preempt(self, seq: Sequence, preempted: list[Sequence]) -> None:
        """Free `seq`'s blocks and return it to `waiting` (recompute, or swap to host)."""
        self.running.remove(seq)
        del self._in_flight[seq.request_id]
        if self.kv_offload is not None:
            self.kv_offload.request_done(seq.request_id, self._now_s, finished=False)
        self._free_kv(seq, resumes=self.config.preemption != "swap")
        if self.config.preemption == "swap":
            seq.swap_out()
            self._swap_out_tokens += seq.swapped_tokens
        else:
            seq.reset_for_recompute()
        self.waiting.add_preempted(seq)
        preempted.append(seq)

    def _free_kv(self, seq: Sequence, resumes: bool) -> None:
        """Return `seq`'s blocks to the pool; with prefix caching its full blocks stay cached,
        and are registered if it `resumes` by recompute (`PrefixCachingBlockManager.free_sequence`)."""
        if self.prefix_caching:
            self.block_manager.free_sequence(seq.request_id, seq.num_computed_tokens, seq.request, resumes)
        else:
            self.block_manager.free(seq.request_id)

    def _victim(self) -> Sequence | None:
        """The running sequence to preempt: the last in policy order (the newest under FCFS,
        the max (priority, arrival) under priority), skipping ones inside an executing plan."""
        executing = self._executing
        for seq in reversed(self.running):
            if seq.request_id not in executing:
                return seq
        return None

    def _ensure_kv(self, seq: Sequence, num_tokens: int, preempted: list[Sequence]) -> bool:
        """Make `seq` hold `num_tokens` KV slots, preempting from the tail while the pool is full.

        An older (higher-priority) request is never preempted for a later one: if `seq` is the
        tail itself, it is the one preempted (Sarathi-Serve pass A; vLLM v1 `schedule()`).

        Returns:
            True if the slots are reserved; False if `seq` was preempted or no victim exists.
        """
        while not self.block_manager.try_grow_to(seq.request_id, num_tokens):
            victim = self._victim()
            if victim is None:
                return False
            self._preempt(victim, preempted)
            if victim is seq:
                return False
        return True

    def _reserve_decodes(self, preempted: list[Sequence]) -> list[Sequence]:
        """Give every idle running decode a KV slot for its next token, in policy order.

        Returns:
            The decodes that got their slot (each costs one budget token).
        """
        decodes = [seq for seq in self._idle_running_to_read() if seq.num_computed_tokens >= seq.prefill_target_tokens]
        # Blocks for the computed tokens are always held, so the next token's slot is held unless
        # it starts a new block: only those decodes ask the pool (and may preempt), in order.
        size = self.block_manager.block_size
        starting_a_block = [seq for seq in decodes if not seq.num_computed_tokens % size]
        if not starting_a_block:
            return decodes
        in_flight = self._in_flight
        without_slot = set()
        bm = self.block_manager
        # The plain pool's one-block growth inline (`try_grow_to` when the table is exactly full
        # and a block is free); anything else asks `_ensure_kv`, which may preempt.
        tables = bm._tables if type(bm) is BlockManager else None
        free_blocks = bm._free
        for seq in starting_a_block:
            if seq.request_id not in in_flight:
                continue
            if tables is not None and free_blocks:
                table = tables.get(seq.request_id)
                if table is not None and len(table) * size == seq.num_computed_tokens:
                    table.append(free_blocks.popleft())
                    continue
            if not self._ensure_kv(seq, seq.num_computed_tokens + 1, preempted):
                without_slot.add(seq.request_id)  # preempted itself, or no victim left
        if preempted or without_slot:
            decodes = [seq for seq in decodes if seq.request_id in in_flight and seq.request_id not in without_slot]
        return decodes

    def _grant_drafts(self, decodes: list[Sequence], budget: int) -> tuple[list[Entry], int]:
        """Split-N: after every decode has its token, grant draft tokens in scheduling order
        within the remaining `budget` (DESIGN.md "Split-N").

        Returns:
            (entries (seq, 1 + drafts, drafts), budget left).
        """
        if self.config.split_n == 0:
            return PlainDecodeEntries(decodes), budget
        entries = []
        for seq in decodes:
            drafts = self._drafts_for(seq, budget)
            entries.append((seq, 1 + drafts, drafts))
            budget -= drafts
        return entries, budget

    def _proposed_drafts(self) -> int:
        """Drafts the proposer offers a decode this step: `split_n`, or with n-gram proposals
        (`SchedulerConfig.draft_proposals`) one seeded draw of them, at most `split_n`."""
        if self._proposals:
            return min(self.config.split_n, self._proposal_rng.choice(self._proposals))
        return self.config.split_n

    def _drafts_for(self, seq: Sequence, budget: int) -> int:
        """Draft tokens for a decode whose own token slot is reserved: at most `split_n`, the
        `budget`, what the request still has to generate after this token, and the KV slots that
        are free (drafts never preempt), and, with n-gram proposals (`SchedulerConfig.draft_proposals`),
        what the proposer found for this step (one draw). Reserves their slots."""
        drafts = min(self._proposed_drafts(), budget, seq.max_output_tokens - seq.num_generated_tokens - 1)
        if drafts <= 0:
            return 0
        bm = self.block_manager
        computed = seq.num_computed_tokens
        if not bm.try_grow_to(seq.request_id, computed + 1 + drafts):  # else: as many as the free blocks hold
            drafts = max(0, min(drafts, bm.capacity_tokens(seq.request_id) - computed - 1))
            bm.grow_to(seq.request_id, computed + 1 + drafts)
        return drafts

    def _finish(self, seq: Sequence, now_s: float) -> FinishedRequest:
        self.running.remove(seq)
        del self._in_flight[seq.request_id]
        if self.kv_offload is not None:
            self.kv_offload.request_done(seq.request_id, now_s)
        self._free_kv(seq, resumes=False)
        r = seq.request
        cached = seq.num_cached_tokens
        # Positional, in the field order (request_id, arrival_s, prompt_tokens, output_tokens,
        # finish_reason, generated_tokens, first_scheduled_s, first_token_s, completion_s,
        # num_preemptions, recomputed_tokens, cached_tokens, resumed_cached_tokens, cpu_hit_tokens,
        # kv_load_wait_s, token_times_s): a call with 16 keywords costs twice as much, once per request.
        return FinishedRequest(
            r.request_id, r.arrival_s, r.prompt_tokens, r.output_tokens,
            COMPLETED if seq.max_output_tokens == r.output_tokens else TRUNCATED,
            seq.num_generated_tokens, seq.first_scheduled_s, seq.first_token_s, now_s, seq.num_preemptions,
            seq.recomputed_tokens, cached if cached > 0 else 0, seq.resumed_cached_tokens, seq.cpu_hit_tokens,
            seq.load_wait_s, seq.token_times_s)


def _steps_fitting(room: list[int], block_size: int, free_blocks: int, steps: int) -> int:
    """Largest m <= steps such that m more tokens of each sequence fit `free_blocks` new blocks,
    a sequence with `room` tokens left in its blocks needing ceil((m - room) / block_size)."""

    def extra_blocks(m: int) -> int:
        return sum(-(-(m - r) // block_size) for r in room if m > r)

    if extra_blocks(steps) <= free_blocks:
        return steps
    low, high = 0, steps  # extra_blocks is non-decreasing in m: bisect the last m that fits
    while low < high:
        mid = (low + high + 1) // 2
        if extra_blocks(mid) <= free_blocks:
            low = mid
        else:
            high = mid - 1
    return low
