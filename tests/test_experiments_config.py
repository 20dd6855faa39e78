"""Config validation: bad keys and values are errors naming the file, the key and what is valid."""
from __future__ import annotations

import textwrap

import pytest

from experiments.config import ConfigError, SweepConfig, describe_point, load_config


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text))
    return path


BASE = """
trace: {kind: poisson, qps: 2, num_requests: 10}
engine: {scheduler: sarathi, chunk_size: 512}
"""


def error_of(tmp_path, text, overrides=()):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), list(overrides))
    return str(info.value)


def test_variants_are_crossed_and_inherited_chunk_size_dropped_for_vllm(tmp_path):
    path = write(tmp_path, BASE + (
        "variants:\n"
        "  - {engine.scheduler: vllm}\n"
        "  - {engine.scheduler: sarathi, engine.chunk_size: [256, 1024]}\n"))
    _, points = load_config(path)
    labels = [describe_point(SweepConfig.model_validate(p)) for p in points]
    assert labels == ["vllm", "sarathi chunk=256", "sarathi chunk=1024"]
    assert "chunk_size" not in points[0]["engine"]


def test_unknown_key_names_file_key_and_line(tmp_path):
    message = error_of(tmp_path, BASE + "engine2: {}\n")
    assert "c.yaml" in message and "engine2" in message and "unknown key" in message and "line 4" in message


def test_misspelt_engine_key(tmp_path):
    message = error_of(tmp_path, "trace: {kind: poisson, qps: 2}\nengine: {chunk_sise: 256}\n")
    assert "engine.chunk_sise" in message and "unknown key" in message


def test_key_the_scheduler_does_not_use_is_an_error(tmp_path):
    message = error_of(tmp_path, "trace: {kind: poisson, qps: 2}\nengine: {scheduler: vllm, chunk_size: 512}\n")
    assert "engine.chunk_size is not used by scheduler 'vllm'" in message
    message = error_of(tmp_path, BASE + "variants:\n  - {engine.scheduler: vllm, engine.chunk_size: 256}\n")
    assert "variants[0]" in message and "chunk_size" in message


def test_bad_values_say_what_is_valid(tmp_path):
    assert "greater than 0" in error_of(tmp_path, "trace: {kind: poisson, qps: -1}\n")
    assert "'profile', 'file', 'poisson'" in error_of(tmp_path, "trace: {kind: csv, qps: 1}\n")
    message = error_of(tmp_path, "trace: {kind: poisson, qps: 1}\nengine: {scheduler: lightllm}\n")
    assert "valid: faster_transformer, fastgen, orca, sarathi, simple_chunking, vllm, vllm_v1" in message
    assert "e.g. tbt_p99_s" in error_of(tmp_path, BASE + "slo: {tbt_p98_s: 0.1}\n")
    assert "max_num_seqs (600) must be <= chunk_size (512)" in error_of(
        tmp_path, "trace: {kind: poisson, qps: 1}\nengine: {max_num_seqs: 600}\n")


def test_enumerated_engine_values_list_the_valid_ones(tmp_path):
    message = error_of(tmp_path, BASE.replace("chunk_size: 512", "router: nearest"))
    assert "engine.router" in message and "'round_robin', 'least_outstanding' or 'random'" in message
    message = error_of(tmp_path, BASE.replace("chunk_size: 512", "acceptance: 1.5"))
    assert "engine.acceptance" in message
    message = error_of(tmp_path, BASE.replace("chunk_size: 512", "long_prefill_token_threshold: 64"))
    assert "not used by scheduler 'sarathi' (only by vllm_v1)" in message


def test_dotted_override(tmp_path):
    base, points = load_config(write(tmp_path, BASE), ["trace.qps=7.5", "engine.chunk_size=1024"])
    assert base.trace.qps == 7.5 and base.engine.chunk_size == 1024 and len(points) == 1
    assert "--set" in error_of(tmp_path, BASE, ["trace.qps"])


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")
    assert "not valid YAML" in error_of(tmp_path, "trace: {kind: poisson\n")
    assert "top level must be a mapping" in error_of(tmp_path, "- 1\n- 2\n")


