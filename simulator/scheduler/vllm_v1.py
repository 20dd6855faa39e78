"""vLLM v1's scheduler: running requests first, chunked within one budget, KV per chunk,
automatic prefix caching."""
from __future__ import annotations

from simulator.scheduler.base import Entry, PlainDecodeEntries, Scheduler
from simulator.scheduler.sequence import Sequence


class VllmV1Scheduler(Scheduler):
    """vLLM v1 (`vllm/v1/core/sched/scheduler.py` `Scheduler.schedule`, snapshot b4622cf of the
    0.19 line; REFERENCE.md §2.1).

    Loop 1 walks `running` in list order while budget is left: each request gets
    min(pending, long_prefill_token_threshold, budget) tokens — a decode 1 plus its granted
    drafts — with KV allocated for just those tokens (`allocate_slots`). When allocation fails
    a victim is preempted and its KV freed (v1 preemption is recompute): under FCFS the last of
    `running` (`self.running.pop()`), under priority the max (priority, arrival) one
    (`max(self.running, key=...)`), which may have been scheduled earlier in this step and is
    then taken out of it, its budget returned. If the victim is the request itself, loop 1
    stops. Unlike Sarathi, a running partial prefill may take the whole remaining budget.

    With speculative decoding a decoding request schedules its token and the drafts its
    proposer offered (`num_tokens_with_spec − num_computed_tokens`, within the budget and
    max_model_len): N for a draft model, for n-gram a draw from the recorded proposal lengths
    (`SchedulerConfig.draft_proposals`; often fewer, sometimes none). The drafts take KV with the
    token (and may preempt for it), and with a draft-model proposer every running request also
    reserves `num_lookahead_tokens` slots (`allocate_slots(..., num_lookahead_tokens=...)`), kept
    until it is preempted or finishes (vllm/v1/core/sched/scheduler.py @ 00024d31; tests in
    tests/test_vllm_v1_speculative.py mirror tests/v1/core/test_scheduler.py
    `test_schedule_spec_decoding_stats`).

    Loop 2 runs only if nothing was preempted in this step: while budget is left and fewer
    than max_num_seqs are running (`len(self.running) == self.max_num_running_reqs: break`), the
    head of `waiting` looks up its prefix-cache hit (`get_computed_blocks`, when its KV was
    dropped), takes min(num_tokens - hit, threshold, budget) tokens and allocates hit + those
    tokens; if they do not fit, admission stops (no preemption for a waiting request).
    Admitted requests join the tail of `running` (`self.running.append`), so a resumed request
    is the next FCFS victim again.

    What vLLM keeps back: no watermark (`KVCacheManager.allocate_slots` compares the blocks to
    allocate with `get_num_free_blocks()` only), so the pool is used to its last block; what is
    reserved at admission is the hit plus the first chunk, no more. `long_prefill_token_threshold`
    caps a request's tokens per step in both loops (`0 < threshold < num_new_tokens`); vLLM
    leaves it 0 (off) unless --max-num-partial-prefills > 1, as here (None). max_num_seqs caps
    `running`, checked before each admission as vLLM's `max_num_running_reqs`. With sliding-window
    KV cache groups (`SchedulerConfig.kv_groups`) the pool is vLLM's hybrid one
    (`simulator.scheduler.hybrid_block_manager`): each running request first frees the windowed
    blocks behind its window (`remove_skipped_blocks`, as `allocate_slots` does before allocating). Prefix caching is on by
    default, as `--enable-prefix-caching` is in V1. The budget is `chunk_size` (vLLM's
    --max-num-batched-tokens). Not modelled: vLLM's null block (block 0 of its pool is a
    placeholder, so it serves num_gpu_blocks - 1) and the repeated prefix-cache stats of a head
    request that is looked up in several steps before it fits (counted once here). Async scheduling
    (`engine.async_scheduling`, on by default as in vLLM >= 0.14) is not this class's concern: the
    replica decides when a step is scheduled relative to the step running (`simulator/replica.py`).
    """

    name = "vllm_v1"
    chunked = True
    # Loop 1's leading plain decodes as `PlainDecodeEntries` (the plan's columns by list
    # repetition); False builds one entry each (the same plans: tests/test_vllm_v1_decode_led.py).
    decode_led_entries = True
    watermark_fraction = 0.0
    supports_prefix_caching = True
    prefix_caching_default = True
    running_in_admission_order = True
    chunk_windows = True  # full-budget chunks beside the decodes taken at once (`chunk_window`)

    def _decodes_all_run(self, num_decodes: int) -> bool:
        return num_decodes <= self.token_budget  # loop 1 stops when the budget is spent

    def _admission_tokens(self, seq: Sequence, num_query_tokens: int) -> int:
        return seq.num_computed_tokens + num_query_tokens

    def _victim(self) -> Sequence | None:
        if self.config.policy != "priority":
            return super()._victim()  # the tail of running, in admission order
        executing = self._executing
        candidates = [s for s in self.running if s.request_id not in executing]
        return max(candidates, key=self.waiting.key) if candidates else None

    def _build_plan(self, now_s: float) -> tuple[list[Entry], list[Sequence]]:
        entries, preempted = self._one_pass()
        more = preempted
        while not entries and more and (self.running or self.waiting):
            # Everything schedulable was preempted (a priority victim that was the request
            # itself ends loop 1): vLLM runs that empty step at no cost and schedules again.
            # A pass that neither schedules nor preempts changes nothing, so the next would
            # repeat it: stop there (blocks held outside the scheduler, e.g. for a KV transfer).
            entries, more = self._one_pass()
            preempted += more
        return entries, preempted

    def _one_pass(self) -> tuple[list[Entry], list[Sequence]]:
        """One call of vLLM's `schedule()`: loop 1 over running, then (if nothing was
        preempted) loop 2 over waiting."""
        preempted: list[Sequence] = []
        entries: list[Entry] = []
        # The plain decodes that lead the step (1 token, no drafts), kept apart while no entry
        # other than one has been scheduled: `PlainDecodeEntries` fills their plan columns by
        # list repetition (`Scheduler._decode_led_columns`). Without drafts a decode's n is 1.
        decodes: list[Sequence] | None = [] if self.decode_led_entries and not self.config.split_n else None
        budget = self.token_budget
        threshold = self.config.long_prefill_token_threshold
        bm = self.block_manager
        size = bm.block_size
        # Blocks are registered up to computed // size before each step (exactly, without
        # drafts), so only a step that fills a block has any to register; and only requests
        # whose ids others may share register as they run (`free_sequence`: the rest lazily).
        caching, every_step = self.prefix_caching, bool(self.config.split_n)
        lookahead, max_model_len = self.config.num_lookahead_tokens, self.config.max_model_len
        tables = bm._tables  # request id -> block ids (read only: the common "already fits" check)
        hybrid = self._hybrid_kv  # sliding-window groups: free what left the window first (allocate_slots)
        in_flight = self._in_flight  # (the dict itself: preemption deletes from it)
        for seq in self._idle_running():
            if budget <= 0:
                break
            if seq.request_id not in in_flight:  # preempted earlier in this loop
                continue
            computed = seq.num_computed_tokens
            if hybrid:
                bm.remove_skipped_blocks(seq.request_id, computed)
            pending = seq.request.prompt_tokens + seq.num_generated_tokens - computed  # num_pending_tokens, inline
            n = pending if pending < budget else budget  # min(pending, budget, threshold), as comparisons
            if threshold and n > threshold:
                n = threshold
            drafts = 0
            if every_step and computed >= seq.prefill_target_tokens:
                # vLLM schedules num_tokens_with_spec - num_computed_tokens: the token and the drafts
                # proposed, within the budget and max_model_len; they take KV as the token does
                # (and may preempt for it).
                drafts = max(0, min(self._proposed_drafts(), budget - n,
                                    seq.max_output_tokens - seq.num_generated_tokens - 1,
                                    max_model_len - 1 - computed - n))
                n += drafts
            need = computed + n
            if lookahead:  # slots for the proposer's next drafts, at most max_model_len (allocate_slots)
                need = min(need + lookahead, max_model_len)
            table = tables.get(seq.request_id)
            if table is None or need > len(table) * size:  # else it fits the blocks held: nothing to do
                num_preempted = len(preempted)
                fits = self._ensure_kv(seq, need, preempted)
                if len(preempted) > num_preempted:
                    if decodes:  # back to plain entries (a victim may be one of them)
                        entries = [(d, 1, 0) for d in decodes] + entries
                    decodes = None
                    if entries:
                        entries, budget = self._unschedule_preempted(entries)
                if not fits:
                    if seq.request_id not in in_flight:
                        break  # preempted itself: vLLM stops loop 1 here
                    continue
                computed = seq.num_computed_tokens
            if (caching and seq.request.prefix_hash_ids
                    and (every_step or (computed + n) // size > computed // size)):
                bm.cache_blocks(seq.request_id, computed + n - drafts, seq.request)  # drafts are not final
            if decodes is not None and not entries and computed >= seq.prefill_target_tokens:
                decodes.append(seq)  # a plain decode (n = 1) still leading the step
            else:
                entries.append((seq, n, drafts))
            budget -= n
        if decodes:
            entries, tail = PlainDecodeEntries(decodes), entries
            entries.extend(tail)
        if not preempted:
            self._admit_waiting(entries, budget, threshold)
        return entries, preempted

    def _reserved_floor_tokens(self, seq: Sequence) -> int:
        """Rejected drafts release their slots, but not the lookahead ones: vLLM's
        `allocate_slots` keeps a running request's blocks, lookahead included, until it is
        preempted or finishes."""
        lookahead = self.config.num_lookahead_tokens
        floor = super()._reserved_floor_tokens(seq)
        if lookahead:
            return max(floor, min(seq.num_computed_tokens + lookahead, self.config.max_model_len))
        return floor

    def _unschedule_preempted(self, entries: list[Entry]) -> tuple[list[Entry], int]:
        """Drop entries whose sequence was just preempted (a priority victim scheduled earlier
        in the step); return the entries kept and the budget left after them."""
        kept = [e for e in entries if e[0].request_id in self._in_flight]
        return kept, self.token_budget - sum(e[1] for e in kept)

    def _admit_waiting(self, entries: list[Entry], budget: int, threshold: int | None) -> None:
        """Loop 2: admit from the head of `waiting`, each with its cache hit and a first chunk."""
        if self.kv_offload is not None:
            self._admit_waiting_offload(entries, budget, threshold)
            return
        while budget > 0 and self.waiting:
            head = self.waiting.head()
            hit = self._cache_hit(head)
            n = self._admit_with_hit(entries, head, hit, budget, threshold)
            if n is None:
                break
            budget -= n

    def _admit_with_hit(self, entries: list[Entry], head: Sequence, hit: list, budget: int,
                        threshold: int | None) -> int | None:
        """Admit the head of `waiting` with its prefix-cache `hit` (blocks) for its pending tokens
        after the hit, capped by `budget` and `long_prefill_token_threshold` (vLLM `Scheduler.schedule`,
        loop 2); append its entry. Returns the tokens scheduled, or None when it does not fit (KV
        blocks or `max_num_seqs`), where loop 2 stops."""
        pending = head.num_pending_tokens - len(hit) * self.config.block_size
        n = min(pending, budget, threshold or pending)
        seq = self._admit_head(n, hit)
        if seq is None:
            return None
        entries.append((seq, n, 0))
        return n

    def _admit_waiting_offload(self, entries: list[Entry], budget: int, threshold: int | None) -> None:
        """Loop 2 with an offload tier (`simulator.scheduler.kv_offload`; vLLM `Scheduler.schedule`
        with a connector): a request whose KV load is under way is skipped (it keeps its place at
        the head of `waiting`); one whose load is done resumes with the loaded tokens computed
        (`_update_waiting_for_remote_kv`: one less when they are every token); a fresh request
        takes its GPU hit, then asks the tier for the blocks after it (`match`) and, on a hit,
        allocates them and starts their load with no compute this step (no budget), else is
        admitted as without a tier. A request whose hit blocks another one is loading is
        skipped for this step. Stops where loop 2 stops (budget, `max_num_seqs`, a request that
        does not fit)."""
        offload = self.kv_offload
        bm = self.block_manager
        waiting = self.waiting
        skipped: list[Sequence] = []
        now_s = self._now_s
        while budget > 0 and waiting:
            if not self._can_admit_more():
                break
            head = waiting.head()
            rid = head.request_id
            state = offload.loading.get(rid)
            if state is not None:
                if state[0] > now_s:  # WAITING_FOR_REMOTE_KVS: not done
                    skipped.append(waiting.pop_head())
                    continue
                loaded = offload.finish_load(rid)
                head.num_computed_tokens = loaded - 1 if loaded >= head.num_tokens else loaded
                bm.cache_blocks(rid, head.num_computed_tokens, head.request)
            if head.num_computed_tokens or head.swapped_tokens:
                hit, ext = [], 0
            else:
                hit = self._cache_hit(head)
                found = offload.match(head, len(hit))
                if found is None:  # a hit block is being loaded for another request: ask again next step
                    skipped.append(waiting.pop_head())
                    continue
                ext, keys = found
            if ext:
                if not self._start_load(head, hit, ext, keys):
                    break
                skipped.append(waiting.pop_head())
                continue
            n = self._admit_with_hit(entries, head, hit, budget, threshold)
            if n is None:
                break
            budget -= n
        for seq in reversed(skipped):  # back at the head, in their order
            waiting.add_preempted(seq) if waiting.policy == "fcfs" else waiting.add_arrival(seq)

    def _start_load(self, seq: Sequence, hit: list[int], ext_blocks: int, keys: list) -> bool:
        """Allocate `seq`'s GPU hit and `ext_blocks` blocks for the tier's hit, and start their load
        (vLLM `allocate_slots(num_new_tokens=0 + external)`, `update_state_after_alloc`); False
        (nothing changed) when the free blocks do not hold them."""
        bm = self.block_manager
        size = bm.block_size
        gpu_tokens = len(hit) * size
        total = gpu_tokens + ext_blocks * size
        needed = ext_blocks + (bm.num_evictable(hit) if hit else 0)
        if bm.num_free - needed < bm.watermark_blocks:
            return False
        rid = seq.request_id
        if hit:
            bm.admit_cached(rid, hit)
        bm.grow_to(rid, total)
        seq.record_admission(gpu_tokens, ext_blocks * size)
        seq.load_started_s = self._now_s
        self.kv_offload.start_load(seq, keys, total, self._now_s)
        return True
