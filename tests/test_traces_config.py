"""`trace:` config kinds: validation errors that name the key, and the requests each kind loads."""
from __future__ import annotations

import numpy as np
import pytest

from experiments.config import ConfigError, load_config
from experiments.point import load_requests
from tests.conftest import shared_path
from traces import ClosedLoopWorkload, load_profile
from traces.trace_stats import gap_cv


def trace_of(tmp_path, trace_yaml, overrides=()):
    path = tmp_path / "c.yaml"
    path.write_text(f"trace: {trace_yaml}\n")
    base, _ = load_config(path, list(overrides))
    return base.trace


def error_of(tmp_path, trace_yaml):
    with pytest.raises(ConfigError) as info:
        trace_of(tmp_path, trace_yaml)
    return str(info.value)


def test_profile_kind_is_the_quickstart_trace_and_takes_arrivals_and_clipping(tmp_path):
    trace = trace_of(tmp_path, "{kind: profile, name: azure-conv, qps: 16, num_requests: 300, seed: 0}")
    requests, info = load_requests(trace)
    assert requests == load_profile("azure-conv").sample(300, qps=16.0, seed=0)
    assert info == {"trace_source": "profile azure-conv", "trace_rows_rejected": 0}
    trace = trace_of(tmp_path, "{kind: profile, name: sharegpt, qps: 4, num_requests: 5000, arrival: gamma, "
                               "burstiness: 0.25, prompt_tokens: {max: 2048}, output_tokens: {min: 16, max: 256}}")
    requests, _ = load_requests(trace)
    assert max(r.prompt_tokens for r in requests) == 2048
    assert {min(r.output_tokens for r in requests), max(r.output_tokens for r in requests)} == {16, 256}
    assert gap_cv(np.array([r.arrival_s for r in requests])) == pytest.approx(2.0, rel=0.1)


def test_synthetic_kind_with_every_distribution(tmp_path):
    trace = trace_of(tmp_path, "{kind: synthetic, qps: 8, num_requests: 4000, arrival: constant, "
                               "prompt_tokens: {dist: normal, mean: 600, std: 50, min: 500}, "
                               "output_tokens: {dist: empirical, profile: bwb, max: 1000}}")
    requests, info = load_requests(trace)
    assert requests[1].arrival_s == 0.125 and info["trace_source"] == "synthetic constant"
    assert min(r.prompt_tokens for r in requests) == 500
    assert np.mean([r.prompt_tokens for r in requests]) == pytest.approx(600, rel=0.02)
    assert max(r.output_tokens for r in requests) == 1000
    old = trace_of(tmp_path, "{kind: poisson, qps: 2, num_requests: 3, prompt_tokens: [10, 20], output_tokens: 4}")
    assert [r.output_tokens for r in load_requests(old)[0]] == [4, 4, 4]


def test_file_kind_filters_windows_cuts_and_scales(tmp_path):
    conv = str(shared_path("traces", "azure_public_dataset", "AzureLLMInferenceTrace_conv.csv"))
    trace = trace_of(tmp_path, "{kind: file, window_s: [600, 1200], max_requests: 1000, qps: 20}", [f"trace.path={conv}"])
    requests, info = load_requests(trace)
    assert len(requests) == 1000 and requests[0].arrival_s == 0.0
    assert 999 / requests[-1].arrival_s == pytest.approx(20.0)
    assert (info["trace_source"], info["trace_rows_rejected"]) == (conv, 0)
    same_second = str(shared_path("cases", "same_second", "trace.csv"))
    burst = trace_of(tmp_path, "{kind: file, models: [ChatGPT]}", [f"trace.path={same_second}"])
    assert [r.prompt_tokens for r in load_requests(burst)[0]] == [310, 95, 410]


def test_lengths_file_kind_replays_rows_in_order_with_generated_arrivals(tmp_path):
    arxiv = str(shared_path("traces", "vidur", "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"))
    trace = trace_of(tmp_path, "{kind: lengths_file, qps: 2, arrival: constant, max_requests: 3}", [f"trace.path={arxiv}"])
    requests, info = load_requests(trace)
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in requests] == [
        (0.0, 3772, 54), (0.5, 2015, 156), (1.0, 3858, 133)]
    assert info["trace_rows_rejected"] == 0


