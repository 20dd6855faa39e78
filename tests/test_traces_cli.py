"""`sarathi-sim trace stats|convert` (experiments/cli/trace.py), on the cases and public traces."""
from __future__ import annotations

import re

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
