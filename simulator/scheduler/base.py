"""What every scheduler shares: queues, admission-time rejections, KV reservation, preemption,
speculative draft grants and step completion.

A subclass only decides *which* sequences run in a step and how many tokens each computes
(`_build_plan`), from the helpers here. The scheduler has no clock: time is passed in, so the
SimPy replica and the real engine drive the same object. The windows that take many certain
steps at once (the simulator's fast path) are `simulator.scheduler.windows`, a mix-in of `Scheduler`.
"""
from __future__ import annotations

import random
from bisect import insort
from itertools import compress
from operator import add, attrgetter, ge, gt, lt, sub

from simulator.scheduler.block_manager import BlockManager, blocks_for
from simulator.scheduler.hybrid_block_manager import HybridBlockManager
from simulator.scheduler.hybrid_prefix_cache import HybridPrefixCachingBlockManager
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
from simulator.scheduler.windows import SchedulerWindows
from traces import Request

# One scheduled entry: (sequence, query tokens, draft tokens among them).
Entry = tuple[Sequence, int, int]


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


class Scheduler(SchedulerWindows):
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
        chunk_windows: the policy's step is vLLM V1's loop 1 then loop 2 with KV per chunk,
            so the steps where the decodes and one running prompt's chunk take the whole budget
            can be taken at once (`chunk_window`).

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
    chunk_windows = False

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

        With prefix caching, the pool caches per group (`simulator.scheduler.hybrid_prefix_cache`).

        Raises:
            ValueError: a scheduler other than vllm_v1 (the others keep every layer's KV: give
                them no kv_groups), or a draft model's lookahead slots.
        """
        if self.name != "vllm_v1":
            raise ValueError(f"kv_groups with sliding-window groups: only vllm_v1 runs vLLM's hybrid KV cache "
                             f"manager, not scheduler {self.name!r}")
        if config.num_lookahead_tokens:
            raise ValueError("a draft model's lookahead slots with sliding-window layers are not modelled")
        full, sliding, window = config.kv_groups
        manager = HybridPrefixCachingBlockManager if self.prefix_caching else HybridBlockManager
        return manager(config.num_gpu_blocks, config.block_size, watermark, full, sliding, window)

    def attach_kv_offload(self, offload: KvOffload) -> None:
        """Put an offload tier behind this scheduler's prefix cache (`simulator.scheduler.kv_offload`).

        Raises:
            ValueError: the scheduler has no prefix cache (vLLM's offloading connector keys
                blocks by their prefix-cache hashes), a block size other than the pool's, or
                sliding-window KV cache groups (offloading a hybrid pool is not modelled).
        """
        if self._hybrid_kv:
            raise ValueError("KV offload with sliding-window layers (hybrid KV cache groups) is not modelled")
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
        if entries:
            seqs, queries, drafts, ids, contexts, prefills, emits, counts = self._plan_columns(entries)
            if offload is not None:  # write-through: the blocks this step fills
                offload.note_step(seqs, ids, contexts, queries)
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
            needed = bm.blocks_to_admit(reserve, hit_blocks)
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
