"""How --set, variants and the base combine (experiments/config.py's docstring), and that nested
and dotted variant forms merge identically. Every case lists the exact points produced."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from experiments.cli.main import app
from experiments.config import ConfigError, ConfigWarning, SweepConfig, describe_point, load_config

QUICKSTART = "experiments/configs/quickstart.yaml"
runner = CliRunner()


def load(path, *overrides):
    """(point labels, point dicts, warning texts) of a config."""
    said: list[str] = []
    _, points = load_config(path, list(overrides), on_warning=said.append)
    return [describe_point(SweepConfig.model_validate(p)) for p in points], points, said


def write(tmp_path, text, name="c.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# ----- --set is the last word ------------------------------------------------------------------
def test_set_scheduler_applies_to_every_point_and_names_the_variants_it_overrides():
    labels, points, said = load(QUICKSTART, "engine.scheduler=vllm_v1")
    # vllm's point had no chunk size (inherited 512 dropped), so vllm_v1 takes vLLM's default on the
    # H100, 8192 (experiments/vllm_defaults.py); the sarathi chunk=512 point keeps 512: five distinct.
    assert labels == ["vllm_v1 chunk=8192", "vllm_v1 chunk=256", "vllm_v1 chunk=512", "vllm_v1 chunk=1024",
                      "vllm_v1 chunk=2048"]
    assert [p["engine"].get("chunk_size") for p in points] == [None, 256, 512, 1024, 2048]
    assert said == [
        "--set engine.scheduler=vllm_v1 overrides variants[0] (engine.scheduler: vllm) and variants[1] "
        "(engine.scheduler: sarathi): a --set applies to every point, after its variant",
    ]


def test_set_chunk_size_sets_every_chunking_point_and_says_which_points_it_skips():
    labels, points, said = load(QUICKSTART, "engine.chunk_size=300")
    assert labels == ["vllm", "sarathi chunk=300"]
    assert points[1]["engine"] == {"scheduler": "sarathi", "chunk_size": 300, "max_num_seqs": 128,
                                   "block_size": 16, "gpu_memory_utilization": 0.9}
    assert said[0] == ("--set engine.chunk_size=300 overrides variants[1] (engine.chunk_size: 256, 512, 1024, 2048): "
                       "a --set applies to every point, after its variant")
    assert said[1] == ("--set engine.chunk_size=300 does not apply to variants[0] {engine.scheduler: vllm} (vllm): "
                       "only sarathi, vllm_v1, simple_chunking, fastgen read chunk_size")
    assert said[2].startswith("4 points are the same once the --set keys are applied (sarathi chunk=300)")


def test_set_that_no_point_reads_is_an_error(tmp_path):
    config = write(tmp_path, "trace: {kind: poisson, qps: 2, num_requests: 10}\nengine: {scheduler: vllm}\n")
    with pytest.raises(ConfigError) as info:
        load_config(config, ["engine.chunk_size=300"])
    assert str(info.value) == ("--set engine.chunk_size: no point's scheduler reads chunk_size (it is read by "
                               "sarathi, vllm_v1, simple_chunking, fastgen); set engine.scheduler too, or leave it out")


def test_set_of_a_key_no_variant_sets_is_silent_and_reaches_every_point(tmp_path):
    labels, points, said = load(QUICKSTART, "trace.qps=8", "engine.max_num_seqs=64")
    assert labels == ["vllm", "sarathi chunk=256", "sarathi chunk=512", "sarathi chunk=1024", "sarathi chunk=2048"]
    assert [(p["trace"]["qps"], p["engine"]["max_num_seqs"]) for p in points] == [(8, 64)] * 5
    assert said == []


def test_set_equal_to_a_variants_value_overrides_nothing(tmp_path):
    config = write(tmp_path, """\
        trace: {kind: poisson, qps: 2, num_requests: 10}
        variants:
          - {engine.chunk_size: 256}
          - {engine.chunk_size: 512, engine.max_num_seqs: 32}
        """)
    labels, points, said = load(config, "engine.chunk_size=512")
    assert labels == ["sarathi chunk=512", "sarathi chunk=512"]
    assert [p["engine"] for p in points] == [{"chunk_size": 512}, {"chunk_size": 512, "max_num_seqs": 32}]
    assert said == ["--set engine.chunk_size=512 overrides variants[0] (engine.chunk_size: 256): "
                    "a --set applies to every point, after its variant"]


def test_set_scheduler_drops_what_only_the_overridden_variants_scheduler_read(tmp_path):
    config = write(tmp_path, """\
        trace: {kind: poisson, qps: 2, num_requests: 10}
        variants:
          - {engine.scheduler: vllm, engine.max_num_batched_tokens: 4096}
        """)
    labels, points, _ = load(config, "engine.scheduler=sarathi")
    assert labels == ["sarathi chunk=512"] and points[0]["engine"] == {"scheduler": "sarathi"}


def test_set_of_a_whole_block_merges_like_its_dotted_keys(tmp_path):
    config = write(tmp_path, "trace: {kind: poisson, qps: 2, num_requests: 10}\n"
                             "engine: {chunk_size: 512, max_num_seqs: 64}\n")
    _, nested, _ = load(config, "engine={chunk_size: 256}")
    _, dotted, _ = load(config, "engine.chunk_size=256")
    assert nested == dotted == [{"trace": {"kind": "poisson", "qps": 2, "num_requests": 10},
                                 "engine": {"chunk_size": 256, "max_num_seqs": 64}}]


def test_cli_prints_the_warning_and_runs_the_overridden_point(tmp_path):
    out = tmp_path / "o"
    result = runner.invoke(app, ["simulate", QUICKSTART, "--point", "1", "--out", str(out),
                                 "--set", "engine.chunk_size=300", "--set", "trace.num_requests=40"])
    assert result.exit_code == 0, result.output
    assert "--set engine.chunk_size=300 overrides variants[1]" in " ".join(result.output.split())
    import pandas as pd
    assert pd.read_csv(out / "points.csv")["label"].tolist() == ["sarathi chunk=300"]
    # The one point is numbered by its --point, in the table, the records and the recommendation.
    assert pd.read_csv(out / "points.csv")["point_id"].tolist() == [1]
    assert set(pd.read_parquet(out / "requests.parquet")["point_id"]) == {1}
    assert "Recommended at this load: sarathi chunk=300 (point 1: llama-3-8b on h100-sxm)" in result.output


def test_a_malformed_set_key_is_blamed_on_the_set_not_the_file():
    with pytest.raises(ConfigError) as info:
        load_config(QUICKSTART, ["engine..chunk_size=5"])
    assert str(info.value) == ("--set 'engine..chunk_size=5': the key 'engine..chunk_size' is malformed (an empty "
                               "part between dots); write dotted keys such as engine.chunk_size=256")


def test_default_warning_is_a_config_warning_at_the_callers_line(tmp_path):
    with pytest.warns(ConfigWarning) as record:
        load_config(QUICKSTART, ["engine.scheduler=vllm_v1"])
    assert [str(w.message)[:44] for w in record] == ["--set engine.scheduler=vllm_v1 overrides var"]
    assert {w.filename for w in record} == {__file__}


# ----- nested and dotted variants merge identically -----------------------------------------
BASE = ("trace: {kind: poisson, qps: 2, num_requests: 10, prompt_tokens: {dist: zipf, theta: 1.2, max: 900}}\n"
        "engine: {scheduler: sarathi, chunk_size: 512, max_num_seqs: 64}\n"
        "slo: {tbt_p99_s: 0.1, scheduling_delay_p50_s: 2.0}\n")


@pytest.mark.parametrize("nested,dotted", [
    ("{engine: {chunk_size: 256}}", "{engine.chunk_size: 256}"),
    ("{engine: {chunk_size: [128, 1024]}, slo: {tbt_p99_s: 0.2}}",
     "{engine.chunk_size: [128, 1024], slo.tbt_p99_s: 0.2}"),
    ("{engine: {scheduler: vllm, max_num_batched_tokens: 2048}}",
     "{engine.scheduler: vllm, engine.max_num_batched_tokens: 2048}"),
    ("{trace: {prompt_tokens: {dist: normal, mean: 300, std: 20}}}",
     "{trace.prompt_tokens: {dist: normal, mean: 300, std: 20}}"),
    ("{engine: {}}", "{}"),
])
def test_nested_and_dotted_variants_give_byte_identical_points(tmp_path, nested, dotted):
    _, from_nested, _ = load(write(tmp_path, BASE + f"variants:\n  - {nested}\n", "nested.yaml"))
    _, from_dotted, _ = load(write(tmp_path, BASE + f"variants:\n  - {dotted}\n", "dotted.yaml"))
    assert json.dumps(from_nested, sort_keys=True) == json.dumps(from_dotted, sort_keys=True)


def test_nested_variant_keeps_the_other_engine_keys(tmp_path):
    # The bug: {engine: {chunk_size: 256}} replaced the block, and max_num_seqs fell back from 64 to 128.
    _, points, _ = load(write(tmp_path, BASE + "variants:\n  - {engine: {chunk_size: 256}}\n"))
    config = SweepConfig.model_validate(points[0])
    assert (config.engine.scheduler, config.engine.chunk_size, config.engine.max_num_seqs) == ("sarathi", 256, 64)
    assert config.slo == {"tbt_p99_s": 0.1, "scheduling_delay_p50_s": 2.0}


def test_a_length_spec_is_replaced_whole(tmp_path):
    # Merging {dist: normal, ...} into the base's zipf spec would keep theta and max.
    _, points, _ = load(write(tmp_path, BASE + "variants:\n  - {trace: {prompt_tokens: {dist: normal, mean: 300, std: 20}}}\n"))
    assert points[0]["trace"]["prompt_tokens"] == {"dist": "normal", "mean": 300, "std": 20}


def test_a_variant_changing_the_trace_kind_starts_the_trace_afresh(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n1,20,3\n")
    config = write(tmp_path, """\
        trace: {kind: profile, name: azure-conv, qps: 16, num_requests: 100, seed: 3}
        variants:
          - {}
          - {trace: {kind: file, path: t.csv}}
        """)
    labels, points, said = load(config)
    # qps: 16 is the profile's sampling rate; kept, it would time-scale the file's 2 requests.
    assert points[1]["trace"] == {"kind": "file", "path": str(trace)}
    assert labels == ["sarathi chunk=512", "sarathi chunk=512"] and said == []
    same_kind = write(tmp_path, "trace: {kind: profile, name: azure-conv, qps: 16, num_requests: 100, seed: 3}\n",
                      "same.yaml")
    _, points, _ = load(same_kind, "trace={kind: profile, name: sharegpt}")  # the same kind: merged
    assert points[0]["trace"] == {"kind": "profile", "name": "sharegpt", "qps": 16, "num_requests": 100, "seed": 3}


def test_a_set_invalid_for_one_point_names_that_point_and_the_keys():
    with pytest.raises(ConfigError) as info:
        load_config(QUICKSTART, ["engine.max_num_seqs=300"], on_warning=lambda text: None)
    lines = Path(QUICKSTART).read_text().splitlines()  # the line of variants[1] (the file's comments may change)
    engine_line = next(i for i, line in enumerate(lines, 1) if line.startswith("  - {engine.scheduler: sarathi"))
    assert str(info.value) == (f"{QUICKSTART}: variants[1] {{engine.scheduler: sarathi, engine.chunk_size: 256}}: "
                               f"engine (line {engine_line}, changed by --set engine.max_num_seqs): max_num_seqs (300) "
                               "must be <= chunk_size (256): each "
                               "decode takes one token of the budget")


@pytest.mark.parametrize("overrides", [
    ["engine.chunk_size=300"],
    ["engine.scheduler=vllm_v1", "trace.qps=8"],
    ["engine.max_num_batched_tokens=4096"],
    ["trace={kind: synthetic, qps: 4, num_requests: 50, prompt_tokens: [10, 20]}"],
])
def test_the_config_as_run_loads_again_to_the_same_points(tmp_path, overrides):
    # config.yaml records the base and its variants; with --set keys they must give the points that ran.
    import yaml

    from experiments.planning.sweep import config_as_run
    base, points = load_config(QUICKSTART, overrides, on_warning=lambda text: None)
    again = write(tmp_path, yaml.safe_dump(config_as_run(base)), "config.yaml")
    _, points_again = load_config(again, on_warning=lambda text: None)

    def settings(trees):
        return [SweepConfig.model_validate(p).model_dump(mode="json") for p in trees]
    assert settings(points_again) == settings(points)


def test_variants_as_run_of_a_set_chunk_size(tmp_path):
    base, _ = load_config(QUICKSTART, ["engine.chunk_size=300"], on_warning=lambda text: None)
    assert base.variants == [{"engine.scheduler": "vllm"}, {}]


# ----- a check across keys points at the key it is about (breaker pass D) -----------------------
@pytest.mark.parametrize("engine, overrides, expected", [
    ("  num_gpus: 3\n", [], "engine.num_gpus (line 6): engine.num_gpus is 3 but replicas × data_parallel_size × "
                            "tensor_parallel_size × pipeline_parallel_size = 1 × 1 × 1 × 1 = 1; make them match"),
    ("  router: session_affinity\n", [], "engine.router (line 6): engine.router session_affinity sends a "
                                         "conversation's turns to one replica: it needs trace kind sessions"),
    ("  num_gpus: 3\n", ["engine.num_gpus=5"], "--set engine.num_gpus: engine.num_gpus is 5 but"),
])
def test_a_cross_key_check_names_the_key_and_its_line_not_the_root(tmp_path, engine, overrides, expected):
    path = write(tmp_path, "model: llama-3-8b\ndevice: h100-sxm\ntrace: {kind: poisson, qps: 1, num_requests: 5}\n"
                           "engine:\n  scheduler: vllm_v1\n" + engine)
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides)
    assert str(info.value).startswith(f"{path}: {expected}") and "<root>" not in str(info.value)
