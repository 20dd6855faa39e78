"""Files that are not plain CSV/JSON-lines text: a FIFO or device is refused before it is opened
(it would block or never end), and a canonical Parquet trace (what `trace convert --to
x.parquet` writes) reads back with the canonical CSV's columns and checks."""
from __future__ import annotations

import math
import os
import re
import threading

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.cli.main import app
from traces import TraceFormatError, read_lengths, read_trace, write_canonical

runner = CliRunner()
FIFO_MESSAGE = ("not a regular file: expected a trace file (a regular file); this is a FIFO (named pipe), which is "
                "not opened (reading it could wait forever or never end)")


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "trace.csv"
    os.mkfifo(path)
    return path


def _run_with_watchdog(call, seconds=20.0):
    """call() in a daemon thread; fail (not hang the suite) if it is still running after `seconds`
    (a reader blocked opening the FIFO)."""
    outcome = {}

    def target():
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the reader opened the FIFO and is waiting for a writer"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.mark.parametrize("reader", [read_trace, read_lengths, lambda p: read_trace(p, format="canonical")])
def test_a_fifo_is_refused_without_being_opened(fifo, reader):
    with pytest.raises(TraceFormatError) as info:
        _run_with_watchdog(lambda: reader(fifo))
    assert str(info.value) == f"{fifo}: {FIFO_MESSAGE}"


def test_trace_stats_of_a_fifo_or_dev_zero_says_not_a_regular_file(fifo):
    result = _run_with_watchdog(lambda: runner.invoke(app, ["trace", "stats", str(fifo)]))
    assert result.exit_code == 2 and f"error: {fifo}: {FIFO_MESSAGE}" in " ".join(result.output.split())
    if os.path.exists("/dev/zero"):
        result = _run_with_watchdog(lambda: runner.invoke(app, ["trace", "stats", "/dev/zero"]))
        assert result.exit_code == 2
        assert ("error: /dev/zero: not a regular file: expected a trace file (a regular file); this is a character "
                "device") in " ".join(result.output.split())


def test_missing_and_folder_paths_keep_their_os_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="trace file not found"):
        read_trace(tmp_path / "absent.csv")
    with pytest.raises(IsADirectoryError, match="a folder, not a trace file"):
        read_trace(tmp_path)


# ----- canonical Parquet ----------------------------------------------------------------------

CSV = "arrival_s,prompt_tokens,output_tokens,priority\n0.1,10,5,0\n0.35,20,7,2\n1e-07,3,2,0\n2.5,4096,1,1\n"


def test_a_converted_parquet_trace_reads_back_as_its_csv(tmp_path):
    (tmp_path / "t.csv").write_text(CSV)
    result = runner.invoke(app, ["trace", "convert", str(tmp_path / "t.csv"), "--to", str(tmp_path / "t.parquet")])
    assert result.exit_code == 0, result.output
    from_csv, from_parquet = read_trace(tmp_path / "t.csv"), read_trace(tmp_path / "t.parquet")
    assert from_parquet.format == "canonical_parquet" and from_parquet.rejected_rows == {}
    assert from_parquet.requests == from_csv.requests
    # Arrival order, from 0: 1e-07 (3 tokens) first; the floats exactly as written.
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens, r.priority) for r in from_parquet.requests] == [
        (0.0, 3, 2, 0), (0.1 - 1e-07, 10, 5, 0), (0.35 - 1e-07, 20, 7, 2), (2.5 - 1e-07, 4096, 1, 1)]
    again = tmp_path / "again.parquet"
    write_canonical(from_parquet.requests, again)
    assert read_trace(again).requests == from_parquet.requests  # round trip
    lengths = read_lengths(tmp_path / "t.parquet")
    assert lengths.prompt_tokens.tolist() == [3, 10, 20, 4096]  # file order: convert wrote arrival order


