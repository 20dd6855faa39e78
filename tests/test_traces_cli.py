"""`sarathi-sim trace stats|convert` (experiments/cli/trace.py), on the cases and public traces."""
from __future__ import annotations

import errno
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from experiments.cli.main import app
from tests.conftest import shared_path
from traces import read_trace

runner = CliRunner()


def run(*args):
    result = runner.invoke(app, ["trace", *map(str, args)])
    return result.exit_code, re.sub(r"\s+", " ", result.output)


def test_stats_of_one_second_say_rate_and_cv_are_undefined():
    # Case 13: four BurstGPT rows in one second.
    code, out = run("stats", shared_path("cases", "same_second", "trace.csv"))
    assert code == 0
    assert "(burstgpt): loaded 4, rejected 0" in out
    assert "span 0 s" in out and "mean rate n/a" in out and "gap CV (burstiness; Poisson = 1) n/a" in out
    assert "inf" not in out and "nan" not in out


def test_stats_of_mooncake_conversation_count_what_exceeds_max_model_len():
    # Case 12: 12,031 requests over 3,537 s; 5,570 exceed 8,192 tokens.
    code, out = run("stats", shared_path("traces", "mooncake", "conversation_trace.jsonl"), "--max-model-len", 8192)
    assert code == 0
    assert "requests 12031" in out and "span 3537 s" in out
    assert "mean rate 3.40119 requests/s" in out  # 12,030 gaps / 3,536.999 s
    assert "prompt + output > 8192 5570 (46.3% of requests; rejected_too_long when simulated)" in out
    assert "output tokens min 1 " in out


