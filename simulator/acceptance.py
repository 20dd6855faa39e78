"""Speculative decoding acceptance models: how many of a verify step's draft tokens are accepted.

A verify of d drafts emits accepted + 1 tokens (the bonus or corrected token), 1..d+1.
All models are seeded and vectorised over the verifying sequences of a step.
"""
from __future__ import annotations

from bisect import bisect_left
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from simulator.scheduler import BatchPlan, StepOutcome


def expected_tokens_per_step(alpha: float, n: int) -> float:
    """E[tokens per verify step] with i.i.d. acceptance α and N drafts: (1 − α^(N+1)) / (1 − α).

    Source: Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding"
    (arXiv 2211.17192), eq. 1; REFERENCE.md §4. For α = 1 it is N + 1.
    """
    if alpha >= 1.0:
        return float(n + 1)
    return (1.0 - alpha ** (n + 1)) / (1.0 - alpha)


class PositionalAcceptance:
    """Draft k (1-based) is accepted with probability α_k given drafts 1..k−1 were; the first
    rejection ends the run of accepted drafts. A scalar α is the i.i.d. case (α_k = α for all k).

    Args:
        alphas: one probability, or a list [α_1, ..., α_N] (positions past the list reuse the last).
        seed: RNG seed.
    """

    def __init__(self, alphas: float | list[float], seed: int = 0):
        values = [alphas] if np.isscalar(alphas) else list(alphas)
        if not values or any(not 0.0 <= a <= 1.0 for a in values):
            raise ValueError(f"acceptance probabilities must be in [0, 1], got {alphas!r}")
        self.alphas = np.asarray(values, dtype=float)
        self.rng = np.random.default_rng(seed)
        self._survival_cache: dict[int, np.ndarray] = {}

    def sample(self, drafts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Accepted and proposed drafts for verifies granted `drafts` (int array, shape (n,)).

        One uniform u per verify: the run of accepted drafts is the number of positions k with
        u < P(drafts 1..k all accepted) = α_1 ⋯ α_k (inverse-CDF sampling of the run length),
        capped at the drafts granted; the same law as accepting draft by draft.
        """
        drafts = np.asarray(drafts, dtype=np.int64)
        width = int(drafts.max(initial=0))
        if width == 0:
            return np.zeros_like(drafts), drafts
        u = self.rng.random(len(drafts))
        run = (u[:, None] < self._survival(width)[None, :]).sum(axis=1)
        return np.minimum(run, drafts), drafts

    def sample_lists(self, drafts: list[int]) -> tuple[list[int], list[int]]:
        """`sample` on plain lists, with the same draws and results (the simulator calls this
        once per verify step; a few dozen entries are cheaper in Python than in numpy)."""
        width = max(drafts, default=0)
        if width == 0:
            return [0] * len(drafts), list(drafts)
        below = self._negated_survival(width)  # ascending: count of -c_k < -u = count of u < c_k
        u = self.rng.random(len(drafts)).tolist()
        return [min(bisect_left(below, -x), d) for x, d in zip(u, drafts)], list(drafts)

    def _survival(self, width: int) -> np.ndarray:
        """P(drafts 1..k all accepted) for k = 1..width (non-increasing), cached."""
        cached = self._survival_cache.get(width)
        if cached is None:
            alphas = self.alphas[np.minimum(np.arange(width), len(self.alphas) - 1)]
            cached = self._survival_cache[width] = np.cumprod(alphas)
        return cached

    def _negated_survival(self, width: int) -> list[float]:
        return [-c for c in self._survival(width).tolist()]


class EmpiricalAcceptance:
    """Replays measured (proposed, accepted) pairs, one per verify step, as the engine records them.

    For a verify granted d drafts, a recorded row is drawn uniformly; its proposals are capped at d
    and its accepted count at the capped proposals (a row recorded with N = 4 drawn for a step
    granted 2 proposes at most 2). So n-gram steps that proposed nothing replay as such.

    With `given_proposals` the scheduler has already drawn each step's proposal from the same
    rows (`SchedulerConfig.draft_proposals`: n-gram drafting schedules only what was proposed, as
    vLLM does), so a verify of d drafts draws among the rows that proposed at least d (exactly d
    unless the token budget cut the drafts), keeping each row's accepted count with its proposal.

    Args:
        proposed, accepted: int arrays of equal length, accepted <= proposed.
        seed: RNG seed.
        given_proposals: draw conditioned on the drafts granted (above).
    """

    def __init__(self, proposed: np.ndarray, accepted: np.ndarray, seed: int = 0, given_proposals: bool = False):
        proposed = np.asarray(proposed, dtype=np.int64)
        accepted = np.asarray(accepted, dtype=np.int64)
        if proposed.size == 0 or proposed.shape != accepted.shape:
            raise ValueError("empirical acceptance needs equal, non-empty proposed and accepted columns")
        if (accepted < 0).any() or (accepted > proposed).any():
            raise ValueError("empirical acceptance rows need 0 <= accepted <= proposed")
        self.proposed, self.accepted = proposed, accepted
        self.rng = np.random.default_rng(seed)
        self.given_proposals = given_proposals
        order = np.argsort(proposed, kind="stable")  # rows by proposal, for the conditional draw
        self._sorted_proposed, self._sorted_accepted = proposed[order], accepted[order]

    @classmethod
    def from_file(cls, path: str | Path, seed: int = 0, given_proposals: bool = False) -> "EmpiricalAcceptance":
        """Read a CSV with columns `proposed,accepted` (one row per verify step).

        Raises:
            ValueError: missing file or columns, a count that is not a whole number (row named: the
                file's line), or rows with accepted > proposed; names the file.
        """
        try:
            frame = pd.read_csv(path)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            raise ValueError(f"{path}: cannot read acceptance file ({exc})") from None
        missing = {"proposed", "accepted"} - set(frame.columns)
        if missing:
            raise ValueError(f"{path}: acceptance file needs columns proposed,accepted; missing {sorted(missing)}")
        for column in ("proposed", "accepted"):  # counts of tokens: 1.9 was once read as 1
            values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
            bad = np.flatnonzero(~np.isfinite(values) | (values != np.round(values)) | (np.abs(values) > 2**31 - 1))
            if bad.size:
                raise ValueError(f"{path}: line {bad[0] + 2}: {column} {frame[column].iloc[bad[0]]} is not a whole "
                                 f"number of draft tokens up to 2,147,483,647 ({bad.size} such row{'s' if bad.size > 1 else ''}); "
                                 "each row is one verify step's proposed,accepted counts")
        try:
            return cls(frame["proposed"].to_numpy(), frame["accepted"].to_numpy(), seed, given_proposals)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None

    def sample(self, drafts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Accepted and proposed drafts for verifies granted `drafts` (int array, shape (n,))."""
        if self.given_proposals:
            drafts = np.asarray(drafts, dtype=np.int64)
            # rows proposing >= d: a suffix of the sorted rows (none: the largest proposals)
            start = np.minimum(np.searchsorted(self._sorted_proposed, drafts, side="left"), self.proposed.size - 1)
            rows = start + (self.rng.random(len(drafts)) * (self.proposed.size - start)).astype(np.int64)
            return np.minimum(self._sorted_accepted[rows], drafts), drafts
        rows = self.rng.integers(0, self.proposed.size, size=len(drafts))
        proposed = np.minimum(self.proposed[rows], drafts)
        return np.minimum(self.accepted[rows], proposed), proposed

    def sample_lists(self, drafts: list[int]) -> tuple[list[int], list[int]]:
        """`sample` on plain lists."""
        accepted, proposed = self.sample(np.asarray(drafts, dtype=np.int64))
        return accepted.tolist(), proposed.tolist()


def speculative_outcome_fn(model: PositionalAcceptance | EmpiricalAcceptance) -> Callable[[BatchPlan], StepOutcome]:
    """Outcome of a plan: plain entries emit 1 token if they catch up, verifies accepted + 1."""

    def outcome(plan: BatchPlan) -> StepOutcome:
        columns = plan.columns
        if not any(columns.draft_tokens):
            return StepOutcome.without_speculation(plan)
        accepted, proposed = model.sample_lists(columns.draft_tokens)
        emitted = [(1 + a) if emits else 0 for emits, a in zip(columns.emits_token, accepted)]
        return StepOutcome(tuple(emitted), tuple(proposed))

    return outcome
