"""The engine: executes the shared scheduler's `BatchPlan`s on the model, one forward pass per plan.

The scheduler decides everything (what runs, which KV blocks, preemption, draft grants); the
engine only turns a plan into tokens: it reads each sequence's query tokens from its own token
lists, proposes drafts where the plan grants them, runs the model, samples, verifies, and reports
a `StepOutcome` (DESIGN.md "one scheduler, two clocks"). Driving the loop over time is
`gpu_engine.driver`'s job.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu_engine.drafting import NgramProposer
from gpu_engine.inputs import SequenceWork
from gpu_engine.prompts import prompt_token_ids
from gpu_engine.runner import ModelRunner
from gpu_engine.sampler import Sampler
from gpu_engine.speculation import accepted_prefix, emitted_tokens
from gpu_engine.swap import SwapSpace
from simulator.scheduler import BatchPlan, FinishedRequest, Scheduler, ScheduledSequence, StepOutcome
from simulator.scheduler.prefix_cache import named_tokens
from traces import Request


@dataclass(frozen=True)
class StepResult:
    """What executing one plan produced, aligned with `plan.sequences`.

    Attributes:
        outcome: what goes back to the scheduler (tokens emitted; drafts proposed when any
            sequence was granted drafts).
        drafts_accepted: per sequence, drafts accepted by verification (0 without drafts);
            not capped by the request's remaining output, so it measures acceptance.
    """

    outcome: StepOutcome
    drafts_accepted: tuple[int, ...]


class Engine:
    """Executes plans of `scheduler` with `runner`; keeps each live request's token ids.

    Args:
        scheduler: a `simulator.scheduler.Scheduler` whose KV pool matches the runner's cache.
        runner: the model and its KV cache.
        sampler: greedy by default.
        drafter: proposes drafts where a plan grants them (n-gram prompt lookup by default).
        forced_acceptance: a `simulator.acceptance` model (`PositionalAcceptance`,
            `EmpiricalAcceptance`): if given, it decides how many drafts each verify proposes
            and accepts, whatever the model predicts (timing studies with random weights);
            n-gram drafts are padded to the proposed count. None verifies greedily.
        prompt_seed: seeds the prompt ids of requests added without explicit ids.

    Raises:
        ValueError: the scheduler's pool or block size differs from the runner's cache, or the
            scheduler runs the hybrid KV cache manager (`simulator.scheduler.hybrid_block_manager`).
    """

    def __init__(self, scheduler: Scheduler, runner: ModelRunner, *, sampler: Sampler | None = None,
                 drafter: NgramProposer | None = None, forced_acceptance=None, prompt_seed: int = 0):
        config = scheduler.config
        cache = runner.kv_cache
        if (config.num_gpu_blocks, config.block_size) != (cache.num_blocks, cache.block_size):
            raise ValueError(f"scheduler pool ({config.num_gpu_blocks} blocks of {config.block_size}) differs from "
                             f"the KV cache ({cache.num_blocks} blocks of {cache.block_size})")
        if getattr(scheduler.block_manager, "hybrid", False):
            raise ValueError("the engine keeps every layer's KV in one block table per request; vLLM's hybrid KV "
                             "cache manager (SchedulerConfig.kv_groups, per-group tables that free windowed blocks) "
                             "is not run by the engine: give the scheduler no kv_groups")
        self.scheduler = scheduler
        self.runner = runner
        self.sampler = sampler or Sampler()
        self.drafter = drafter or NgramProposer()
        self.forced_acceptance = forced_acceptance
        self.prompt_seed = prompt_seed
        self.swap = SwapSpace(cache) if config.preemption == "swap" else None
        self.outputs: dict[int, list[int]] = {}  # request id -> generated ids, once finished
        self._tokens: dict[int, list[int]] = {}  # live request id -> prompt + generated ids
        self._remaining: dict[int, int] = {}  # live request id -> output tokens still to produce

    def warm_up(self, rounds: int = 3) -> None:
        """A few throwaway steps (a short prefill, then decodes) before serving, as vLLM warms up
        before taking requests: otherwise the first real steps pay one-time costs (allocator
        growth, lazy initialisation, cold caches) that no later step pays and no profile measured.

        Only call it while no request holds KV blocks (before serving): it writes the first
        blocks of the pool, which every request overwrites before reading. The scheduler and the
        request state are untouched.
        """
        cache = self.runner.kv_cache
        tokens = min(16, cache.block_size * cache.num_blocks - rounds)
        if tokens < 1:
            return
        blocks = list(range(-(-(tokens + rounds) // cache.block_size)))
        self.runner.run([SequenceWork(-1, [0] * tokens, 0, blocks, 1)])  # no sampling: its RNG stays untouched
        for i in range(rounds):
            self.runner.run([SequenceWork(-1, [0], tokens + i, blocks, 1)])

    def add_request(self, request: Request, prompt_ids: list[int] | None = None) -> FinishedRequest | None:
        """Hand `request` to the scheduler with its prompt ids (seeded random ids if None).

        Returns:
            None when queued; the scheduler's rejection record otherwise.

        Prefix caching: hits are served from the shared physical blocks the scheduler's block
        tables name (no copy). With `prompt_ids` given, the caller vouches that requests whose
        `prefix_hash_ids` agree have equal tokens there; the seeded ids (`prompt_token_ids`) do.

        Raises:
            ValueError: `prompt_ids` does not hold `request.prompt_tokens` ids; or, with prefix
                caching on, the request's ids name output tokens (a multi-turn session's answer,
                which this engine generates itself, so its blocks could not match).
        """
        if (getattr(self.scheduler, "prefix_caching", False) and request.prefix_hash_ids
                and named_tokens(request) > request.prompt_tokens):
            raise ValueError(f"request {request.request_id}: its prefix_hash_ids name output tokens (a multi-turn "
                             "session's answer); the engine generates answers itself and cannot serve them with "
                             "prefix caching: set engine.enable_prefix_caching: false for engine runs of sessions")
        if prompt_ids is None:
            prompt_ids = prompt_token_ids(request, self.runner.model.args.spec.vocab_size, self.prompt_seed)
        if len(prompt_ids) != request.prompt_tokens:
            raise ValueError(f"request {request.request_id}: {len(prompt_ids)} prompt ids for "
                             f"prompt_tokens={request.prompt_tokens}")
        rejection = self.scheduler.add_request(request)
        if rejection is None:
            self._tokens[request.request_id] = list(prompt_ids)
            self._remaining[request.request_id] = request.output_tokens
        return rejection

    def execute(self, plan: BatchPlan) -> StepResult:
        """Run `plan` in one forward pass; append the emitted tokens to each sequence.

        Raises:
            ValueError: the plan asks for tokens the engine does not hold, or its block tables
                are too short for the KV it computes (`gpu_engine.inputs.prepare_inputs`).
        """
        if self.swap is not None:
            self.swap.before_forward(plan)
        forced = self._forced_counts(plan)
        work, drafts = zip(*(self._work_for(item, forced[i] if forced else None)
                             for i, item in enumerate(plan.sequences)))
        chosen = self.sampler(self.runner.run(list(work)))
        emitted, accepted, row = [], [], 0
        for i, (item, w, d) in enumerate(zip(plan.sequences, work, drafts)):
            targets = chosen[row : row + w.num_logits]  # empty for a non-final prefill chunk
            row += w.num_logits
            a = 0
            if targets:
                a = forced[i][0] if forced else accepted_prefix(d, targets)
            emitted.append(self._append(item.request_id, emitted_tokens(d, targets, a)) if targets else 0)
            accepted.append(a)
        proposed = tuple(len(d) for d in drafts) if plan.num_draft_tokens else ()
        return StepResult(StepOutcome(tuple(emitted), proposed), tuple(accepted))

    def release(self, finished: list[FinishedRequest]) -> None:
        """Move finished requests' generated ids to `outputs` and drop their state."""
        for record in finished:
            tokens = self._tokens.pop(record.request_id, None)
            if tokens is not None:
                del self._remaining[record.request_id]
                self.outputs[record.request_id] = tokens[record.prompt_tokens :]
        if self.swap is not None:
            self.swap.forget(r.request_id for r in finished)

    def _forced_counts(self, plan: BatchPlan) -> list[tuple[int, int]] | None:
        """Per sequence (accepted, proposed) drawn from the forced-acceptance model, or None."""
        if self.forced_acceptance is None or not plan.num_draft_tokens:
            return None
        granted = np.fromiter((s.num_draft_tokens for s in plan.sequences), np.int64, len(plan.sequences))
        accepted, proposed = self.forced_acceptance.sample(granted)
        return list(zip(accepted.tolist(), proposed.tolist()))

    def _work_for(self, item: ScheduledSequence, forced: tuple[int, int] | None) -> tuple[SequenceWork, list[int]]:
        """The query tokens of one scheduled sequence (with its drafts), and the drafts alone."""
        tokens = self._tokens[item.request_id]
        start = item.num_context_tokens
        num_known = item.num_query_tokens - item.num_draft_tokens
        query = tokens[start : start + num_known]
        if len(query) != num_known:
            raise ValueError(f"request {item.request_id}: plan computes tokens {start}..{start + num_known - 1} "
                             f"but the sequence holds {len(tokens)}")
        drafts = self.drafter.propose(tokens, item.num_draft_tokens) if item.num_draft_tokens else []
        if forced is not None:  # propose exactly the drawn count, padding with the last token
            drafts = (drafts + [drafts[-1] if drafts else tokens[-1]] * forced[1])[: forced[1]]
        num_logits = 1 + len(drafts) if item.emits_token else 0
        return SequenceWork(item.request_id, query + drafts, start, item.block_table, num_logits), drafts

    def _append(self, request_id: int, new_tokens: list[int]) -> int:
        """Append up to the request's remaining output tokens; return how many were appended."""
        kept = new_tokens[: self._remaining[request_id]]
        self._tokens[request_id].extend(kept)
        self._remaining[request_id] -= len(kept)
        return len(kept)
