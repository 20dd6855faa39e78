"""`cluster:` in a config: pools built from the point's engine keys, bad input named by key, and a
disaggregated point run end to end (experiments/deployment.py, experiments/point.py)."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from experiments.config import ConfigError, SweepConfig, describe_point, load_config, pool_point
from experiments.deployment import build_link, cluster_gpus
from experiments.point import run_point
from profiler import get_model_spec

BASE = """
model: llama-3-8b
device: h100-sxm
cost_model: roofline
trace: {kind: profile, name: azure-conv, qps: 4, num_requests: 40, seed: 0}
engine: {scheduler: sarathi, chunk_size: 512}
goodput: {ttft_s: 2.0, tpot_s: 0.05}
cluster:
  prefill: {replicas: 2, engine: {chunk_size: 2048}}
  decode: {replicas: 3, engine: {tensor_parallel_size: 2}}
  link: {bandwidth_gb_s: 50, latency_s: 0.0001}
"""


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path, text=BASE, overrides=()):
    _, points = load_config(write(tmp_path, text), list(overrides))
    return [SweepConfig.model_validate(p) for p in points]


def error_of(tmp_path, text=BASE, overrides=()):
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), list(overrides))
    return str(info.value)


def test_pools_take_the_point_engine_and_their_own_keys(tmp_path):
    (point,) = load(tmp_path)
    prefill, decode = pool_point(point, "prefill"), pool_point(point, "decode")
    assert (prefill.engine.replicas, prefill.engine.chunk_size, prefill.engine.tensor_parallel_size) == (2, 2048, 1)
    assert (decode.engine.replicas, decode.engine.chunk_size, decode.engine.tensor_parallel_size) == (3, 512, 2)
    assert prefill.cluster is None and prefill.device == "h100-sxm"
    assert cluster_gpus(point) == 2 * 1 + 3 * 2


def test_link_bytes_are_the_kv_of_one_rank_of_the_smaller_tp():
    """llama-3-8b: 32 layers × 2 × 8 KV heads × 128 × 2 bytes = 131,072 B a token; the prefill
    pool is TP1, so one link carries all of it (not the decode pool's half)."""
    point = SweepConfig.model_validate(_yaml(BASE))
    link, kv_bytes = build_link(point)
    assert kv_bytes == 32 * 2 * 8 * 128 * 2 == get_model_spec("llama-3-8b").kv_bytes_per_token(2, 1)
    assert link.bandwidth_bytes_per_s == 50e9 and link.latency_s == 0.0001
    assert not link.layer_pipelined and link.num_layers == 32


def test_device_link_is_the_device_interconnect():
    point = SweepConfig.model_validate(_yaml(BASE.replace("bandwidth_gb_s: 50", "bandwidth_gb_s: device")))
    link, _ = build_link(point)
    from profiler import get_device_spec

    assert link.bandwidth_bytes_per_s == get_device_spec("h100-sxm").interconnect_bandwidth_bytes_per_s


@pytest.mark.parametrize(("override", "named"), [
    ("cluster.prefill.replicas=0", "cluster.prefill.replicas"),
    ("cluster.decode.replicas=0", "cluster.decode.replicas"),
    ("cluster.link.bandwidth_gb_s=0", "cluster.link.bandwidth_gb_s"),
    ("cluster.link.bandwidth_gb_s=-5", "cluster.link.bandwidth_gb_s"),
    ("cluster.link.latency_s=-1", "cluster.link.latency_s"),
    ("engine.replicas=2", "engine.replicas is not read with cluster"),
    ("cluster.decode.engine={tensor_parallel_size: 3}", "cluster.decode.engine.tensor_parallel_size"),
    # A DP pool is modelled (tests/test_disaggregated_dp.py); DP with PP is not, as colocated.
    ("cluster.prefill.engine={data_parallel_size: 2, pipeline_parallel_size: 2}",
     "cluster.prefill.engine.data_parallel_size > 1 with pipeline_parallel_size > 1 is not modelled"),
    # A pool engine key that --set gave is named as --set, not as the file's line of that pool (breaker pass D).
    ("cluster.decode.engine={pipeline_parallel_size: 0}", "--set cluster.decode.engine.pipeline_parallel_size: Input "
     "should be greater than or equal to 1"),
    ("cluster.prefill.engine={chunk_sise: 2}", "--set cluster.prefill.engine.chunk_sise: unknown key (did you mean chunk_size?)"),
    ("cluster.prefill.engine.chunk_size=100", "cluster.prefill.engine (line 9, changed by --set "
     "cluster.prefill.engine.chunk_size): max_num_seqs (128) must be <= chunk_size (100)"),
    ("cluster.decode.engine={kv_cache_dtype: fp8}", "kv_cache_dtype differ"),
    ("cluster.decode.device=h900", "cluster.decode.device"),
    ("cluster.decode.router=busiest", "cluster.decode.router"),
])
def test_bad_cluster_keys_are_named(tmp_path, override, named):
    assert named in error_of(tmp_path, overrides=[override])


def test_fleet_sizing_of_a_cluster_counts_whole_clusters_and_all_their_gpus(tmp_path):
    """A 2P(TP1) 3D(TP2) cluster is 8 GPUs; at a capacity of 12.5 req/s a 40 req/s target with the
    default 10 % headroom needs ceil(44 / 12.5) = 4 clusters = 32 GPUs, at $3 a GPU-hour $96/h over
    40 req/s × 200 tokens."""
    from experiments.planning.fleet import fleet_row
    from experiments.planning.search import capacity_row, per_gpu_row

    (point,) = load(tmp_path, overrides=["search={qps: [1, 8]}", "fleet={target_qps: 40, gpu_hour_usd: 3}"])
    trials = [{"passed": True, "throughput_rps": 10.0, "output_throughput_tps": 2000.0}]
    row = fleet_row(point, {"capacity_qps": 12.5}, trials)
    assert row["fleet_replicas"] == 4 and row["fleet_gpus"] == 32 and row["fleet_usd_per_hour"] == 96
    assert row["usd_per_million_output_tokens"] == pytest.approx(96 / (40 * 200 * 3600) * 1e6)
    # A seed below the searched range counts 0 (dropping it overstated the capacity: 12.5 / 8).
    def per_gpu(capacities):  # the sweep's: per_gpu_row of capacity_row's mean over the seeds
        return per_gpu_row(point, capacity_row("p", 0, capacities, 8.0)["capacity_qps"])

    assert per_gpu([12.0, 13.0, float("nan")]) == {"num_gpus": 8, "capacity_per_gpu_qps": 25.0 / 3 / 8}
    assert per_gpu([float("nan")] * 2)["capacity_per_gpu_qps"] != per_gpu([0.0])[
        "capacity_per_gpu_qps"]  # every seed below: NaN, not 0


def test_fleet_sizing_counts_every_gpu_of_a_colocated_point():
    """Two TP2 replicas behind a router are 4 GPUs a copy (the sizing once counted TP × PP only,
    2): 40 req/s × 1.1 headroom at 12.5 needs 4 copies = 16 GPUs."""
    from experiments.planning.fleet import fleet_row

    point = SweepConfig.model_validate({"trace": {"kind": "poisson", "qps": 1}, "search": {},
                                        "engine": {"tensor_parallel_size": 2, "replicas": 2},
                                        "fleet": {"target_qps": 40}})
    assert fleet_row(point, {"capacity_qps": 12.5}, []) == {"fleet_sizing_qps": 12.5, "fleet_replicas": 4,
                                                            "fleet_gpus": 16}


def test_capacity_search_of_a_cluster_reports_per_gpu_capacity_and_fleet(tmp_path):
    """`sweep` of a cluster config with `search:` and `fleet:`: the capacity table has the
    cluster's 8 GPUs, capacity per GPU = capacity / 8 and the fleet in whole clusters."""
    from typer.testing import CliRunner

    from experiments.cli.main import app

    text = BASE + "search: {qps: [0.5, 4], num_requests: 40, seeds: 1, max_trials: 4}\nfleet: {target_qps: 20}\n"
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["sweep", str(write(tmp_path, text)), "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 0, result.output
    import pandas as pd

    row = pd.read_csv(out / "points.csv").iloc[0]
    assert row["num_gpus"] == 8 and row["capacity_qps"] > 0
    assert row["capacity_per_gpu_qps"] == pytest.approx(row["capacity_qps"] / 8)
    # One seed: sized from its capacity, with the default 10 % headroom.
    assert row["fleet_gpus"] == 8 * row["fleet_replicas"] == 8 * np.ceil(20 * 1.1 / row["capacity_qps"])
    assert "QPS per GPU" in result.output


def test_variants_cross_pool_sizes_and_label_them(tmp_path):
    points = load(tmp_path, BASE + "variants:\n  - {cluster.prefill.replicas: [1, 3], cluster.decode.replicas: 2}\n")
    assert [(p.cluster.prefill.replicas, p.cluster.decode.replicas) for p in points] == [(1, 2), (3, 2)]
    labels = [describe_point(p) for p in points]
    assert labels == ["sarathi chunk=512 1P2D tp=1/2", "sarathi chunk=512 3P2D tp=1/2"]


def test_cluster_point_runs_and_reports_pools(tmp_path):
    (point,) = load(tmp_path)
    result = run_point(point)
    row = result.row
    assert row["cluster"] == "2P(TP1) 3D(TP2)" and row["num_gpus"] == 8
    assert row["completed"] + row["rejected"] == 40
    assert 0 < row["prefill_utilization"] < 1 and 0 < row["decode_utilization"] < 1
    assert row["kv_transfer_s_p50"] > 0.0001  # the latency plus the bytes
    r = result.requests
    crossed = r["kv_transfer_start_s"].notna()
    assert set(r.loc[crossed, "prefill_replica_id"]) <= {0, 1}
    assert set(r.loc[crossed, "decode_replica_id"]) <= {2, 3, 4}
    # Transfer time = latency + prompt tokens × 131,072 B / 50 GB/s, for every request.
    expected = 0.0001 + r.loc[crossed, "prompt_tokens"] * 131072 / 50e9
    np.testing.assert_allclose(r.loc[crossed, "kv_transfer_end_s"] - r.loc[crossed, "kv_transfer_start_s"], expected)


def _yaml(text):
    import yaml

    return yaml.safe_load(textwrap.dedent(text))


def test_flags_of_a_cluster_point_is_an_error_not_a_colocated_command(tmp_path):
    """`sarathi-sim flags` prints one colocated `vllm serve`; for a 2P3D point that would be a
    wrong answer, so it refuses (exit 2) and says what to serve instead."""
    from typer.testing import CliRunner

    from experiments.cli.main import app

    config = write(tmp_path, BASE.replace("num_requests: 40", "num_requests: 20"))
    out = tmp_path / "run"
    runner = CliRunner()
    assert runner.invoke(app, ["simulate", str(config), "--out", str(out)]).exit_code == 0
    result = runner.invoke(app, ["flags", str(out)])
    assert result.exit_code == 2
    assert "disaggregated cluster (2P(TP1) 3D(TP2))" in result.output and "vllm serve meta" not in result.output


def test_vllm_flags_of_a_cluster_point_say_there_is_no_single_command(tmp_path):
    from experiments.planning.vllm_flags import DISAGGREGATED_FLAGS, vllm_serve_command, vllm_serve_flags

    (point,) = load(tmp_path)
    assert vllm_serve_flags(point) == DISAGGREGATED_FLAGS
    with pytest.raises(ValueError, match="no single vllm serve command"):
        vllm_serve_command(point)


def test_a_sessions_trace_runs_through_the_cluster(tmp_path):
    """kind: sessions with `cluster:`: every turn completes, turn t + 1 of a conversation arrives
    think_time_s (1 s) after turn t completed (in the decode pool), and the prefill pool's
    session_affinity keeps each conversation on one prefill instance."""
    text = BASE.replace("trace: {kind: profile, name: azure-conv, qps: 4, num_requests: 40, seed: 0}",
                        "trace: {kind: sessions, clients: 6, turns: 3, think_time_s: 1.0, prompt_tokens: 200, "
                        "output_tokens: 20, seed: 0}")
    text = text.replace("prefill: {replicas: 2, engine: {chunk_size: 2048}}",
                        "prefill: {replicas: 2, router: session_affinity, engine: {chunk_size: 2048}}")
    (point,) = load(tmp_path, text)
    result = run_point(point)
    assert result.row["completed"] == 18
    assert result.row["trace_source"] == "sessions, 6 conversations x 3 turns"
    r = result.requests
    # A later turn arrives exactly at an earlier turn's completion + 1 s (now + think time), and
    # that earlier turn ran on the same prefill instance (affinity).
    ended = {end + 1.0: (rid, prefill) for rid, end, prefill in
             zip(r["request_id"], r["completion_s"], r["prefill_replica_id"])}
    later = r[r["arrival_s"] > 0]
    assert len(later) == 12
    for rid, arrival, prefill in zip(later["request_id"], later["arrival_s"], later["prefill_replica_id"]):
        previous, previous_prefill = ended[arrival]
        assert previous < rid and previous_prefill == prefill


def test_session_affinity_in_a_pool_needs_a_sessions_trace(tmp_path):
    assert "cluster.decode.router session_affinity" in error_of(
        tmp_path, overrides=["cluster.decode.router=session_affinity"])


TRACE_ROWS = "arrival_s,prompt_tokens,output_tokens\n0.0,100,10\n0.1,2000,10\n0.2,1100,10\n0.3,900,10\n"


@pytest.mark.parametrize(("blocks", "rejected"), [(64, [1, 2]), (1, [0, 1, 2, 3])])
def test_a_decode_pool_too_small_for_a_request_rejects_it_and_the_run_finishes(tmp_path, blocks, rejected):
    """Decode instances of 64 blocks of 16 (1,024 tokens): requests 1 (2,000 + 10 tokens, 126
    blocks) and 2 (1,100 + 10, 70 blocks) can never be decoded there and are rejected at arrival,
    counted, with no prefill spent on them; 0 (100 + 10) and 3 (900 + 10, 57 blocks) complete,
    so the prefill pool computed 100 + 900 prompt tokens. With one block every request is
    rejected and the run still ends, with nothing completed."""
    (tmp_path / "t.csv").write_text(TRACE_ROWS)
    text = BASE.replace("trace: {kind: profile, name: azure-conv, qps: 4, num_requests: 40, seed: 0}",
                        "trace: {kind: file, path: t.csv}")
    (point,) = load(tmp_path, text, [f"cluster.decode.engine.num_gpu_blocks={blocks}"])
    result = run_point(point)
    r = result.requests.set_index("request_id").sort_index()
    assert list(r.index[r["finish_reason"] == "rejected_kv_capacity"]) == rejected
    assert (r["finish_reason"].drop(index=rejected) == "completed").all()
    assert result.row["rejected"] == len(rejected) and result.row["completed"] == 4 - len(rejected)
    assert result.row["decode_num_gpu_blocks"] == blocks
    prefill_steps = result.steps[result.steps["replica_id"] < 2]
    assert prefill_steps["num_prefill_tokens"].sum() == sum(r.loc[i, "prompt_tokens"] for i in r.index
                                                            if i not in rejected)
    if len(rejected) == 4:
        assert result.row["goodput_rps"] == 0.0 and np.isnan(result.row["kv_transfer_s_p50"])


def test_a_pool_of_zero_replicas_or_a_zero_bandwidth_link_is_exit_2_naming_the_key(tmp_path):
    from typer.testing import CliRunner

    from experiments.cli.main import app

    config = write(tmp_path, BASE)
    for override, named in (("cluster.decode.replicas=0", "cluster.decode.replicas"),
                            ("cluster.link.bandwidth_gb_s=0", "cluster.link.bandwidth_gb_s")):
        result = CliRunner().invoke(app, ["simulate", str(config), "--out", str(tmp_path / "run"), "--set", override])
        assert result.exit_code == 2 and named in result.output
        assert not (tmp_path / "run").exists()


def test_pipeline_parallel_pools(tmp_path):
    """A prefill pool of 2 instances of TP1 × PP2 and a decode pool of 3 of TP2: 2 × 2 + 3 × 2 =
    10 GPUs, labelled by their stages. llama-3-8b's 32 layers split 16 + 16, so a prefill rank
    holds 16 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes = 65,536 B of a token, a decode rank
    (TP2: 4 heads, 32 layers) also 65,536 B: each link moves 65,536 B a token (half the PP1 case's
    131,072), its layers 16. The point runs end to end with every request accounted for."""
    (point,) = load(tmp_path, overrides=["cluster.prefill.engine.pipeline_parallel_size=2"])
    assert cluster_gpus(point) == 10
    assert describe_point(point) == "sarathi chunk=512 2P3D tp=1/2 pp=2/1"
    link, kv_bytes = build_link(point)
    assert kv_bytes == 16 * 8 * 128 * 2 * 2 == 65_536 and link.num_layers == 16
    row = run_point(point).row
    assert row["cluster"] == "2P(TP1 PP2) 3D(TP2)" and row["num_gpus"] == 10
    assert row["prefill_pipeline_parallel_size"] == 2 and row["decode_pipeline_parallel_size"] == 1
    assert row["completed"] + row["rejected"] == 40 and row["completed"] > 0
    # A decode rank of TP1 × PP4 holds 8 layers of all 8 heads (32,768 B) but the prefill rank
    # 65,536: the busier side bounds the link.
    (point,) = load(tmp_path, overrides=["cluster.prefill.engine.pipeline_parallel_size=2",
                                         "cluster.decode.engine={tensor_parallel_size: 1, pipeline_parallel_size: 4}"])
    link, kv_bytes = build_link(point)
    assert kv_bytes == 65_536 and link.num_layers == 16
