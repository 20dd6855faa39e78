"""Split-N pieces: n-gram prompt lookup, greedy verification, the sampler."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpu_engine.drafting import NgramProposer  # noqa: E402
from gpu_engine.sampler import Sampler  # noqa: E402
from gpu_engine.speculation import accepted_prefix, emitted_tokens  # noqa: E402


def test_ngram_proposes_what_followed_the_longest_recurring_suffix():
    proposer = NgramProposer(min_n=1, max_n=3)
    #            0  1  2  3  4  5  6  7  8  9
    history = [5, 6, 7, 8, 9, 1, 6, 7, 2, 6, 7]
    # Suffix (2, 6, 7) never recurs; (6, 7) first occurs at 1..2, followed by 8, 9, 1.
    assert proposer.propose(history, 3) == [8, 9, 1]
    assert proposer.propose(history, 1) == [8]


def test_ngram_proposes_fewer_near_the_end_and_none_without_a_match():
    proposer = NgramProposer(min_n=2, max_n=2)
    assert proposer.propose([1, 2, 3, 1, 2], 4) == [3, 1, 2]  # only 3 tokens follow the match
    assert proposer.propose([1, 2, 3, 4, 5], 4) == []
    assert proposer.propose([1, 2], 4) == []
    assert proposer.propose([3, 3, 3, 3], 0) == []


def test_ngram_rejects_bad_bounds():
    with pytest.raises(ValueError, match="1 <= min_n <= max_n"):
        NgramProposer(min_n=3, max_n=2)


def test_greedy_verification_accepts_the_matching_prefix_and_adds_the_models_token():
    drafts = [4, 9, 2]
    assert accepted_prefix(drafts, [4, 9, 7, 5]) == 2
    assert emitted_tokens(drafts, [4, 9, 7, 5], 2) == [4, 9, 7]
    assert accepted_prefix(drafts, [1, 9, 2, 5]) == 0
    assert emitted_tokens(drafts, [1, 9, 2, 5], 0) == [1]
    assert accepted_prefix(drafts, [4, 9, 2, 5]) == 3
    assert emitted_tokens(drafts, [4, 9, 2, 5], 3) == [4, 9, 2, 5]
    assert emitted_tokens([], [8], 0) == [8]  # a plain decode


def test_sampler_is_greedy_by_default_and_seeded_with_a_temperature():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 0.0, 1.9]])
    assert Sampler()(logits) == [1, 0]
    wide = torch.zeros(64, 50)
    first, second = Sampler(1.0, seed=4)(wide), Sampler(1.0, seed=4)(wide)
    assert first == second
    assert len(set(first)) > 10  # uniform logits: many different tokens
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        Sampler(-1.0)
