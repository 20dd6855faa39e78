"""The results cache keys work by the contents of the files a config names, not only their paths:
an edited trace, model config.json, device file or measured table is new work (never a stale
result), and unchanged files keep their key (a rerun still hits)."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.cli.main import app
from experiments.config import SearchConfig, SweepConfig, load_config
from experiments.planning.config_inputs import MISSING, input_digests
from experiments.planning.results_cache import cache_key
from experiments.planning.sweep import search_cache_key
from profiler.device_file import DEVICES_DIR
from profiler.measured.shipped import MEASURED_DIR

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024,
         "num_attention_heads": 8, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 2816,
         "vocab_size": 32000, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
         "tie_word_embeddings": False}
TRACE = "arrival_s,prompt_tokens,output_tokens\n0,500,20\n0.1,600,30\n0.2,700,40\n"
CONFIG = """
name: inputs
model: m/config.json
device: mydev.yaml
cost_model: measured:tables
trace: {kind: file, path: tr.csv}
engine: {scheduler: vllm_v1, chunk_size: 2048}
"""


@pytest.fixture
def inputs(tmp_path: Path) -> Path:
    """A config naming a model config.json, a device file, a measured-table folder and a trace."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(LLAMA))
    device = (DEVICES_DIR / "h100-sxm.yaml").read_text()
    (tmp_path / "mydev.yaml").write_text(device.replace("name: h100-sxm", "name: mydev")
                                         .replace("efficiency: fitted\n", ""))
    shutil.copytree(MEASURED_DIR / "h100-sxm" / "aiconfigurator", tmp_path / "tables")
    (tmp_path / "tr.csv").write_text(TRACE)
    (tmp_path / "c.yaml").write_text(CONFIG)
    return tmp_path


def _point(folder: Path) -> SweepConfig:
    return SweepConfig.model_validate(load_config(folder / "c.yaml")[1][0])


def _search_key(point: SweepConfig) -> str:
    return search_cache_key(point.model_copy(update={"search": SearchConfig()}), 0)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_digests_are_the_sha256_of_each_file_the_config_names(inputs):
    digests = input_digests(_point(inputs).model_dump(mode="json"))
    assert set(digests) == {"model", "device", "cost_model[0]", "trace.path"}
    assert digests["model"] == _sha256(inputs / "m" / "config.json")
    assert digests["device"] == _sha256(inputs / "mydev.yaml")
    assert digests["trace.path"] == _sha256(inputs / "tr.csv")
    # a folder: each file's relative path and digest, in sorted order
    files = sorted(p for p in (inputs / "tables").rglob("*") if p.is_file())
    listing = "".join(f"{p.relative_to(inputs / 'tables').as_posix()}\0{_sha256(p)}\n" for p in files)
    assert digests["cost_model[0]"] == hashlib.sha256(listing.encode()).hexdigest()


@pytest.mark.parametrize("edit", [
    lambda d: (d / "tr.csv").write_text(TRACE.replace("0.2,700,40", "0.2,700,400")),
    lambda d: (d / "m" / "config.json").write_text(json.dumps({**LLAMA, "num_hidden_layers": 2})),
    lambda d: (d / "mydev.yaml").write_text((d / "mydev.yaml").read_text().replace(
        "memory_bandwidth_gb_per_s: 3350", "memory_bandwidth_gb_per_s: 1000")),
    lambda d: (d / "tables" / "measured.json").write_text((d / "tables" / "measured.json").read_text() + " "),
    lambda d: (d / "tables" / "extra.csv").write_text("x\n1\n"),  # a file added to the folder
], ids=["trace", "model config.json", "device file", "measured table", "file added to the tables"])
def test_editing_any_named_file_changes_the_point_and_search_keys(inputs, edit):
    before = _point(inputs)
    point, search = cache_key("point", before, 0.0), _search_key(before)
    assert cache_key("point", _point(inputs), 0.0) == point  # unchanged files: the same key
    edit(inputs)
    after = _point(inputs)
    assert after == before  # the config's values are the same ...
    assert cache_key("point", after, 0.0) != point  # ... the work is not
    assert _search_key(after) != search
    edit(inputs)  # the same contents written again: the key is a function of contents, not of time
    assert cache_key("point", _point(inputs), 0.0) == cache_key("point", after, 0.0)


