"""The scheduler's windows: many steps taken at once where their plans are certain (the
simulator's fast path; `simulator.replica` asks for them, the step-by-step path is the reference).

A decode window is consecutive steps of only plain decodes of the same sequences; a prefill window
is the steps that finish one running prompt's chunks beside plain decodes (Sarathi-Serve's three
passes over a token budget), with the next admission chained where it is certain; an admission
window admits the head of `waiting` when pass C would. Each returns what the steps would have done
and `advance_*` applies it: records are identical to scheduling each step
(tests/test_prefill_windows.py, tests/test_scheduler_properties.py).

`SchedulerWindows` is a mix-in of `simulator.scheduler.base.Scheduler`: its methods read and update
the scheduler's queues, KV blocks and sequences through `self`.
"""
from __future__ import annotations

from itertools import accumulate, repeat, starmap
from typing import Callable, NamedTuple

from simulator.scheduler.block_manager import BlockManager, blocks_for
from simulator.scheduler.plan import FinishedRequest
from simulator.scheduler.prefix_cache import named_tokens
from simulator.scheduler.sequence import Sequence



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


class SchedulerWindows:
    """The window methods of `Scheduler` (module docstring)."""

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
                finished.append(seq)
        # Finished after every sequence's growth, as the last step's plan allocated before it
        # completed: a prefix cache puts a freed partial block at the head of its free queue,
        # where a later sequence's growth would take it instead of the block the plan took.
        return new_blocks, [self._finish(seq, step_end_s[-1]) for seq in finished]

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

    def chunk_window(self) -> PrefillWindow | None:
        """vLLM V1's steps of the running decodes and the one running prompt's next chunks
        (`chunk_windows` policies, KV allocated per chunk). Loop 1 gives each decode its token
        and the prompt min(pending, budget left) (`VllmV1Scheduler._one_pass`); a chunk that
        takes the whole budget leaves loop 2 none, so neither an arrival nor the waiting queue
        changes its step. The prompt's last chunk may leave budget: with nothing waiting it is
        the window's last step, flagged (the replica keeps it only if no request arrives before
        it starts); with a request waiting it is left to `schedule`. None when no step is left.

        Returns:
            A `PrefillWindow` of P (the prompt, last in `running`), the decodes in `running`
            order (the plan's), and P's chunks (each the budget after the decodes, bar a last),
            admitting nobody; `last_has_leftover` when the last chunk leaves budget.

        Conditions (else None): P is the prompt the last plan left unfinished and the tail of
        `running`, every other running sequence decodes, nothing in flight, no drafts or
        lookahead slots, no sliding-window groups or offload tier, no `long_prefill_token_threshold`
        below the chunk; the steps stop at the first decode completion and where the free blocks
        stop covering the decodes' tokens and P's chunks (`_chunk_kv_steps`: then loop 1 never
        preempts). With prefix caching, P with ids while a
        decode registers named blocks meanwhile gives None: the window registers P's blocks
        after the decodes', where step by step they interleave (the order of duplicates).
        Applying them with `advance_prefill_window` gives exactly the state as many
        `schedule`/`complete_step` calls would, bar which block ids are used.
        """
        partial = self._partial_prefill
        if (partial is None or not self.chunk_windows or partial.request_id not in self._in_flight
                or self._in_flight_plans or self.config.split_n or self._hybrid_kv or self.kv_offload is not None
                or self.config.num_lookahead_tokens):
            return None
        running = self.running
        if running[-1] is not partial or partial.num_computed_tokens >= partial.prefill_target_tokens:
            return None
        decodes = [seq for seq in running if seq.num_computed_tokens >= seq.prefill_target_tokens]
        chunk = self.token_budget - len(decodes)  # loop 1: each decode's token first
        threshold = self.config.long_prefill_token_threshold
        if len(decodes) != len(running) - 1 or chunk <= 0 or (threshold and threshold < chunk):
            return None
        pending = partial.num_pending_tokens
        steps = (pending - 1) // chunk  # chunks that leave pending tokens
        chunks = [chunk] * steps
        last = pending - steps * chunk
        if last == chunk or not self._waiting_items:  # loop 2 has no budget, or nobody to admit now
            chunks.append(last)
        if chunks and decodes:
            del chunks[min([seq.max_output_tokens - seq.num_generated_tokens for seq in decodes]):]
        if chunks and self.prefix_caching and partial.request.prefix_hash_ids and [
                seq for seq in decodes if seq.request.prefix_hash_ids
                and named_tokens(seq.request) > seq.num_computed_tokens]:
            return None
        if chunks:
            del chunks[self._chunk_kv_steps(partial, decodes, chunks):]
        return PrefillWindow(partial, decodes, chunks, chunks[-1] < chunk) if chunks else None

    def _chunk_kv_steps(self, partial: Sequence, decodes: list[Sequence], chunks: list[int]) -> int:
        """Largest m <= len(chunks) such that m steps of the decodes' tokens and `partial`'s first
        m `chunks` (KV per chunk) fit the free blocks."""
        bm = self.block_manager
        size = bm.block_size
        held = bm.blocks_held(partial.request_id)
        reach = list(accumulate(chunks, initial=partial.num_computed_tokens))  # its tokens after m steps

        def partial_blocks(m: int) -> int:
            return max(0, -(-reach[m] // size) - held)

        steps = len(chunks)
        if len(decodes) * -(-steps // size) + partial_blocks(steps) <= bm.num_free:  # even with no room anywhere
            return steps
        room = [h * size - seq.num_computed_tokens
                for h, seq in zip(bm.blocks_held_each([seq.request_id for seq in decodes]), decodes)]
        return _steps_fitting(room, size, bm.num_free, steps, partial_blocks)

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
        chunk_blocks = self._grow_chunks(partial, chunks) if self.chunk_windows else None
        new_blocks, finished = self._advance_plain_decodes(decodes, step_end_s)  # every step, one pass
        if chunk_blocks:
            for j, n in enumerate(chunk_blocks):
                new_blocks[j] += n
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

    def _grow_chunks(self, partial: Sequence, chunks: list[int]) -> list[int]:
        """KV for `partial`'s chunks (a `chunk_window`: per chunk, as loop 1's `allocate_slots`),
        and their blocks registered as each step's would (only a prompt with ids: the rest
        lazily); taken before the decodes' growth and finishes (a finish's freed blocks must not
        be among them). Returns the blocks first needed at each step."""
        bm = self.block_manager
        size = bm.block_size
        held = bm.blocks_held(partial.request_id)
        computed = partial.num_computed_tokens
        new_blocks = []
        for q in chunks:
            computed += q
            needed = -(-computed // size)
            new_blocks.append(needed - held if needed > held else 0)
            held = max(held, needed)
        bm.grow_to(partial.request_id, computed)
        if self.prefix_caching and partial.request.prefix_hash_ids:
            bm.cache_blocks(partial.request_id, computed, partial.request)
        return new_blocks

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


def _steps_fitting(room: list[int], block_size: int, free_blocks: int, steps: int,
                   more_blocks: Callable[[int], int] | None = None) -> int:
    """Largest m <= steps such that m more tokens of each sequence fit `free_blocks` new blocks,
    a sequence with `room` tokens left in its blocks needing ceil((m - room) / block_size), and
    `more_blocks(m)` more (non-decreasing in m) when given."""

    def extra_blocks(m: int) -> int:
        blocks = sum(-(-(m - r) // block_size) for r in room if m > r)
        return blocks + more_blocks(m) if more_blocks is not None else blocks

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