# ----- found by a new-user pass -------------------------------------------------------------
def test_booleans_are_not_numbers(tmp_path):
    message = error_of(tmp_path, "trace: {kind: poisson, qps: 2}\nengine: {chunk_size: true}\n")
    assert "chunk_size: expected a number" in message


def test_deployment_checked_before_running(tmp_path):
    assert "model:" in error_of(tmp_path, BASE + "model: llama-9-8b\n")
    assert "device:" in error_of(tmp_path, BASE + "device: tpu-v9\n")
    message = error_of(tmp_path, BASE.replace("chunk_size: 512", "tensor_parallel_size: 3"))
    assert "engine.tensor_parallel_size" in message
    message = error_of(tmp_path, BASE.replace("chunk_size: 512", "max_model_len: 10000000"))
    assert "exceeds llama-3-8b's context of 8192 tokens" in message


def test_binary_and_empty_variant_lists(tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ConfigError, match="not a text"):
        load_config(path)
    assert "empty list gives no points" in error_of(tmp_path, BASE + "variants:\n  - {engine.chunk_size: []}\n")


def test_set_scheduler_drops_keys_only_the_old_scheduler_reads(tmp_path):
    base, points = load_config(write(tmp_path, BASE), ["engine.scheduler=vllm"])
    assert base.engine.scheduler == "vllm" and "chunk_size" not in points[0]["engine"]
    assert "not used by scheduler 'vllm'" in error_of(tmp_path, BASE, ["engine.scheduler=vllm", "engine.chunk_size=64"])


def test_variant_errors_point_at_the_variant_line(tmp_path):
    text = BASE + "variants:\n  - {engine.chunk_size: 256}\n  - {engine.chunk_size: 0}\n"
    assert "variants[1]" in (message := error_of(tmp_path, text)) and "(line 6)" in message


def test_relative_paths_resolve_against_the_config_file(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n")
    config = tmp_path / "c.yaml"
    config.write_text("trace: {kind: file, path: data/t.csv}\n")
    monkeypatch.chdir("/")
    base, _ = load_config(config)
    assert base.trace.path == str(tmp_path / "data" / "t.csv")
    monkeypatch.chdir(tmp_path / "data")
    base, _ = load_config(config, ["trace.path=t.csv"])  # --set paths: relative to the working directory
    assert base.trace.path == str(tmp_path / "data" / "t.csv")


def test_profile_cost_model_path_resolves_against_the_config_file(tmp_path):
    from experiments.config import _resolve_paths
    tree = {"cost_model": "profile:prof", "model": "llama-3-8b"}
    _resolve_paths(tree, tmp_path)
    assert tree == {"cost_model": f"profile:{tmp_path / 'prof'}", "model": "llama-3-8b"}
    tree = {"cost_model": "auto"}
    _resolve_paths(tree, tmp_path)
    assert tree == {"cost_model": "auto"}


def test_speculative_settings_checked_before_running(tmp_path):
    spec = BASE.replace("chunk_size: 512", "chunk_size: 512, split_n: 2")
    assert "acceptance must be a probability" in error_of(tmp_path, spec.replace("split_n: 2", "split_n: 2, acceptance: 1.5"))
    assert "acceptance must be a probability" in error_of(tmp_path, spec.replace("split_n: 2", "split_n: 2, acceptance: []"))
    message = error_of(tmp_path, spec.replace("split_n: 2", "split_n: 2, acceptance: [0.5, 0.5, 0.5]"))
    assert "lists 3 per-position probabilities but split_n is 2" in message
    message = error_of(tmp_path, spec.replace("split_n: 2", "split_n: 2, acceptance: {file: missing.csv}"))
    assert "engine.acceptance.file" in message and "missing.csv" in message
    message = error_of(tmp_path, spec.replace("split_n: 2", "split_n: 2, draft: {model: llama-9}"))
    assert "engine.draft.model" in message


def test_search_refuses_a_closed_loop_trace(tmp_path):
    text = ("trace: {kind: closed_loop, clients: 4, num_requests: 20}\n"
            "search: {qps: [1, 8], num_requests: 20, seeds: 1}\n")
    assert "closed-loop trace sets a number of clients" in error_of(tmp_path, text)
