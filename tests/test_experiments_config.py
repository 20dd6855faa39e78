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