def test_parquet_rows_are_checked_as_the_csv_rows_are(tmp_path):
    frame = pd.DataFrame({"arrival_s": [0.0, 0.5, np.nan, 1.0, 2.0, math.inf, -1.0],
                          "prompt_tokens": [10, -1, 3, 4, 5, 6, 7],
                          "output_tokens": [1.0, 2.0, 3.0, 4.5, 6.0, 1.0, 1.0]})
    frame.to_parquet(tmp_path / "bad.parquet", index=False)
    frame.to_csv(tmp_path / "bad.csv", index=False)
    from_parquet = read_trace(tmp_path / "bad.parquet")
    expected = {"prompt_tokens < 1": [2], "missing field": [3], "output_tokens not a whole number": [4],
                "non-numeric": [6], "negative arrival": [7]}
    assert from_parquet.rejected_rows == expected == read_trace(tmp_path / "bad.csv").rejected_rows
    assert [(r.arrival_s, r.prompt_tokens) for r in from_parquet.requests] == [(0.0, 10), (2.0, 5)]
    with pytest.raises(TraceFormatError) as info:
        read_trace(tmp_path / "bad.parquet", strict=True)
    assert str(info.value) == (f"{tmp_path / 'bad.parquet'}: row 2: field 'prompt_tokens': prompt_tokens < 1: "
                               "got '-1'; expected a whole number of tokens from 1 to 2147483647")


def test_a_parquet_file_without_the_columns_or_truncated_is_named(tmp_path):
    pd.DataFrame({"arrival_s": [0.0], "prompt": [3]}).to_parquet(tmp_path / "cols.parquet", index=False)
    with pytest.raises(TraceFormatError, match=re.escape(
            "cols.parquet: field 'header': got 'arrival_s,prompt'; expected the canonical_parquet columns "
            "arrival_s,prompt_tokens,output_tokens (missing prompt_tokens,output_tokens)")):
        read_trace(tmp_path / "cols.parquet")
    pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [3], "output_tokens": [2], "x": [1]}).to_parquet(
        tmp_path / "extra.parquet", index=False)
    assert read_trace(tmp_path / "extra.parquet").ignored_columns == ("x",)
    with pytest.raises(TraceFormatError, match="unknown column"):
        read_trace(tmp_path / "extra.parquet", strict=True)
    whole = (tmp_path / "extra.parquet").read_bytes()
    (tmp_path / "cut.parquet").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(TraceFormatError, match=r"cut.parquet: field 'header': got 'PAR1...'; expected a Parquet file "
                                               r"pyarrow can read \(ArrowInvalid: "):
        read_trace(tmp_path / "cut.parquet")
    (tmp_path / "t.csv").write_text(CSV)
    with pytest.raises(TraceFormatError, match="expected a Parquet file for format canonical_parquet"):
        read_trace(tmp_path / "t.csv", format="canonical_parquet")
    with pytest.raises(TraceFormatError, match="this is a Parquet file .read it with format auto or canonical_parquet"):
        read_trace(tmp_path / "extra.parquet", format="canonical")


def test_nan_is_counted_alike_in_csv_jsonl_and_parquet(tmp_path):
    """NaN where a number belongs is "missing field" in every format (the CSV path's rule, for the
    "nan" pandas and spreadsheets write); inf is "non-numeric" in every format."""
    (tmp_path / "m.jsonl").write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 3}\n'
        '{"timestamp": NaN, "input_length": 5, "output_length": 3}\n'
        '{"timestamp": Infinity, "input_length": 5, "output_length": 3}\n'
        '{"timestamp": 7, "input_length": 5, "output_length": 3}\n')
    (tmp_path / "c.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,5,3\nnan,5,3\ninf,5,3\n7,5,3\n")
    pd.DataFrame({"arrival_s": [0.0, np.nan, np.inf, 7.0], "prompt_tokens": [5] * 4, "output_tokens": [3] * 4}
                 ).to_parquet(tmp_path / "p.parquet", index=False)
    for name in ("m.jsonl", "c.csv", "p.parquet"):
        assert read_trace(tmp_path / name).rejected_rows == {"missing field": [2], "non-numeric": [3]}, name


def test_a_sessions_file_that_is_a_fifo_is_refused_without_being_opened(fifo):
    from traces.sessions import read_sessions

    with pytest.raises(TraceFormatError) as info:
        _run_with_watchdog(lambda: read_sessions(fifo))
    assert str(info.value) == f"{fifo}: {FIFO_MESSAGE}"
