"""Writers and readers that went around the project's file helpers: the profile builder and
`save_checkpoint` wrote with plain write_text (a full disk left a truncated file), and calibrate
read profile.json with a bare json.loads (a traceback, no file named)."""
from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from profiler.profile_data import ProfileError

TINY_PROFILE = Path(__file__).parent / "data" / "profiles" / "cpu-tiny-llama"


def _half_then_full_disk(path, *args, **kwargs):
    Path(path).write_bytes(b'{"half')
    raise OSError(errno.ENOSPC, "No space left on device")


def test_build_profiles_writes_a_profile_whole_or_not_at_all(tmp_path, monkeypatch):
    from traces.profiles import build_profiles

    monkeypatch.setattr(build_profiles, "profile_from_file", lambda path, spec: {"name": spec.name, "num_requests": 3})
    target = tmp_path / "azure-conv.json"
    target.write_text("the shipped profile\n")
    monkeypatch.setattr(Path, "write_text", lambda self, text, **kw: _half_then_full_disk(self))
    with pytest.raises(SystemExit) as exc:
        build_profiles.main(["--traces-dir", str(tmp_path), "--out-dir", str(tmp_path), "--only", "azure-conv"])
    assert str(exc.value) == f"error: {target}: could not be written (No space left on device)"
    monkeypatch.undo()
    assert target.read_text() == "the shipped profile\n"  # the old file, not a truncated one
    assert [p.name for p in tmp_path.iterdir()] == ["azure-conv.json"]  # no temporary left
    monkeypatch.setattr(build_profiles, "profile_from_file", lambda path, spec: {"name": spec.name, "num_requests": 3})
    build_profiles.main(["--traces-dir", str(tmp_path), "--out-dir", str(tmp_path), "--only", "azure-conv"])
    assert target.read_text() == '{\n "name": "azure-conv",\n "num_requests": 3\n}\n'


def test_save_checkpoint_writes_each_file_whole_or_not_at_all(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    from gpu_engine.build import build_model
    from gpu_engine.checkpoint import load_model_args, save_checkpoint
    from profiler.atomic_write import OutputWriteError

    model = build_model(load_model_args(Path(__file__).parent / "data" / "engine" / "tiny"), dtype=torch.float32,
                        device="cpu", seed=0)
    (tmp_path / "model.safetensors").write_bytes(b"old weights")
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(safetensors_torch, "save_file", lambda tensors, path, **kw: _half_then_full_disk(path))
    with pytest.raises(OutputWriteError, match=r"model.safetensors: could not be written \(No space left on device\)"):
        save_checkpoint(model, tmp_path)
    # The weights go first, so the old config.json is not left beside weights it does not describe.
    assert (tmp_path / "model.safetensors").read_bytes() == b"old weights" and (tmp_path / "config.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]  # no temporary left
    monkeypatch.undo()
    save_checkpoint(model, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["num_hidden_layers"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]


def test_calibrate_reads_profile_json_with_the_file_named(tmp_path):
    from experiments.verification.calibrate import profile_block_size, profiled_device

    assert profile_block_size(TINY_PROFILE) == 16
    with pytest.raises(ProfileError, match=rf"^{tmp_path}: not a calibration directory \(no profile.json\); "
                                           "create one with `sarathi-sim calibrate`$"):
        profiled_device(tmp_path)
    sidecar = tmp_path / "profile.json"
    sidecar.write_text('{"device": ')
    with pytest.raises(ProfileError, match=rf"^{sidecar}: not readable JSON \(JSONDecodeError: Expecting value"):
        profiled_device(tmp_path)
    sidecar.write_text("[16]")
    with pytest.raises(ProfileError, match=rf"^{sidecar}: must hold a JSON object, got list$"):
        profile_block_size(tmp_path)
    for meta, got in (({}, "None"), ({"block_size": "16"}, "'16'"), ({"block_size": 0}, "0"), ({"block_size": True}, "True")):
        sidecar.write_text(json.dumps(meta))
        with pytest.raises(ProfileError) as exc:
            profile_block_size(tmp_path)
        assert str(exc.value) == (f"{sidecar}: block_size must be a positive integer (the KV block size, in tokens, "
                                  f"the attention was profiled with), got {got}; profile again with `sarathi-sim "
                                  "calibrate`")