def test_stats_report_rejected_rows_and_lengths_only_files(tmp_path):
    code, out = run("stats", shared_path("cases", "zero_prompt", "trace.csv"))
    assert code == 0 and "loaded 1, rejected 2" in out
    assert "rejected 1 x prompt_tokens < 1: rows 1" in out and "rejected 1 x missing field: rows 3" in out
    code, out = run("stats", shared_path("traces", "vidur", "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"),
                    "--plot", "--plot-to", tmp_path / "arxiv.png")
    assert code == 0 and "(lengths): loaded 28257" in out and "arrivals none (lengths only" in out
    assert "prompt tokens min 1 " in out and "p50 2730" in out
    assert (tmp_path / "arxiv.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_stats_strict_stops_at_the_first_bad_row():
    code, out = run("stats", shared_path("cases", "zero_prompt", "trace.csv"), "--strict")
    assert code == 2 and "row 1 (file line 2): field 'prompt_tokens': prompt_tokens < 1" in out


def test_convert_writes_a_canonical_trace_that_reads_back_the_same(tmp_path):
    source = shared_path("traces", "vidur", "splitwise_code.csv")
    code, out = run("convert", source, "--to", tmp_path / "code.csv")
    assert code == 0 and "wrote 8819 requests to" in out
    assert read_trace(tmp_path / "code.csv", strict=True).requests == read_trace(source).requests
    code, out = run("convert", source, "--to", tmp_path / "first.jsonl", "--max-requests", 100, "--qps", 10)
    converted = read_trace(tmp_path / "first.jsonl", strict=True).requests
    assert code == 0 and len(converted) == 100 and 99 / converted[-1].arrival_s == 10.0


def test_convert_a_lengths_only_file_needs_a_rate(tmp_path):
    source = shared_path("traces", "etalon", "bwb_stats_llama2_tokenizer_filtered_v2.csv")
    code, out = run("convert", source, "--to", tmp_path / "bwb.csv")
    assert code == 2 and "has lengths only (no arrivals): give --qps" in out
    code, out = run("convert", source, "--to", tmp_path / "bwb.csv", "--qps", 4, "--max-requests", 50)
    requests = read_trace(tmp_path / "bwb.csv").requests
    assert code == 0 and len(requests) == 50 and (requests[0].prompt_tokens, requests[0].output_tokens) == (1047, 1368)


def test_convert_refuses_bad_inputs(tmp_path):
    same_second = shared_path("cases", "same_second", "trace.csv")
    code, out = run("convert", same_second, "--to", tmp_path / "x.csv", "--qps", 2)
    assert code == 2 and "mean rate is undefined" in out
    code, out = run("convert", same_second, "--to", same_second)
    assert code == 2 and "is the input file" in out
    code, out = run("stats", tmp_path / "missing.csv")
    assert code == 2 and "does not exist" in out


# ----- every case of ../shared/cases/README.md through `trace stats` -------------------------------
# (case folder, loaded, rejected, what the README says the output must show). Strict mode stops
# only where a row is bad (cases 6 and 7, row 1); every other case loads whole.
CASES = [
    ("all_unservable", 2, 0, ["prompt + output > 8192 2 (100% of requests"]),
    ("chunk_not_block_multiple", 1, 0, ["prompt tokens min 250 "]),
    ("empty_trace", 0, 0, ["requests 0 ", "mean rate n/a", "prompt tokens min n/a"]),
    ("kv_pool_too_small", 2, 0, ["prompt tokens min 20 ", "max 1002"]),
    ("mooncake_ms_units", 5, 0, ["span 12 s", "mean rate 0.333333 requests/s"]),  # ms: 0, 3, 5.999, 9, 12 s
    ("preemption_livelock", 8, 0, ["span 0 s", "mean rate n/a"]),
    ("prompt_fits_but_total_does_not", 1, 0, ["total tokens min 144 "]),
    ("prompt_over_budget_no_chunking", 2, 0, ["prompt tokens min 100 ", "max 2715"]),
    ("same_second", 4, 0, ["span 0 s", "mean rate n/a", "gap CV (burstiness; Poisson = 1) n/a"]),
    ("zero_and_one_output", 2, 1, ["rejected 1 x output_tokens < 1: rows 1", "output tokens min 1 "]),
    ("zero_prompt", 1, 2, ["rejected 1 x prompt_tokens < 1: rows 1", "rejected 1 x missing field: rows 3"]),
]
STRICT_ERRORS = {
    "zero_and_one_output": "row 1 (file line 2): field 'output_tokens': output_tokens < 1: got '0'",
    "zero_prompt": "row 1 (file line 2): field 'prompt_tokens': prompt_tokens < 1: got '0'",
}


def case_file(name):
    folder = shared_path("cases", name)
    return next(folder.glob("trace.*"))


@pytest.mark.parametrize("name, loaded, rejected, shown", CASES)
def test_every_case_runs_through_stats_as_its_readme_says(name, loaded, rejected, shown):
    path = case_file(name)
    code, out = run("stats", path, "--max-model-len", 8192)
    assert code == 0, out
    assert f"loaded {loaded}, rejected {rejected}" in out
    for text in shown:
        assert text in out
    assert "Traceback" not in out and " inf" not in out and " nan" not in out
    code, out = run("stats", path, "--strict")
    if name in STRICT_ERRORS:
        assert code == 2 and STRICT_ERRORS[name] in out and str(path) in out
    else:
        assert code == 0 and f"loaded {loaded}, rejected 0" in out


def test_the_gap_cv_of_a_single_gap_is_undefined_not_zero():
    # all_unservable: two arrivals, one gap. One gap has no spread to measure.
    code, out = run("stats", case_file("all_unservable"))
    assert code == 0 and "gap CV (burstiness; Poisson = 1) n/a" in out


# ----- hostile files: counted row errors, never a traceback -----------------------------------------
@pytest.mark.parametrize("name, text, loaded, reason", [
    ("quote.csv", 'arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,"10,5\n2,20,6\n', 2, "rejected 1 x bad quoting: rows 2"),
    ("deep.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 5}\n{"x": ' + "[" * 50_000 + "]" * 50_000
     + "}\n", 1, "rejected 1 x malformed line: rows 2"),
    ("far.csv", "arrival_s,prompt_tokens,output_tokens\n0,10,5\n1e308,20,5\n", 1, "rejected 1 x arrival too large: rows 2"),
    ("azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,5\n"
     "1723-11-16 18:15:46.6805900,20,5\n0001-01-01 00:00:00.0000000,30,5\n2023-11-16 18:15:50.9951690,40,5\n", 2,
     "rejected 1 x arrival far from the others: rows 2 rejected 1 x timestamp out of range: rows 3"),
])
def test_stats_of_hostile_files_count_the_bad_rows(tmp_path, name, text, loaded, reason):
    path = tmp_path / name
    path.write_text(text)
    code, out = run("stats", path)
    assert code == 0 and f"loaded {loaded}, rejected" in out and reason in out


# ----- convert: where the output goes --------------------------------------------------------------
TRACE = "arrival_s,prompt_tokens,output_tokens\n0.5,10,5\n1.75,20,6\n3.0,30,7\n"


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text(TRACE)
    return path


def test_convert_to_dash_writes_the_trace_on_stdout_and_the_summary_on_stderr(tmp_path, trace_file, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["trace", "convert", str(trace_file), "--to", "-"])
    assert result.exit_code == 0
    assert result.stdout == "arrival_s,prompt_tokens,output_tokens\n0.0,10,5\n1.25,20,6\n2.5,30,7\n"
    assert "loaded 3, rejected 0" in result.stderr and "wrote 3 requests to standard output" in result.stderr
    assert not (tmp_path / "-").exists()


def test_convert_to_parquet_writes_parquet_with_canonical_dtypes(tmp_path, trace_file):
    code, out = run("convert", trace_file, "--to", tmp_path / "out.parquet")
    assert code == 0 and "wrote 3 requests to" in out
    frame = pd.read_parquet(tmp_path / "out.parquet")
    assert frame.to_dict("list") == {"arrival_s": [0.0, 1.25, 2.5], "prompt_tokens": [10, 20, 30],
                                     "output_tokens": [5, 6, 7]}
    assert [str(dtype) for dtype in frame.dtypes] == ["float64", "int64", "int64"]
    code, out = run("stats", tmp_path / "out.parquet")  # read back as canonical_parquet
    assert code == 0 and "out.parquet (canonical_parquet): loaded 3, rejected 0" in out
    assert "span 2.5 s mean rate 0.8 requests/s" in out  # as the CSV it was converted from


def test_convert_refuses_a_missing_folder_a_folder_and_an_unknown_suffix_in_one_line(tmp_path, trace_file):
    for to, message in [
        (tmp_path / "nope" / "x.csv", f"error: --to {tmp_path / 'nope' / 'x.csv'}: folder {tmp_path / 'nope'} does not exist"),
        (tmp_path, f"error: --to {tmp_path} is a folder; give a file in it, e.g. --to {tmp_path / 'in.csv'}"),
        (tmp_path / "x.txt", "unknown suffix '.txt'; use .csv, .jsonl, .parquet, or - for standard output"),
    ]:
        result = runner.invoke(app, ["trace", "convert", str(trace_file), "--to", str(to)])
        assert result.exit_code == 2 and message in result.stderr
        assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]  # nothing created


