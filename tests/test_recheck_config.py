"""Defects a re-check pass found in the config checks, the labels and the rows of cluster points
(/tmp/recheck_repros: v06, v08, v09, gen/run_label, n01_pool_device), each with the right message or value."""
from __future__ import annotations

import textwrap

import pandas as pd
import pytest

from experiments.config import (ConfigError, EngineConfig, LinkConfig, SweepConfig, SyntheticTrace, engine_gpus,
                                load_config, point_labels)
from experiments.deployment import cluster_gpus
from experiments.planning.report_header import cost_model_lines, deployment_line, device_lines
from experiments.point import device_name, run_point
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
                       "num_prefixes, prompt_tokens, output_tokens, arrival, burstiness, prompts, max_concurrency, kind, qps, "
                       "num_requests, seed")


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


# ----- v06: engine.num_gpus counts what points.csv's num_gpus counts --------------------------

COLOCATED = "engine: {scheduler: vllm_v1, chunk_size: 2048, num_gpus: %d, replicas: 2, tensor_parallel_size: 2}\n"


def test_colocated_num_gpus_is_replicas_times_tp(tmp_path):
    """2 replicas × DP 1 × TP 2 × PP 1 = 4 GPUs: num_gpus 4 loads (and is points.csv's count,
    `cluster_gpus`); num_gpus 2 (one replica's) was accepted and is refused."""
    base, _ = load_config(_written(tmp_path, HEAD + TRACE + COLOCATED % 4))
    assert engine_gpus(base.engine) == 4 and cluster_gpus(base) == 4
    assert error_of(tmp_path, HEAD + TRACE + COLOCATED % 2) == (
        "engine.num_gpus (line 5): engine.num_gpus is 2 but replicas × data_parallel_size × tensor_parallel_size × "
        "pipeline_parallel_size = 2 × 1 × 2 × 1 = 4; make them match")


LAYOUTS = """\
name: l
model: qwen3-30b-a3b
device: h100-sxm
""" + TRACE + "engine: {scheduler: vllm_v1, chunk_size: 2048, num_gpus: %d}\nlayouts: {gpus: 4}\n"
LAYOUTS_SET = ("engine.num_gpus (line 5): layouts: sets engine.data_parallel_size, engine.enable_expert_parallel, "
               "engine.num_gpus, engine.pipeline_parallel_size, engine.replicas, engine.tensor_parallel_size of every "
               "point (4 GPUs); drop it here, or drop layouts: and list the layouts as variants")


@pytest.mark.parametrize("num_gpus", [1, 4])
def test_num_gpus_beside_layouts_says_layouts_sets_it(tmp_path, num_gpus):
    """num_gpus 4 once got "DP × TP × PP = 1 × 1 × 1 = 1" from the base's check, which ran first."""
    assert error_of(tmp_path, LAYOUTS % num_gpus) == LAYOUTS_SET


def test_a_layout_key_beside_layouts_set_by_a_variant_or_set_is_named_there(tmp_path):
    text = (LAYOUTS % 4).replace(", num_gpus: 4}", "}") + "variants:\n  - {engine.tensor_parallel_size: 3}\n"
    assert error_of(tmp_path, text).startswith("variants[0] engine.tensor_parallel_size (line 8): layouts: sets ")
    assert error_of(tmp_path, (LAYOUTS % 4).replace(", num_gpus: 4}", "}"), ["engine.num_gpus=4"]).startswith(
        "--set engine.num_gpus: layouts: sets ")


# ----- gen/run_label: a label names no default the point does not read ------------------------

def test_labels_leave_out_acceptance_where_no_draft_reads_it():
    """One point drafts with acceptance 0.6; the colocated and the cluster point without split_n
    were labelled 'acceptance=0.7', a default neither reads."""
    base = {"model": "llama-3-8b", "device": "h100-sxm", "cost_model": "roofline",
            "trace": {"kind": "synthetic", "qps": 4.0, "num_requests": 6, "prompt_tokens": 256, "output_tokens": 4},
            "engine": {"scheduler": "vllm_v1", "chunk_size": 1024}}
    points = [SweepConfig.model_validate({**base, **extra}) for extra in (
        {"engine": {**base["engine"], "replicas": 3, "router": "random", "split_n": 3, "acceptance": 0.6}},
        {"engine": {**base["engine"], "replicas": 3, "router": "least_outstanding"}},
        {"cluster": {"prefill": {"replicas": 2, "router": "random"}, "decode": {"replicas": 2, "router": "random"}}})]
    assert point_labels(points) == [
        "vllm_v1 chunk=1024 N=3 x=3 random acceptance=0.6",
        "vllm_v1 chunk=1024 x=3 least_outstanding",
        "vllm_v1 chunk=1024 2P2D cluster.decode.router=random cluster.prefill.router=random"]


