"""Defects a re-check pass found in the config checks, the labels and the rows of cluster points
(/tmp/recheck_repros: v06, v08, v09, gen/run_label, n01_pool_device), each with the right message or value."""
from __future__ import annotations

import textwrap

import pytest

from experiments.config import ConfigError, EngineConfig, LinkConfig, SweepConfig, SyntheticTrace, load_config
from profiler.unknown_key import unknown_key_message, valid_keys

HEAD = """\
name: a
model: llama-3-8b
device: h100-sxm
"""
TRACE = "trace: {kind: synthetic, qps: 2.0, num_requests: 10, prompt_tokens: 512, output_tokens: 16, seed: 0}\n"


def _written(tmp_path, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def error_of(tmp_path, text: str, overrides=()) -> str:
    path = _written(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path, list(overrides))
    return str(info.value).removeprefix(f"{path}: ")


# ----- v09: an unknown key in any block lists that block's valid keys -------------------------

ENGINE_KEYS = ", ".join(EngineConfig.model_fields)


def test_an_unknown_engine_key_lists_the_engine_keys_and_the_close_one(tmp_path):
    message = error_of(tmp_path, HEAD + TRACE + "engine: {scheduler: vllm_v1, chunk_sise: 2048}\n")
    assert message == f"engine.chunk_sise (line 5): unknown key (did you mean chunk_size?); valid keys: {ENGINE_KEYS}"
    assert ENGINE_KEYS.startswith("scheduler, chunk_size, max_num_batched_tokens, ")


def test_an_unknown_trace_key_lists_the_keys_of_its_kind(tmp_path):
    """trace kind synthetic: the location is ('trace', 'synthetic', 'arival'), the branch named by its tag."""
    message = error_of(tmp_path, HEAD + TRACE.replace("seed: 0}", "seed: 0, arival: poisson}")
                       + "engine: {scheduler: vllm_v1}\n")
    assert message == ("trace.arival (line 4): unknown key (did you mean arrival?); valid keys: shared_prefix_tokens, "
                       "num_prefixes, prompt_tokens, output_tokens, arrival, burstiness, kind, qps, num_requests, seed")


def test_an_unknown_cluster_link_key_lists_the_link_keys(tmp_path):
    message = error_of(tmp_path, HEAD + TRACE + "engine: {scheduler: vllm_v1}\n"
                       "cluster:\n  prefill: {replicas: 1}\n  decode: {replicas: 1}\n  link: {bandwith_gb_s: 10}\n")
    assert message == ("cluster.link.bandwith_gb_s (line 9): unknown key (did you mean bandwidth_gb_s?); "
                       "valid keys: bandwidth_gb_s, latency_s, layer_pipelined")


def test_an_unknown_pool_engine_key_lists_the_keys_a_pool_reads(tmp_path):
    """A pool's engine: takes no replicas, router, router_overlap_weight or num_gpus: they are left out."""
    message = error_of(tmp_path, HEAD + TRACE + "engine: {scheduler: vllm_v1}\n"
                       "cluster:\n  prefill: {replicas: 1, engine: {chunk_sise: 3}}\n  decode: {replicas: 1}\n")
    pool_keys = ", ".join(k for k in EngineConfig.model_fields
                          if k not in ("replicas", "router", "router_overlap_weight", "num_gpus"))
    assert message == (f"cluster.prefill.engine (line 7): chunk_sise: unknown key (did you mean chunk_size?); "
                       f"valid keys: {pool_keys}")
    assert "tensor_parallel_size, pipeline_parallel_size, data_parallel_size," in pool_keys


def test_an_unknown_top_level_key_and_one_without_a_close_match(tmp_path):
    message = error_of(tmp_path, HEAD + TRACE + "engine: {scheduler: vllm_v1, zzz: 1}\nslos: {}\n")
    assert message.splitlines() == [
        f"engine.zzz (line 5): unknown key; valid keys: {ENGINE_KEYS}",
        f"{tmp_path / 'c.yaml'}: slos (line 6): unknown key (did you mean slo?); valid keys: "
        f"{', '.join(SweepConfig.model_fields)}"]


def test_valid_keys_walks_fields_and_tagged_unions():
    assert valid_keys(SweepConfig, ("engine", "x")) == list(EngineConfig.model_fields)
    assert valid_keys(SweepConfig, ("trace", "synthetic", "x")) == list(SyntheticTrace.model_fields)
    assert valid_keys(SweepConfig, ("cluster", "link", "x")) == list(LinkConfig.model_fields)
    assert valid_keys(SweepConfig, ("trace", "no_such_kind", "x")) == []  # an untold branch: no list
    # one valid key starting with the unknown one wins over difflib's ratio (gemm: fp8_gemm 0.67, gemm_flops 0.57)
    assert unknown_key_message(SweepConfig, ("engine", "enable_prefix")).startswith(
        "unknown key (did you mean enable_prefix_caching?); valid keys: scheduler, ")


# ----- v08: router_overlap_weight beside cluster: a hint that leads to a valid config ----------

CLUSTER = "cluster:\n  prefill: {replicas: 2, router: prefix_aware}\n  decode: {replicas: 1}\n"
NOT_READ = ("engine.router_overlap_weight (line 5): engine.router_overlap_weight is not read with cluster: it applies "
            "only to a colocated engine.router: prefix_aware; a pool's prefix_aware router picks the longest cached "
            "prefix, then the least outstanding, with no weight: remove it")


def test_a_weight_beside_cluster_says_remove_it_whatever_engine_router_is(tmp_path):
    """Once the first error said "set engine.router: prefix_aware" and doing so gave this one."""
    for router in ("", ", router: prefix_aware"):
        engine = f"engine: {{scheduler: vllm_v1, chunk_size: 2048, router_overlap_weight: 3{router}}}\n"
        assert error_of(tmp_path, HEAD + TRACE + engine + CLUSTER) == NOT_READ
    _, points = load_config(_written(tmp_path, HEAD + TRACE + "engine: {scheduler: vllm_v1, chunk_size: 2048}\n"
                                     + CLUSTER))  # the hint followed: it loads
    assert [p["cluster"]["prefill"]["router"] for p in points] == ["prefix_aware"]
