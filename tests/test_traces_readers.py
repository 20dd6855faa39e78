"""Trace readers on the public traces of ../shared/traces: counts, spans, units and agreement.

Right values from ../shared/traces/README.md and ../shared/cases/README.md (cases 12, 13).
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from tests.conftest import shared_path
from traces import read_trace, write_canonical
from traces import TraceFormatError
from traces.readers import read_azure_csv, read_burstgpt_csv, read_mooncake_jsonl, read_vidur_csv

AZURE = ("traces", "azure_public_dataset")


def columns(requests):
    return (
        np.array([r.arrival_s for r in requests]),
        np.array([r.prompt_tokens for r in requests]),
        np.array([r.output_tokens for r in requests]),
    )


def test_azure_conv_counts_span_and_lengths():
    result = read_trace(shared_path(*AZURE, "AzureLLMInferenceTrace_conv.csv"))
    assert result.format == "azure"
    assert result.rejected_rows == {}
    arrival_s, prompt, output = columns(result.requests)
    assert len(result.requests) == 19_366
    assert arrival_s[0] == 0.0
    assert arrival_s[-1] == pytest.approx(3501.7, abs=0.1)
    assert (prompt.min(), prompt.max(), np.median(prompt)) == (2, 14_050, 1_020)
    assert (output.min(), output.max(), np.median(output)) == (7, 1_000, 129)
    assert [r.request_id for r in result.requests] == list(range(19_366))


def test_azure_conv_first_rows_exact_to_100ns():
    # File: 18:15:46.6805900 then 18:15:50.9951690 -> 4.314579 s apart exactly.
    requests = read_azure_csv(shared_path(*AZURE, "AzureLLMInferenceTrace_conv.csv"))
    assert requests[1].arrival_s == 4.314579
    assert (requests[0].prompt_tokens, requests[0].output_tokens) == (374, 44)


def test_azure_code_counts_and_span():
    requests = read_trace(shared_path(*AZURE, "AzureLLMInferenceTrace_code.csv")).requests
    arrival_s, prompt, output = columns(requests)
    assert len(requests) == 8_819
    assert arrival_s[-1] == pytest.approx(3435.9, abs=0.1)
    assert (prompt.min(), prompt.max(), np.median(prompt)) == (3, 7_437, 1_469)
    assert (output.min(), output.max(), np.median(output)) == (6, 1_899, 13)


@pytest.mark.parametrize("kind", ["conv", "code"])
def test_azure_and_vidur_files_give_the_same_schedule(kind):
    azure = read_azure_csv(shared_path(*AZURE, f"AzureLLMInferenceTrace_{kind}.csv"))
    vidur = read_vidur_csv(shared_path("traces", "vidur", f"splitwise_{kind}.csv"))
    a_arrival, a_prompt, a_output = columns(azure)
    v_arrival, v_prompt, v_output = columns(vidur)
    assert len(azure) == len(vidur)
    assert np.max(np.abs(a_arrival - v_arrival)) < 1e-6
    assert np.array_equal(a_prompt, v_prompt) and np.array_equal(a_output, v_output)


def test_azure_file_loads_well_under_a_second():
    # CPU time, not wall time: another job on the shared CI machine must not fail this (a fresh-clone
    # run beside other work took 0.97 s of wall time for what is 0.15-0.40 s of work, BENCHMARKS.md).
    path = shared_path(*AZURE, "AzureLLMInferenceTrace_conv.csv")
    start = time.process_time()
    read_trace(path)
    assert time.process_time() - start < 0.8


def test_auto_detection_names_each_format():
    assert read_trace(shared_path("traces", "vidur", "splitwise_code.csv")).format == "vidur"
    assert read_trace(shared_path("cases", "same_second", "trace.csv")).format == "burstgpt"
    assert read_trace(shared_path("cases", "mooncake_ms_units", "trace.jsonl")).format == "mooncake"
    assert read_trace(shared_path("cases", "empty_trace", "trace.csv")).format == "canonical"


def test_mooncake_timestamps_are_milliseconds():
    # Case 12: arrivals 0, 3.000, 5.999, 9.000, 12.000 s.
    requests = read_mooncake_jsonl(shared_path("cases", "mooncake_ms_units", "trace.jsonl"))
    assert [r.arrival_s for r in requests] == [0.0, 3.0, 5.999, 9.0, 12.0]
    assert requests[0].prompt_tokens == 6758 and requests[0].output_tokens == 500


def test_mooncake_conversation_trace():
    requests = read_mooncake_jsonl(shared_path("traces", "mooncake", "conversation_trace.jsonl"))
    arrival_s, prompt, output = columns(requests)
    assert len(requests) == 12_031
    assert arrival_s[-1] == pytest.approx(3_537, abs=1.0)
    assert int(np.sum(np.diff(arrival_s) == 0)) == 10_851
    assert int(np.sum(prompt + output > 8_192)) == 5_570
    assert int(np.sum(output == 1)) == 72
    assert requests[0].prefix_hash_ids == tuple(range(14))


def test_burstgpt_same_second_rows_keep_file_order():
    # Case 13: four rows at one second, all kept in file order at 0.0 s.
    requests = read_burstgpt_csv(shared_path("cases", "same_second", "trace.csv"))
    assert [r.arrival_s for r in requests] == [0.0] * 4
    assert [r.prompt_tokens for r in requests] == [310, 95, 720, 410]
    assert [r.output_tokens for r in requests] == [120, 260, 88, 301]
    assert [r.request_id for r in requests] == [0, 1, 2, 3]


def test_burstgpt_seconds_from_first_row():
    requests = read_burstgpt_csv(shared_path("traces", "burstgpt", "BurstGPT_1.EXCERPT_from_README.csv"))
    assert [r.arrival_s for r in requests] == [0.0, 40.0, 113.0]


def test_azure_2024_timestamps_with_utc_offset():
    path = shared_path("traces", "excerpts", "AzureLLMInferenceTrace_conv_1week.EXCERPT_from_notebook_output.csv")
    requests = read_trace(path, strict=True).requests
    # 00:00:00.001163 -> 00:00:00.041683, and the last row 6 days 23:59:59.994297 later.
    assert requests[1].arrival_s == pytest.approx(0.04052, abs=1e-9)
    assert requests[-1].arrival_s == pytest.approx(7 * 86_400 - 0.001163 - 0.004540, abs=1e-6)


def test_burstgpt_filters_by_model_and_log_type():
    same_second = shared_path("cases", "same_second", "trace.csv")
    chatgpt = read_burstgpt_csv(same_second, models=["ChatGPT"])
    assert [r.prompt_tokens for r in chatgpt] == [310, 95, 410]
    result = read_trace(same_second, where={"Model": ["GPT-4"]})
    assert [r.prompt_tokens for r in result.requests] == [720]
    assert result.filtered_rows == {"Model not in ['GPT-4']": [1, 2, 4]} and result.rejected_rows == {}
    assert "filtered out 3 x Model not in ['GPT-4']: rows 1, 2, 4" in result.summary()
    readme = shared_path("traces", "burstgpt", "BurstGPT_1.EXCERPT_from_README.csv")
    assert read_burstgpt_csv(readme, log_types=["API log"]) == []
    assert [r.arrival_s for r in read_burstgpt_csv(readme, models=["ChatGPT"], log_types=["Conversation log"])] == [0.0, 40.0]


def test_a_filter_on_a_missing_column_is_an_error():
    with pytest.raises(TraceFormatError, match="field 'Model': filter on a missing column"):
        read_trace(shared_path("cases", "zero_prompt", "trace.csv"), where={"Model": ["ChatGPT"]})


def test_azure_2025_multimodal_layout_loads_strictly():
    path = shared_path("traces", "excerpts", "AzureLMMInferenceTrace_multimodal.EXCERPT_from_notebook_output.csv")
    requests = read_trace(path, strict=True).requests  # NumImages is a known column, not an unknown one
    assert [r.arrival_s for r in requests[:3]] == [0.0, pytest.approx(5.55), pytest.approx(6.244)]
    assert (requests[0].prompt_tokens, requests[0].output_tokens) == (770, 491)


def test_epoch_seconds_start_at_zero_and_format_can_be_forced(tmp_path):
    path = tmp_path / "epoch.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n1700000000.5,10,5\n1700000002.0,20,6\n")
    assert [r.arrival_s for r in read_trace(path).requests] == [0.0, 1.5]
    vidur_like = tmp_path / "vidur.csv"
    vidur_like.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.5,10,5\n")
    assert read_trace(vidur_like, format="vidur").format == "vidur"


def test_canonical_csv_round_trip_is_exact(tmp_path):
    azure = read_trace(shared_path(*AZURE, "AzureLLMInferenceTrace_conv.csv")).requests
    path = write_canonical(azure, tmp_path / "conv.csv")
    assert path.read_text().splitlines()[0] == "arrival_s,prompt_tokens,output_tokens"
    assert read_trace(path, strict=True).requests == azure


def test_canonical_jsonl_round_trip_keeps_prefix_hashes(tmp_path):
    mooncake = read_mooncake_jsonl(shared_path("traces", "excerpts", "mooncake_format_example.EXCERPT_from_FAST25_README.jsonl"))
    back = read_trace(write_canonical(mooncake, tmp_path / "example.jsonl"), strict=True)
    assert back.format == "canonical_jsonl" and back.requests == mooncake
    assert [r.prefix_hash_ids for r in back.requests] == [r.prefix_hash_ids for r in mooncake]
    assert back.requests[1].prefix_hash_ids == (*range(46, 58), 2366)


def test_a_canonical_files_request_id_is_said_not_used(tmp_path):
    """The file's ids 7, 42, 42 are not kept: requests are 0..2 in arrival order (0.0, 0.25, 0.5 s,
    so the file's third row is request 1), and the reader says so (strict mode too: a defined column)."""
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,request_id\n0.0,100,10,7\n0.5,120,12,42\n0.25,80,8,42\n")
    for strict in (False, True):
        result = read_trace(path, strict=strict)
        assert [(r.request_id, r.prompt_tokens) for r in result.requests] == [(0, 100), (1, 80), (2, 120)]
        assert result.unused_columns == ("request_id",) and result.ignored_columns == ()
    assert ("  not used: request_id (requests are numbered 0..n-1 in arrival order, file order among ties)"
            in result.report_lines())
    plain = tmp_path / "p.csv"
    plain.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,100,10\n")
    assert read_trace(plain).unused_columns == ()


def test_a_sweep_reports_the_trace_files_unused_request_id(tmp_path):
    """points.csv's trace_unused_columns and report.md name it, with what requests.parquet's ids are."""
    import pandas as pd
    from typer.testing import CliRunner

    from experiments.cli.main import app

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,request_id\n0.0,100,10,7\n0.5,120,12,42\n")
    config = tmp_path / "c.yaml"
    config.write_text(f"name: rid\nmodel: llama-3-8b\ndevice: h100-sxm\ntrace: {{kind: file, path: {trace}}}\n")
    result = CliRunner().invoke(app, ["sweep", str(config), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert pd.read_csv(tmp_path / "out" / "points.csv")["trace_unused_columns"].tolist() == ["request_id"]
    assert ("Trace columns not used: request_id (requests are numbered 0..n-1 in arrival order, file order among "
            "ties; requests.parquet's request_id is that number, not the file's).") in (tmp_path / "out" / "report.md").read_text()
