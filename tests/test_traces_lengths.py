"""Length distributions (traces/length_distributions.py): each one's values, clipping, seeding, specs."""
from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import shared_path
from traces import length_distribution, read_lengths, sample_lengths
from traces.length_distributions import (EmpiricalLength, FixedLength, LogNormalLength, NormalLength, UniformLength,
                                         ZipfLength)
from traces.trace_stats import spearman

ARXIV = ("traces", "vidur", "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv")
SHAREGPT = ("traces", "sarathi_serve", "sharegpt_8k_filtered_stats_llama2_tokenizer.csv")
BWB = ("traces", "etalon", "bwb_stats_llama2_tokenizer_filtered_v2.csv")


def rng(seed=0):
    return np.random.default_rng(seed)


def test_fixed_and_uniform():
    assert FixedLength(tokens=7).sample(3, rng()).tolist() == [7, 7, 7]
    lengths = UniformLength(low=2, high=4).sample(10_000, rng())
    assert lengths.dtype == np.int64 and set(lengths.tolist()) == {2, 3, 4}  # both ends included
    assert np.bincount(lengths)[2:].tolist() == pytest.approx([3333] * 3, rel=0.05)


def test_normal_has_its_mean_and_std():
    lengths = NormalLength(mean=1000, std=100).sample(50_000, rng())
    assert lengths.mean() == pytest.approx(1000, abs=2)
    assert lengths.std() == pytest.approx(100, rel=0.02)


def test_lognormal_mean_and_std_are_in_tokens():
    lengths = LogNormalLength(mean=500, std=300).sample(200_000, rng())
    assert lengths.mean() == pytest.approx(500, rel=0.01)
    assert lengths.std() == pytest.approx(300, rel=0.03)
    # The median is exp(mu) = mean / sqrt(1 + std²/mean²) = 500 / sqrt(1.36) = 428.7.
    assert np.median(lengths) == pytest.approx(428.7, rel=0.01)


def test_bounded_zipf_probabilities_fall_as_one_over_rank_to_the_theta():
    lengths = ZipfLength(theta=1.0, min_tokens=10, max_tokens=20).sample(200_000, rng())
    assert lengths.min() == 10 and lengths.max() == 20
    harmonic_11 = sum(1 / k for k in range(1, 12))
    share = np.bincount(lengths - 10, minlength=11) / lengths.size
    assert share.tolist() == pytest.approx([1 / k / harmonic_11 for k in range(1, 12)], abs=0.004)
    steep = ZipfLength(theta=2.0, max_tokens=1000).sample(100_000, rng())
    assert np.mean(steep == 1) == pytest.approx(1 / sum(k ** -2.0 for k in range(1, 1001)), abs=0.005)  # 0.608


def test_clipping_piles_the_tails_on_the_bounds():
    lengths = NormalLength(mean=100, std=1000, min_tokens=50, max_tokens=200).sample(10_000, rng())
    assert lengths.min() == 50 and lengths.max() == 200
    assert np.mean(lengths == 50) == pytest.approx(0.48, abs=0.02)  # P(N(100, 1000) < 50) = 0.48
    assert FixedLength(tokens=900, max_tokens=512).sample(2, rng()).tolist() == [512, 512]
    assert NormalLength(mean=0, std=0).sample(2, rng()).tolist() == [1, 1]  # never below 1 token


def test_the_same_seed_gives_the_same_lengths():
    for dist in (UniformLength(low=1, high=9000), NormalLength(mean=50, std=20), LogNormalLength(mean=50, std=20),
                 ZipfLength(theta=1.2, max_tokens=4096)):
        assert dist.sample(100, rng(3)).tolist() == dist.sample(100, rng(3)).tolist()
        assert dist.sample(100, rng(3)).tolist() != dist.sample(100, rng(4)).tolist()


def test_lengths_only_files_facts():
    arxiv = read_lengths(shared_path(*ARXIV))
    assert arxiv.format == "lengths" and arxiv.rejected_rows == {} and arxiv.ignored_columns == ()
    assert arxiv.prompt_tokens.size == 28_257
    assert int(np.sum(arxiv.prompt_tokens == 1)) == 72
    sharegpt = read_lengths(shared_path(*SHAREGPT))
    assert sharegpt.prompt_tokens.size == 30_731 and int(np.sum(sharegpt.prompt_tokens == 1)) == 1
    assert (sharegpt.output_tokens.min(), sharegpt.output_tokens.max()) == (2, 1_024)


def test_empirical_from_a_file_draws_only_its_values():
    path = str(shared_path(*ARXIV))
    real = read_lengths(path).output_tokens
    drawn = EmpiricalLength(file=path, column="output").sample(20_000, rng())
    assert set(drawn.tolist()) <= set(real.tolist())
    assert np.median(drawn) == pytest.approx(np.median(real), rel=0.03)  # 167
    clipped = EmpiricalLength(file=path, column="output", max_tokens=100).sample(1_000, rng())
    assert clipped.max() == 100