def test_labels_still_name_an_acceptance_that_differs_between_drafting_points():
    """chunk_size unset: vLLM's default on an H100, 8192 (experiments/vllm_defaults.py)."""
    base = {"model": "llama-3-8b", "device": "h100-sxm", "cost_model": "roofline",
            "trace": {"kind": "synthetic", "qps": 4.0, "num_requests": 6, "prompt_tokens": 256, "output_tokens": 4}}
    points = [SweepConfig.model_validate({**base, "engine": {"scheduler": "vllm_v1", "split_n": n, "acceptance": a}})
              for n, a in ((2, 0.6), (2, 0.8), (0, 0.8))]
    assert point_labels(points) == ["vllm_v1 chunk=8192 N=2 acceptance=0.6", "vllm_v1 chunk=8192 N=2 acceptance=0.8",
                                    "vllm_v1 chunk=8192"]


# ----- n01: a cluster whose pools run on different devices says each pool's -------------------

def _pool_device_point(cost_model: str = "roofline") -> SweepConfig:
    return SweepConfig.model_validate({
        "name": "a", "model": "llama-3-8b", "device": "h100-sxm", "cost_model": cost_model,
        "trace": {"kind": "synthetic", "qps": 4.0, "num_requests": 6, "prompt_tokens": 256, "output_tokens": 4},
        "engine": {"scheduler": "vllm_v1", "chunk_size": 2048},
        "cluster": {"prefill": {"engine": {"tensor_parallel_size": 2}}, "decode": {"device": "h200"}}})


def test_points_csv_has_each_pools_device_and_cost_model_and_the_decode_pools_unprefixed():
    """Prefill on the point's h100-sxm at TP 2, decode on h200: `device` said h100-sxm, though the
    unprefixed columns are the decode pool's (README), and no column named the prefill pool's."""
    row = run_point(_pool_device_point()).row
    assert (row["device"], row["prefill_device"], row["decode_device"]) == ("h200", "h100-sxm", "h200")
    roofline = "roofline"  # cost_model roofline: the label is the value, each pool's
    assert (row["cost_model_label"], row["prefill_cost_model_label"], row["decode_cost_model_label"]) == (
        roofline, roofline, roofline)
    assert (row["prefill_cost_model_steps_out_of_range"], row["decode_cost_model_steps_out_of_range"]) == (0, 0)
    assert (row["prefill_tensor_parallel_size"], row["decode_tensor_parallel_size"], row["num_gpus"]) == (2, 1, 3)
    assert device_name(_pool_device_point()) == "h200"  # a failed point's row and a capacity row say the same


def test_the_report_names_each_pools_device_and_cost_model():
    measured = "measured (aiconfigurator vllm 0.19.0) on {}; roofline for layernorm"
    points = pd.DataFrame({
        "point_id": [0, 1], "label": ["1P1D", "1P1D chunk"], "model": ["llama-3-8b"] * 2, "device": ["h200"] * 2,
        "prefill_device": ["h100-sxm"] * 2, "decode_device": ["h200"] * 2,
        "cost_model_label": [measured.format("h200")] * 2, "decode_cost_model_label": [measured.format("h200")] * 2,
        "prefill_cost_model_label": [measured.format("h100-sxm")] * 2,
        "cost_model_steps_out_of_range": [0, 2], "prefill_cost_model_steps_out_of_range": [1, 0]})
    base = _pool_device_point("auto")
    assert deployment_line(points, base, "(below)") == (
        "Model **llama-3-8b** on **h100-sxm** (prefill pool) and **h200** (decode pool); cost model **auto** (below).")
    lines = cost_model_lines(points)
    assert lines[0] == (f"Step times: prefill pool: {measured.format('h100-sxm')}; "
                        f"decode pool: {measured.format('h200')}.")
    assert lines[1].startswith("The parts named as priced by the roofline are estimates")
    assert lines[2] == ("Steps outside the measured grids (priced by the roofline scaled from the grid's edge): "
                        "1 at 1P1D, 2 at 1P1D chunk.")  # the prefill pool's step counted too
    assert [line.split(":")[0] for line in device_lines(points, base)] == ["Device h100-sxm", "Device h200"]
    assert device_lines(points, base)[1].startswith("Device h200: 141 GiB, 989.5 TFLOP/s dense BF16, 4800 GB/s")


def test_a_cluster_on_one_device_reads_as_before():
    points = pd.DataFrame({"point_id": [0], "label": ["1P1D"], "model": ["llama-3-8b"], "device": ["h100-sxm"],
                           "prefill_device": ["h100-sxm"], "decode_device": ["h100-sxm"],
                           "cost_model_label": ["roofline"], "prefill_cost_model_label": ["roofline"],
                           "decode_cost_model_label": ["roofline"]})
    base = _pool_device_point()
    assert deployment_line(points, base, "(below)") == "Model **llama-3-8b** on **h100-sxm**; cost model **roofline** (below)."
    assert cost_model_lines(points)[0] == "Step times: roofline."