def test_files_nested_anywhere_and_profile_folders_are_digested(tmp_path):
    (tmp_path / "prof").mkdir()
    (tmp_path / "prof" / "profile.json").write_text("{}")
    (tmp_path / "lengths.csv").write_text("prompt_tokens,output_tokens\n5,6\n")
    (tmp_path / "wl.json").write_text("{}")
    (tmp_path / "pool.yaml").write_text("name: p\n")
    tree = {"model": "llama-3-8b", "device": "h100-sxm", "cost_model": f"profile:{tmp_path / 'prof'}",
            "trace": {"kind": "profile", "name": str(tmp_path / "wl.json"),
                      "prompt_tokens": {"dist": "empirical", "file": str(tmp_path / "lengths.csv")}},
            "engine": {"acceptance": {"file": str(tmp_path / "gone.csv")}},
            "cluster": {"decode": {"device": str(tmp_path / "pool.yaml")}}}
    digests = input_digests(tree)
    listing = f"profile.json\0{_sha256(tmp_path / 'prof' / 'profile.json')}\n"
    assert digests == {  # built-in model and device names read no file of the user's
        "cost_model": hashlib.sha256(listing.encode()).hexdigest(),
        "trace.name": _sha256(tmp_path / "wl.json"),
        "trace.prompt_tokens.file": _sha256(tmp_path / "lengths.csv"),
        "engine.acceptance.file": MISSING,
        "cluster.decode.device": _sha256(tmp_path / "pool.yaml"),
    }
    assert input_digests({"trace": {"kind": "synthetic", "name": "x.json"}}) == {}  # only a profile's name is a file


def test_a_sweep_rerun_hits_until_a_named_file_changes_then_matches_a_fresh_run(inputs):
    config, out = str(inputs / "c.yaml"), str(inputs / "out")

    def sweep(*extra):
        result = CliRunner().invoke(app, ["sweep", config, "--out", out, "--jobs", "1",
                                          "--set", "cost_model=roofline", *extra])  # tables of h100-sxm only
        assert result.exit_code == 0, result.output
        return pd.read_csv(inputs / "out" / "points.csv").iloc[0]

    first = sweep()
    assert not first["cached"] and first["completed"] == 3
    assert sweep()["cached"]  # nothing changed: the cache hits
    (inputs / "tr.csv").write_text(TRACE + "0.3,800,50\n")  # a fourth request
    (inputs / "mydev.yaml").write_text((inputs / "mydev.yaml").read_text().replace("memory_gib: 80", "memory_gib: 40")
                                         .replace("cuda_total_memory_gib: 79.19\n", ""))
    edited = sweep()
    assert not edited["cached"]
    assert edited["completed"] == 4 and edited["num_requests"] == 4
    assert edited["num_gpu_blocks"] < first["num_gpu_blocks"]  # half the memory
    fresh = sweep("--no-cache")
    columns = ["completed", "num_gpu_blocks", "tpot_s_p50", "output_throughput_tps"]
    pd.testing.assert_series_equal(edited[columns], fresh[columns])


def test_code_digest_changes_with_any_source_or_data_file_but_not_example_configs(tmp_path):
    # An editable install keeps its version across edits: the digest of the code is what keeps a
    # changed simulator or shipped table from serving the old code's cached results.
    from experiments.planning.results_cache import code_digest

    root = tmp_path / "simulator"
    (root / "data").mkdir(parents=True)
    (root / "step.py").write_text("STEP_S = 0.01\n")
    (root / "data" / "table.csv").write_text("m,t\n1,2\n")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "step.cpython-311.pyc").write_bytes(b"\0")
    first = code_digest([root])
    (root / "__pycache__" / "step.cpython-311.pyc").write_bytes(b"\1")
    assert code_digest([root]) == first  # bytecode is not source
    (root / "data" / "table.csv").write_text("m,t\n1,3\n")
    second = code_digest([root])
    assert second != first
    (root / "new.py").write_text("")
    assert code_digest([root]) not in (first, second)  # an added file
    (root / "new.py").unlink()
    assert code_digest([root]) == second
    examples = tmp_path / "experiments"
    (examples / "configs").mkdir(parents=True)
    (examples / "point.py").write_text("x = 1\n")
    (examples / "configs" / "quickstart.yaml").write_text("slo: {}\n")
    before = code_digest([examples])
    (examples / "configs" / "quickstart.yaml").write_text("slo: {tbt_p99_s: 0.2}\n")
    assert code_digest([examples]) == before  # the user's config, keyed by its content already
    (examples / "point.py").write_text("x = 2\n")
    assert code_digest([examples]) != before


def test_cache_key_includes_the_project_code(monkeypatch, inputs):
    from experiments.planning import results_cache

    config = _point(inputs)
    key = results_cache.cache_key("point", config, 0.0)
    assert results_cache.cache_key("point", config, 0.0) == key
    monkeypatch.setattr(results_cache, "project_code_digest", lambda: "edited")
    assert results_cache.cache_key("point", config, 0.0) != key