def test_empirical_from_a_profile_follows_its_quantiles():
    drawn = EmpiricalLength(profile="azure-conv", column="prompt").sample(20_000, rng())
    assert np.median(drawn) == pytest.approx(1_020, rel=0.05)
    assert drawn.min() >= 2 and drawn.max() <= 14_050


def test_one_source_for_both_lengths_keeps_its_correlation():
    path = str(shared_path(*BWB))
    real = read_lengths(path)
    real_rho = spearman(real.prompt_tokens, real.output_tokens)  # 0.805: long documents, long outputs
    joint = sample_lengths(EmpiricalLength(file=path), EmpiricalLength(file=path, column="output"), 20_000, rng())
    assert spearman(*joint) == pytest.approx(real_rho, abs=0.02)
    from_profile = sample_lengths(EmpiricalLength(profile="bwb"), EmpiricalLength(profile="bwb", column="output"),
                                  20_000, rng())
    assert spearman(*from_profile) == pytest.approx(real_rho, abs=0.03)
    mixed = sample_lengths(EmpiricalLength(file=path), EmpiricalLength(profile="bwb", column="output"), 20_000, rng())
    assert abs(spearman(*mixed)) < 0.03  # different sources: independent


def test_specs_build_each_distribution():
    assert length_distribution(512) == FixedLength(tokens=512)
    assert length_distribution([100, 200]) == UniformLength(low=100, high=200)
    assert length_distribution({"dist": "lognormal", "mean": 300, "std": 100, "max": 2048}) == LogNormalLength(
        mean=300, std=100, max_tokens=2048)
    assert length_distribution({"dist": "zipf", "theta": 1.1, "min": 4, "max": 64}) == ZipfLength(
        theta=1.1, min_tokens=4, max_tokens=64)
    assert length_distribution({"dist": "empirical", "profile": "sharegpt"}, "output") == EmpiricalLength(
        profile="sharegpt", column="output")


@pytest.mark.parametrize("spec, message", [
    ({"dist": "pareto"}, "unknown length distribution 'pareto'; valid dist: fixed, uniform, normal, lognormal, zipf, empirical"),
    ({"dist": "normal", "mean": 5, "sd": 1}, "normal does not take sd; its keys: mean, std, min, max"),
    ({"dist": "lognormal", "mean": 5}, "lognormal needs std"),
    ({"dist": "zipf", "theta": 1.0}, "zipf needs max"),
    ({"dist": "empirical"}, "empirical needs exactly one of file"),
    ({"dist": "empirical", "profile": "nope"}, "unknown workload profile 'nope'; built-in: arxiv-summarization"),
    ({"dist": "uniform", "low": 10, "high": 5}, r"high must be a whole number of tokens >= low \(10\)"),
    ({"dist": "fixed", "tokens": 5, "min": 8, "max": 4}, r"max must be a whole number of tokens >= min \(8\)"),
    ({"dist": "lognormal", "mean": 0, "std": 1}, "mean must be a finite number >= 1, got 0"),
    ({"dist": "lognormal", "mean": 0.5, "std": 1}, "mean must be a finite number >= 1"),  # under 1 token: no length
    (0, "tokens must be a whole number of tokens >= 1, got 0"),
    ("long", "prompt length must be an int"),
    ([1, 2, 3], "prompt length must be an int"),
])
def test_bad_specs_say_what_is_valid(spec, message):
    with pytest.raises(ValueError, match=message):
        length_distribution(spec)


@pytest.mark.parametrize("spec, message", [
    # A normal of mean 1e308 cast its draws to -9.2e18 tokens, a log-normal of std 1e300 raised
    # OverflowError, a fixed 2**40 tokens passed: refused when sampled (a config's own bound,
    # tighter, speaks first when the config is loaded).
    ({"dist": "normal", "mean": 1e308, "std": 1e308}, "normal mean must be at most 2147483647 tokens .*got 1e"),
    ({"dist": "lognormal", "mean": 1, "std": 1e300}, "lognormal std must be at most 2147483647 tokens"),
    (2**40, r"fixed tokens must be at most 2147483647 tokens \(the longest length a trace may hold\), got 1099511627776"),
    ([1, 2**62], "uniform high must be at most 2147483647"),
    ({"dist": "fixed", "tokens": 5, "max": 2**40}, "fixed max must be at most 2147483647"),
])
def test_lengths_past_what_a_trace_may_hold_are_refused_when_sampled(spec, message):
    distribution = length_distribution(spec)
    with pytest.raises(ValueError, match=message):
        distribution.sample(3, np.random.default_rng(0))
    with pytest.raises(ValueError, match=message):
        sample_lengths(distribution, length_distribution(5), 3, np.random.default_rng(0))


def test_unbounded_draws_stop_at_the_largest_length_a_reader_accepts():
    # normal(2e9, 2e9) draws past 2**31 - 1 are clipped there, never cast to garbage int64.
    draws = length_distribution({"dist": "normal", "mean": 2e9, "std": 2e9}).sample(1000, np.random.default_rng(0))
    assert draws.max() == 2**31 - 1 and draws.min() == 1
