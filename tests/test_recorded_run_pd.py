"""`verify --against-run` refuses a disaggregated instance (`pd_type` "prefill" / "decode" in the
bundle's config.json) instead of simulating it as colocated (breaker pass D, d17)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments.verification.recorded_run import bundle_config, read_recorded_run

META = {"model": "Qwen/Qwen3-32B", "vllm_version": "0.19.0",
        "engine_kwargs": {"tensor_parallel_size": 1, "data_parallel_size": 1, "max_num_seqs": 128,
                          "max_num_batched_tokens": 2048, "seed": 42}}
REQUEST = {"request_id": "r0", "input_toks": 100, "output_toks": 11, "arrival_time": 1.7e9, "queued_ts": 1000.0,
           "scheduled_ts": 1000.0, "first_token_ts": 1000.5, "last_token_ts": 1001.5}


def _instance(pd_type="absent") -> dict:
    instance = {"hardware": "RTXPRO6000", "npu_mem": {"mem_util": 0.9}, "num_npus": 1}
    return instance if pd_type == "absent" else {**instance, "pd_type": pd_type}


def _bundle(tmp_path: Path, instances: list[dict]) -> Path:
    (tmp_path / "vllm").mkdir(parents=True)
    (tmp_path / "vllm" / "requests.jsonl").write_text(json.dumps(REQUEST) + "\n")
    (tmp_path / "vllm" / "meta.json").write_text(json.dumps(META))
    (tmp_path / "config.json").write_text(json.dumps({"nodes": [{"instances": instances}]}))
    return tmp_path


@pytest.mark.parametrize("pd_type, said", [
    ("prefill", "'prefill' (a disaggregated prefill instance)"),
    ("decode", "'decode' (a disaggregated decode instance)"),
    ("both", "'both' (LLMServingSim's values are 'prefill', 'decode' or null)"),
])
def test_a_disaggregated_instance_is_refused_naming_the_key_and_value(tmp_path, pd_type, said):
    # The second instance of the node is the disaggregated one: every instance is checked, not only the first.
    bundle = _bundle(tmp_path, [_instance(None), _instance(pd_type)])
    with pytest.raises(ValueError) as info:
        bundle_config(read_recorded_run(bundle), tmp_path / "t.csv")
    assert str(info.value) == (f"{bundle / 'config.json'}: nodes[0].instances[1].pd_type is {said}; --against-run "
                               "simulates colocated instances only (pd_type null or absent); a prefill/decode "
                               "cluster is simulated from a config's `cluster:`")


def test_colocated_instances_with_pd_type_null_or_absent_are_simulated(tmp_path):
    for name, instance in (("null", _instance(None)), ("absent", _instance())):
        run = read_recorded_run(_bundle(tmp_path / name, [instance]))
        config = bundle_config(run, tmp_path / "t.csv")
        assert (config["device"], config["engine"]["num_gpus"], config["engine"]["chunk_size"]) == ("rtx-pro-6000", 1, 2048)


def test_verify_against_run_refuses_a_prefill_bundle_before_writing_into_out(tmp_path):
    from typer.testing import CliRunner

    from experiments.cli.main import app

    bundle = _bundle(tmp_path / "bundle", [_instance("prefill")])
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["verify", "--against-run", str(bundle), "--out", str(out),
                                      "--set", "cost_model=roofline"])
    assert result.exit_code != 0
    said = " ".join(result.output.split())
    assert f"error: {bundle / 'config.json'}: nodes[0].instances[0].pd_type is 'prefill'" in said
    assert not out.exists() or sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == []
