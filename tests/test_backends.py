"""Sweep backends: local processes and Ray give the same rows; a missing Ray is a clear error."""
from __future__ import annotations

import sys

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.planning.backends import BackendError, make_pool
from experiments.cli.main import app
from experiments.config import load_config
from experiments.planning.sweep import run_capacity_sweep, run_sweep

CONFIG = """
name: backends
trace: {kind: poisson, qps: 6, num_requests: 120, prompt_tokens: [100, 1500], output_tokens: [20, 200]}
engine: {scheduler: sarathi, chunk_size: 512}
variants:
  - {engine.chunk_size: [256, 1024]}
"""
COLUMNS = ["label", "completed", "num_steps", "tbt_s_p99", "ttft_s_p90", "e2e_s_p50"]


def test_ray_missing_is_a_clear_error_naming_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(BackendError, match=r"pip install 'sarathi-sim\[ray\]'"):
        make_pool("ray", 2)
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    result = CliRunner().invoke(app, ["sweep", str(config), "--out", str(tmp_path / "o"), "--backend", "ray"])
    assert result.exit_code == 2  # an input error, as every CLI error
    assert "sarathi-sim[ray]" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_unknown_backend_is_refused_before_running(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    result = CliRunner().invoke(app, ["sweep", str(config), "--out", str(tmp_path / "o"), "--backend", "slurm"])
    assert result.exit_code == 2  # an input error, as every CLI error
    assert "--backend 'slurm': valid values are local, ray" in result.output
    assert not (tmp_path / "o").exists()
    with pytest.raises(BackendError, match="valid values are local, ray"):
        make_pool("slurm", 1)


@pytest.mark.slow
def test_ray_backend_gives_the_rows_local_processes_give(tmp_path):
    pytest.importorskip("ray")
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG + "search: {qps: [1, 40], precision: 0.1, num_requests: 150, seeds: 2}\n")
    _, points = load_config(config, [])
    plain = [dict(p, search=None) for p in points]
    local = pd.DataFrame([r.row for r in run_sweep(plain, jobs=2)])
    on_ray = pd.DataFrame([r.row for r in run_sweep(plain, backend="ray", cache_dir=tmp_path / "cache")])
    pd.testing.assert_frame_equal(local[COLUMNS], on_ray[COLUMNS])
    assert len(list((tmp_path / "cache").glob("*.zip"))) == 2  # the workers wrote the cache

    local_cap, local_trials, _ = run_capacity_sweep(points, jobs=2)
    ray_cap, ray_trials, _ = run_capacity_sweep(points, backend="ray")
    capacity = ["label", "capacity_qps", "capacity_ci_low", "capacity_ci_high"]
    pd.testing.assert_frame_equal(local_cap[capacity], ray_cap[capacity])
    assert len(ray_trials) == len(local_trials) > 4


def test_ray_address_is_checked_before_running(tmp_path):
    from experiments.planning.backends import check_available

    with pytest.raises(BackendError, match="only used with --backend ray"):
        check_available("local", "auto")
    pytest.importorskip("ray")
    with pytest.raises(BackendError, match="nothing reachable there"):  # Ray would retry for minutes
        check_available("ray", "127.0.0.1:1")
    with pytest.raises(BackendError, match="expected auto, HOST:PORT"):
        check_available("ray", "head-node")
    check_available("ray", None)  # a local instance: nothing to check
