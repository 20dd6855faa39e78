"""`profiler.json_object.read_json_object`, the one reader of files that must hold a JSON object:
every way such a file can be wrong is an error naming it, in the caller's words and exception
class, never a traceback (the readers it replaced let a deep nesting, a non-UTF-8 vLLM result or a
measured.json that is not an object through)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from experiments.verification.vllm_bench import read_vllm_bench
from profiler.engine_overhead import OVERHEAD_FILE, EngineOverhead
from profiler.json_object import read_json_object
from profiler.measured.tables import MeasuredTableError, MeasuredTables

SHIPPED_H100 = Path(__file__).resolve().parents[1] / "profiler" / "data" / "measured" / "h100-sxm" / "aiconfigurator"


class _OwnError(ValueError):
    pass


def test_an_object_is_returned_as_it_is(tmp_path):
    path = tmp_path / "meta.json"
    path.write_text('{"tp": 2, "device": {"name": "H100"}}')
    assert read_json_object(path) == {"tp": 2, "device": {"name": "H100"}}


@pytest.mark.parametrize("content, message", [
    (b"{not json", "not readable JSON (JSONDecodeError: Expecting property name enclosed in double quotes: "
                   "line 1 column 2 (char 1))"),
    (b"\xff\xfe{", "not readable JSON (UnicodeDecodeError: "),
    (b"[" * 100_000 + b"]" * 100_000, "not readable JSON (RecursionError: "),
    (b'{"n": ' + b"9" * 5000 + b"}", "not readable JSON (ValueError: Exceeds the limit (4300 digits)"),
    (b"[1, 2]", "must hold a JSON object, got list"),
    (b'"text"', "must hold a JSON object, got str"),
    (b"7", "must hold a JSON object, got int"),
])
def test_every_wrong_file_names_itself(tmp_path, content, message):
    path = tmp_path / "profile.json"
    path.write_bytes(content)
    with pytest.raises(ValueError) as caught:
        read_json_object(path)
    assert str(caught.value).startswith(f"{path}: {message}")


def test_the_callers_words_and_exception_class(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[]")
    with pytest.raises(_OwnError, match=rf"^{path}: expected a model config, got list$"):
        read_json_object(path, "cannot read the config", "expected a model config", _OwnError)
    with pytest.raises(_OwnError, match=rf"^{tmp_path / 'absent.json'}: cannot read the config \(FileNotFoundError: "):
        read_json_object(tmp_path / "absent.json", "cannot read the config", "expected a model config", _OwnError)


def test_a_deeply_nested_vllm_result_is_a_named_error(tmp_path):
    path = tmp_path / "result.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=rf"^{path}: cannot read vLLM bench result \(RecursionError"):
        read_vllm_bench(path)
    path.write_text("[]")
    with pytest.raises(ValueError, match=rf"^{path}: expected a JSON object \(the result of `vllm bench serve "
                                         r"--save-result`\), got list$"):
        read_vllm_bench(path)


def test_a_measured_sidecar_that_is_not_an_object_is_a_measured_table_error(tmp_path):
    directory = tmp_path / "h100"
    shutil.copytree(SHIPPED_H100, directory)
    (directory / "measured.json").write_text('["tables"]')
    with pytest.raises(MeasuredTableError, match=rf"^{directory / 'measured.json'}: must hold a JSON object, got list$"):
        MeasuredTables.load(directory)


def test_an_engine_overhead_that_is_not_an_object_names_the_file(tmp_path):
    (tmp_path / OVERHEAD_FILE).write_text("0.004")
    with pytest.raises(ValueError, match=rf"^{tmp_path / OVERHEAD_FILE}: must hold a JSON object, got float$"):
        EngineOverhead.load(tmp_path)


def test_an_engine_json_that_is_not_an_object_names_the_file(tmp_path):
    from experiments.verification.verify import measured_step_times

    (tmp_path / "plans.jsonl").write_text("")
    (tmp_path / "engine.json").write_text('["cpu"]')  # was an AttributeError traceback (a list has no .get)
    with pytest.raises(ValueError, match=rf"^{tmp_path / 'engine.json'}: must hold a JSON object, got list$"):
        measured_step_times(tmp_path)
