"""`engine run` refuses a model whose weights and KV pool do not fit the device, before allocating
(experiments.verification.engine_run.check_fits_memory), as a one-line error."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from profiler import get_model_spec

GIB = 2**30


def test_weights_and_kv_pool_against_available_memory():
    from experiments.verification.engine_run import check_fits_memory

    spec = get_model_spec("llama-3-8b")
    weights_gib = spec.num_params * 4 / GIB  # float32
    pool = SimpleNamespace(num_gpu_blocks=1000, block_size=16)
    kv_gib = 1000 * 16 * spec.kv_bytes_per_token(4) / GIB  # 32 layers × 2 × 8 heads × 128 × 4 B = 256 KiB/token
    assert kv_gib == pytest.approx(3.90625)
    with pytest.raises(ValueError) as small:
        check_fits_memory(spec, 4, pool, "cpu", 8 * GIB, 4 * GIB)
    assert str(small.value) == (f"llama-3-8b does not fit on cpu (8.0 GiB available): its weights alone take "
                                f"{weights_gib:.1f} GiB at 4 bytes per parameter; use a smaller model, a 2-byte "
                                "--dtype, or a larger device")
    with pytest.raises(ValueError, match=r"weights 29\.9 GiB \+ KV pool 3\.9 GiB \(1000 blocks\)"):
        check_fits_memory(spec, 4, pool, "cpu", 32 * GIB, 4 * GIB)
    with pytest.raises(ValueError, match=r"takes 3\.91 GiB, over the 2\.00 GiB allowed"):
        check_fits_memory(spec, 4, pool, "cpu", 64 * GIB, 2 * GIB)
    check_fits_memory(spec, 4, pool, "cpu", 34 * GIB, 4 * GIB)  # 29.9 + 3.9 fits in 34


def test_engine_run_of_a_model_too_large_is_one_line_and_exit_2(monkeypatch, tmp_path):
    pytest.importorskip("torch")
    from experiments.cli.main import app

    monkeypatch.setattr("experiments.verification.engine_run.available_memory_bytes", lambda device: 4 * GIB)
    config = str(Path(__file__).parent / "data" / "engine" / "tiny_engine.yaml")
    result = CliRunner().invoke(app, ["engine", "run", config, "--set", "model=llama-2-7b", "--device", "cpu",
                                      "--dtype", "float32", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2
    message = " ".join(result.output.split())
    assert message.startswith("error: llama-2-7b does not fit on cpu (4.0 GiB available): its weights alone take")
    assert "Traceback" not in result.output