def test_convert_never_writes_over_its_input_by_any_name(tmp_path, trace_file):
    (tmp_path / "link.csv").symlink_to(trace_file)
    (tmp_path / "hard.csv").hardlink_to(trace_file)
    for to in (trace_file, tmp_path / "link.csv", tmp_path / "hard.csv"):
        code, out = run("convert", trace_file, "--to", to)
        assert code == 2 and "is the input file" in out
    assert trace_file.read_text() == TRACE


def test_convert_writes_whole_or_not_at_all(tmp_path, trace_file, monkeypatch):
    target = tmp_path / "out.csv"
    target.write_text("previous\n")

    def half_then_full_disk(requests, path, layout=None):
        Path(path).write_text("arrival_s,prom")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("experiments.cli.trace.write_canonical", half_then_full_disk)
    result = runner.invoke(app, ["trace", "convert", str(trace_file), "--to", str(target), "--force"])
    assert result.exit_code == 2
    assert f"{target}: could not be written (No space left on device)" in result.stderr
    assert target.read_text() == "previous\n"  # the old file, not a truncated one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "out.csv"]  # no temporary left


def test_convert_refuses_an_existing_file_unless_forced(tmp_path, trace_file):
    notes = tmp_path / "notes.csv"
    notes.write_text("my precious notes\n")
    (tmp_path / "dangling.csv").symlink_to(tmp_path / "nowhere.csv")
    for to in (notes, tmp_path / "dangling.csv"):
        result = runner.invoke(app, ["trace", "convert", str(trace_file), "--to", str(to)])
        assert result.exit_code == 2 and "loaded" not in result.output  # refused before reading the trace
        assert result.stderr == (f"error: --to {to} already exists; it is left as it is: give another path, "
                                 "or --force to replace it\n")
    assert notes.read_text() == "my precious notes\n" and (tmp_path / "dangling.csv").is_symlink()
    code, out = run("convert", trace_file, "--to", notes, "--force")
    assert code == 0 and "wrote 3 requests to" in out
    assert notes.read_text() == "arrival_s,prompt_tokens,output_tokens\n0.0,10,5\n1.25,20,6\n2.5,30,7\n"