def test_closed_loop_kind_builds_the_workload_the_simulator_drives(tmp_path):
    trace = trace_of(tmp_path, "{kind: closed_loop, clients: 32, think_time_s: 0.5, num_requests: 64, "
                               "prompt_tokens: {dist: empirical, profile: sharegpt}, output_tokens: 128}")
    workload = trace.workload()
    assert isinstance(workload, ClosedLoopWorkload)
    assert (workload.num_clients, workload.think_time_s, workload.num_requests) == (32, 0.5, 64)
    first = workload.initial_requests()
    assert len(first) == 32 and {r.output_tokens for r in first} == {128}
    assert workload.next_request(5, 2.0).arrival_s == 2.5


@pytest.mark.parametrize("trace_yaml, message", [
    ("{kind: closed_loop, clients: 0}", "trace.clients (line 1): Input should be greater than or equal to 1"),
    ("{kind: closed_loop, clients: 4, think_time_s: -1}", "trace.think_time_s (line 1)"),
    ("{kind: poisson, qps: 2, burstiness: 0.5}", "burstiness applies to arrival: gamma only"),
    ("{kind: poisson, qps: 2, arrival: gamma}", "for arrival: gamma use kind: synthetic"),
    ("{kind: synthetic, qps: 2, arrival: bursty}", "trace.arrival (line 1): Input should be 'poisson', 'gamma' or 'constant'"),
    ("{kind: synthetic, qps: 2, prompt_tokens: {dist: pareto}}", "trace.prompt_tokens (line 1): unknown length distribution"),
    ("{kind: synthetic, qps: 2, output_tokens: {dist: zipf, theta: 1}}", "trace.output_tokens (line 1): zipf needs max"),
    ("{kind: profile, name: splitwise, qps: 2}", "trace.name (line 1): unknown workload profile 'splitwise'"),
    ("{kind: profile, name: sharegpt, qps: 2, prompt_tokens: {min: 10, max: 5}}", "max (5) must be >= min (10)"),
    ("{kind: file, format: lengths}", "unknown trace format 'lengths'; valid: auto, canonical"),
    ("{kind: file, window_s: [5, 1]}", "window_s must be [start, end) seconds with 0 <= start < end"),
    ("{kind: lengths_file}", "trace.qps (line 1): Field required"),
    ("{kind: replay, qps: 1}", "'profile', 'file', 'poisson', 'synthetic', 'lengths_file', 'closed_loop'"),
])
def test_bad_trace_configs_name_the_key_and_what_is_valid(tmp_path, trace_yaml, message):
    assert message in error_of(tmp_path, trace_yaml)


# ----- a file trace's path is checked when the config loads (issue 14, item 14) ---------------
def test_a_missing_trace_file_is_a_config_error_naming_the_key_line_and_resolved_path(tmp_path, monkeypatch):
    config = tmp_path / "c.yaml"
    config.write_text("name: t\ntrace: {kind: file,\n        path: data/missing.csv}\n")
    monkeypatch.chdir("/")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert str(info.value) == f"{config}: trace.path (line 3): no such file: {tmp_path / 'data' / 'missing.csv'}"
    with pytest.raises(ConfigError) as info:
        load_config(config, [f"trace.path={tmp_path}"])
    assert str(info.value) == f"{config}: trace.path: is a folder, not a trace file: {tmp_path}"


def test_an_unset_trace_path_is_a_config_error_for_both_file_kinds(tmp_path):
    for kind in ("file", "lengths_file, qps: 2"):
        config = tmp_path / "c.yaml"
        config.write_text(f"trace: {{kind: {kind}}}\n")
        with pytest.raises(ConfigError) as info:
            load_config(config)
        assert str(info.value) == (f"{config}: trace.path: not set: "
                                   "give it in the config or with --set trace.path=FILE")


def test_a_variant_with_a_missing_trace_file_is_named(tmp_path):
    (tmp_path / "a.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n")
    config = tmp_path / "c.yaml"
    config.write_text("trace: {kind: file, path: a.csv}\nvariants:\n  - {}\n  - {trace.path: b.csv}\n")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert str(info.value) == (f"{config}: variants[1] {{trace.path: b.csv}}: trace.path: "
                               f"no such file: {tmp_path / 'b.csv'}")


def test_a_fifo_or_device_as_trace_path_is_refused_at_load(tmp_path):
    """A FIFO waits for a writer forever and /dev/zero never ends: neither is read, and the error
    says what it is instead of 'no such file'."""
    import os

    from experiments.config import ConfigError, load_config

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for target in (fifo, "/dev/zero"):
        with pytest.raises(ConfigError, match=f"trace.path: not a regular file .*: {target}"):
            load_config("experiments/configs/quickstart.yaml", [f"trace={{kind: file, path: {target}}}"])
