"""Built-in workload profiles: the committed JSON, and samples that match the real trace."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import shared_path
from traces import WorkloadProfile, load_profile, read_lengths, read_trace
from traces.profiles.build_profiles import main as build_profiles
from traces.trace_stats import spearman
from traces.workload_profile import PROFILES_DIR, builtin_profiles

AZURE_CONV = ("traces", "azure_public_dataset", "AzureLLMInferenceTrace_conv.csv")


def lengths(requests):
    return np.array([r.prompt_tokens for r in requests]), np.array([r.output_tokens for r in requests])


def test_azure_conv_profile_figures_and_source():
    profile = load_profile("azure-conv")
    assert profile.num_requests == 19_366
    assert profile.span_s == pytest.approx(3501.7, abs=0.1)
    assert profile.mean_rate_qps == pytest.approx(19_365 / 3501.72, rel=1e-4)
    assert profile.probability[0] == 0.0 and profile.probability[-1] == 1.0
    assert {0.5, 0.9, 0.995, 0.999} <= set(profile.probability.tolist())
    assert (profile.prompt_quantiles_tokens[0], profile.prompt_quantiles_tokens[-1]) == (2, 14_050)
    assert (profile.output_quantiles_tokens[0], profile.output_quantiles_tokens[-1]) == (7, 1_000)
    assert profile.license == "CC-BY-4.0"
    assert profile.source["repository"] == "Azure/AzurePublicDataset"
    assert profile.source["file"] == "data/AzureLLMInferenceTrace_conv.csv"


def test_profiles_rebuild_identically_from_the_public_traces(tmp_path):
    traces_dir = shared_path("traces")
    build_profiles(["--traces-dir", str(traces_dir), "--out-dir", str(tmp_path)])
    assert sorted(path.name for path in tmp_path.glob("*.json")) == sorted(f"{name}.json" for name in builtin_profiles())
    for path in tmp_path.glob("*.json"):
        assert json.loads(path.read_text()) == json.loads((PROFILES_DIR / path.name).read_text()), path.name


@pytest.mark.parametrize("name, repository, license, rows, has_arrivals", [
    ("azure-code", "Azure/AzurePublicDataset", "CC-BY-4.0", 8_819, True),
    ("mooncake-conversation", "kvcache-ai/Mooncake", "Apache-2.0", 12_031, True),
    ("arxiv-summarization", "microsoft/vidur", "MIT", 28_257, False),
    ("sharegpt", "microsoft/sarathi-serve", "Apache-2.0", 30_731, False),
    ("bwb", "project-etalon/etalon", "Apache-2.0", 33_768, False),
])
def test_every_profile_cites_its_source_and_licence(name, repository, license, rows, has_arrivals):
    profile = load_profile(name)
    assert (profile.source["repository"], profile.license, profile.num_requests) == (repository, license, rows)
    assert profile.source["file"].endswith((".csv", ".jsonl"))
    assert profile.has_arrivals == has_arrivals
    assert (profile.span_s is None, profile.gap_cv is None) == (not has_arrivals, not has_arrivals)


def test_profile_figures_match_the_traces_readme():
    mooncake = load_profile("mooncake-conversation")
    assert mooncake.span_s == pytest.approx(3_537, abs=1.0)
    assert mooncake.output_quantiles_tokens[0] == 1  # 72 rows have output_length = 1
    arxiv = load_profile("arxiv-summarization")
    assert arxiv.prompt_quantiles_tokens[0] == 1  # 72 rows with a 1-token prompt
    assert load_profile("azure-conv").gap_cv == pytest.approx(1.094, abs=0.001)
    assert load_profile("azure-code").gap_cv == pytest.approx(13.15, abs=0.01)  # far burstier than Poisson


def test_a_lengths_only_profile_needs_a_rate():
    sharegpt = load_profile("sharegpt")
    with pytest.raises(ValueError, match="profile 'sharegpt' has lengths only .no arrivals.: give qps"):
        sharegpt.sample(10)
    trace = sharegpt.sample(4_000, qps=2.0, seed=0, arrival="gamma", burstiness=0.5)
    assert (len(trace) - 1) / trace[-1].arrival_s == pytest.approx(2.0, rel=0.1)
    assert max(r.output_tokens for r in trace) <= 1_024


@pytest.mark.parametrize("name, path", [
    ("mooncake-conversation", ("traces", "mooncake", "conversation_trace.jsonl")),
    ("sharegpt", ("traces", "sarathi_serve", "sharegpt_8k_filtered_stats_llama2_tokenizer.csv")),
])
def test_new_profiles_sample_like_their_files(name, path):
    real = read_lengths(shared_path(*path))
    prompt, output = lengths(load_profile(name).sample(20_000, qps=5.0, seed=3))
    for sampled, values in ((prompt, real.prompt_tokens), (output, real.output_tokens)):
        for q in (50, 90):
            assert np.percentile(sampled, q) == pytest.approx(np.percentile(values, q), rel=0.05)


def test_sample_matches_the_real_file():
    real_prompt, real_output = lengths(read_trace(shared_path(*AZURE_CONV)).requests)
    prompt, output = lengths(load_profile("azure-conv").sample(20_000, qps=5.0, seed=3))
    for sampled, real in ((prompt, real_prompt), (output, real_output)):
        for q in (50, 90):
            assert np.percentile(sampled, q) == pytest.approx(np.percentile(real, q), rel=0.05)
    assert abs(spearman(prompt, output) - spearman(real_prompt, real_output)) < 0.05


def test_sample_reproduces_a_strong_correlation():
    profile = load_profile("azure-conv")
    strong = WorkloadProfile(**{**vars(profile), "spearman_prompt_output": 0.8})
    prompt, output = lengths(strong.sample(20_000, qps=1.0, seed=0))
    assert spearman(prompt, output) == pytest.approx(0.8, abs=0.03)


def test_sample_arrivals_lengths_and_seeding():
    profile = load_profile("azure-conv")
    trace = profile.sample(2_000, qps=8.0, seed=11)
    assert trace == profile.sample(2_000, qps=8.0, seed=11)
    assert trace != profile.sample(2_000, qps=8.0, seed=12)
    assert trace[0].arrival_s == 0.0 and [r.request_id for r in trace] == list(range(2_000))
    assert (len(trace) - 1) / trace[-1].arrival_s == pytest.approx(8.0, rel=0.1)
    assert min(min(r.prompt_tokens, r.output_tokens) for r in trace) >= 1
    default_rate = profile.sample(2_000, seed=1)
    assert (len(default_rate) - 1) / default_rate[-1].arrival_s == pytest.approx(profile.mean_rate_qps, rel=0.1)


def test_unknown_profile_lists_the_built_in_names():
    assert {"azure-conv", "azure-code"} <= set(builtin_profiles())
    with pytest.raises(ValueError, match="arxiv-summarization, azure-code, azure-conv, bwb, mooncake-conversation, sharegpt"):
        load_profile("splitwise")


def test_profile_file_missing_a_key_is_named(tmp_path):
    data = json.loads((PROFILES_DIR / "azure-conv.json").read_text())
    del data["spearman_prompt_output"]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="broken.json.*spearman_prompt_output"):
        load_profile(str(path))


@pytest.mark.parametrize("text, message", [
    ("{not json", r"broken.json: not a workload profile: not readable as JSON \(JSONDecodeError"),
    ("[" * 100_000 + "]" * 100_000, r"not readable as JSON \(RecursionError"),
    ('{"n": 1' + "0" * 4_300 + "}", r"not readable as JSON \(ValueError: Exceeds the limit \(4300 digits\)"),
    ("[1, 2]", "broken.json: not a workload profile: a JSON list, expected an object"),
])
def test_a_profile_file_that_is_not_a_json_object_is_named(tmp_path, text, message):
    path = tmp_path / "broken.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_profile(str(path))


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(spearman_prompt_output="high"), r"broken.json: workload profile holds a value of the wrong type"),
    (lambda d: d["quantiles"].update(prompt_tokens=5), "quantiles.prompt_tokens must be a list of finite numbers"),
    (lambda d: d["quantiles"]["output_tokens"].__setitem__(3, float("nan")), "quantiles.output_tokens must be a list of finite"),
    (lambda d: d.update(spearman_prompt_output=float("nan")), r"spearman_prompt_output must be in \[-1, 1\]"),
])
def test_a_profile_with_a_wrong_or_nan_value_is_named(tmp_path, change, message):
    # NaN quantiles passed the monotonicity check (NaN comparisons are False) and sampled NaN lengths.
    data = json.loads((PROFILES_DIR / "azure-conv.json").read_text())
    change(data)
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        load_profile(str(path))