def test_stats_plot_to_is_checked_before_the_trace_is_read(tmp_path, trace_file):
    for to, message in [(tmp_path / "nope" / "a.png", "does not exist (create it first)"),
                        (tmp_path / "a.csv", "--plot-to " + str(tmp_path / "a.csv") + ": unknown suffix '.csv'; use .png, .svg, .pdf"),
                        (tmp_path, "is a folder; give a file in it, e.g. --plot-to " + str(tmp_path / "in.stats.png"))]:
        result = runner.invoke(app, ["trace", "stats", str(trace_file), "--plot", "--plot-to", str(to)])
        assert result.exit_code == 2 and message in result.stderr and "loaded" not in result.output
    code, out = run("stats", trace_file, "--plot", "--plot-to", tmp_path / "a.svg")
    assert code == 0 and (tmp_path / "a.svg").read_text().lstrip().startswith("<?xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.svg", "in.csv"]  # no temporary left


def test_stats_refuses_an_existing_plot_file_unless_forced(tmp_path, trace_file, monkeypatch):
    # --plot-to (or the default <stem>.stats.png) replaced an existing file without a word.
    monkeypatch.chdir(tmp_path)
    notes, default = tmp_path / "notes.png", Path("in.stats.png")
    notes.write_text("my precious notes\n")
    default.write_text("an older plot\n")
    dangling = tmp_path / "dangling.png"
    dangling.symlink_to(tmp_path / "nowhere.png")
    for extra, to in ((["--plot-to", str(notes)], notes), (["--plot-to", str(dangling)], dangling), ([], default)):
        result = runner.invoke(app, ["trace", "stats", str(trace_file), "--plot", *extra])
        assert result.exit_code == 2 and "loaded" not in result.output  # refused before reading the trace
        assert result.stderr == (f"error: --plot-to {to} already exists; it is left as it is: give another path, "
                                 "or --force to replace it\n")
    assert notes.read_text() == "my precious notes\n" and default.read_text() == "an older plot\n"
    assert dangling.is_symlink()
    for extra in (["--plot-to", str(notes)], []):
        result = runner.invoke(app, ["trace", "stats", str(trace_file), "--plot", *extra, "--force"])
        assert result.exit_code == 0 and "loaded 3, rejected 0" in result.output
    assert notes.read_bytes()[:8] == default.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling.png", "in.csv", "in.stats.png", "notes.png"]


def test_stats_plot_to_alone_writes_the_plot(tmp_path, trace_file):
    # --plot-to without --plot wrote nothing and said nothing.
    code, out = run("stats", trace_file, "--plot-to", tmp_path / "alone.png")
    assert code == 0 and f"wrote {tmp_path / 'alone.png'}" in out
    assert (tmp_path / "alone.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    code, out = run("stats", trace_file)
    assert code == 0 and "wrote" not in out and sorted(p.name for p in tmp_path.iterdir()) == ["alone.png", "in.csv"]


def test_stats_writes_the_plot_whole_or_not_at_all(tmp_path, trace_file, monkeypatch):
    target = tmp_path / "plot.png"
    target.write_text("previous plot\n")

    def half_then_full_disk(fig, tmp, **kwargs):
        Path(tmp).write_bytes(b"\x89PNG")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("matplotlib.figure.Figure.savefig", half_then_full_disk)
    result = runner.invoke(app, ["trace", "stats", str(trace_file), "--plot", "--plot-to", str(target), "--force"])
    assert result.exit_code == 2
    assert result.stderr == f"error: {target}: could not be written (No space left on device)\n"
    assert target.read_text() == "previous plot\n"  # the old file, not a truncated one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "plot.png"]  # no temporary left


def test_file_and_column_names_in_brackets_print_as_written(tmp_path):
    # rich read "[red]" as markup and printed "x.csv" and "user".
    path = tmp_path / "[red]x.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,[bold]user\n0,1,1,x\n")
    code, out = run("stats", path)
    assert code == 0 and "[red]x.csv (canonical): loaded 1, rejected 0" in out
    assert "ignored unknown columns: [bold]user" in out
    code, out = run("convert", path, "--to", tmp_path / "[b]o.csv")
    assert code == 0 and f"wrote 1 requests to {tmp_path / '[b]o.csv'}" in out
