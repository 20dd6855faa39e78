"""Derive the built-in workload profiles from the public traces in `../shared/traces/`.

Run from the project root (writes every profile; `--only NAME` for some):

    python -m traces.profiles.build_profiles [--traces-dir ../shared/traces] [--out-dir traces/profiles]

Each profile is a JSON file of figures only (quantile tables, a rank correlation, arrival
statistics where the source has arrivals) with the source and licence of the data; the trace
files themselves are never copied into the project. Lengths-only sources (arxiv, ShareGPT,
BWB) have no arrivals: their rate, span and gap CV are null and a config gives the rate.
"""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from profiler.atomic_write import write_text_whole
from traces.readers.parse_file import parse_file
from traces.trace_stats import gap_cv, mean_rate_qps, span_s, spearman

# Every percentile, plus extra points in both tails so the rare long prompts and outputs, which
# dominate KV-cache pressure, are interpolated from close-by measured points. 0 and 1 are the
# minimum and maximum.
PROBABILITIES = sorted({round(p, 4) for p in [*np.linspace(0.0, 1.0, 101), 0.001, 0.005, 0.995, 0.999, 0.9995]})

DEFAULT_TRACES_DIR = Path(__file__).resolve().parents[3] / "shared" / "traces"

_AZURE = {
    "repository": "Azure/AzurePublicDataset",
    "paper": "Splitwise: Efficient generative LLM inference using phase splitting (ISCA'24)",
    "collected": "2023-11-16, one hour",
    "license": "CC-BY-4.0",
}


@dataclass(frozen=True)
class ProfileSource:
    """One public file and what to say about it.

    Attributes:
        name: the profile's name.
        path: the file under the traces folder (`../shared/traces/README.md`).
        description: the workload in words.
        source: repository, file in that repository, paper, licence (copied into the JSON).
    """

    name: str
    path: str
    description: str
    source: dict


SOURCES = [
    ProfileSource(
        "azure-conv", "azure_public_dataset/AzureLLMInferenceTrace_conv.csv",
        "conversation (chat) requests to an Azure LLM service",
        {**_AZURE, "file": "data/AzureLLMInferenceTrace_conv.csv"},
    ),
    ProfileSource(
        "azure-code", "azure_public_dataset/AzureLLMInferenceTrace_code.csv",
        "code-completion requests to an Azure LLM service",
        {**_AZURE, "file": "data/AzureLLMInferenceTrace_code.csv"},
    ),
    ProfileSource(
        "mooncake-conversation", "mooncake/conversation_trace.jsonl",
        "conversation requests to Moonshot AI's Kimi, about one hour (millisecond timestamps)",
        {
            "repository": "kvcache-ai/Mooncake", "file": "FAST25-release/traces/conversation_trace.jsonl",
            "paper": "Mooncake: Trading More Storage for Less Computation (FAST'25)", "license": "Apache-2.0",
        },
    ),
    ProfileSource(
        "arxiv-summarization", "vidur/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
        "arXiv paper summarisation: long prompts, short outputs (lengths only, Llama-2 tokenizer)",
        {
            "repository": "microsoft/vidur",
            "file": "data/processed_traces/arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
            "paper": "Vidur: A Large-Scale Simulation Framework for LLM Inference (MLSys'24)", "license": "MIT",
        },
    ),
    ProfileSource(
        "sharegpt", "sarathi_serve/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
        "ShareGPT conversations filtered to 8k tokens (lengths only, Llama-2 tokenizer)",
        {
            "repository": "microsoft/sarathi-serve",
            "file": "data/processed_traces/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
            "paper": "Taming Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve (OSDI'24)",
            "license": "Apache-2.0",
        },
    ),
    ProfileSource(
        "bwb", "etalon/bwb_stats_llama2_tokenizer_filtered_v2.csv",
        "BWB, a decode-heavy workload (lengths only, Llama-2 tokenizer)",
        {
            "repository": "project-etalon/etalon",
            "file": "data/processed_traces/bwb_stats_llama2_tokenizer_filtered_v2.csv", "license": "Apache-2.0",
        },
    ),
]


def profile_from_file(path: Path, spec: ProfileSource) -> dict:
    """The profile of one trace or lengths file as a JSON-ready dict (see `traces.workload_profile`).

    Raises:
        TraceFormatError: a bad row (profiles are built strictly, from clean public files).
    """
    parsed = parse_file(path, strict=True)
    prompt_tokens, output_tokens = parsed.columns["prompt_tokens"], parsed.columns["output_tokens"]
    arrivals_s = parsed.columns.get("arrival_s")  # the file's origin: span, rate and CV do not depend on it
    # Linear interpolation between order statistics (numpy's default) keeps the table monotone.
    return {
        "name": spec.name,
        "description": spec.description,
        "source": spec.source,
        "license": spec.source["license"],
        "num_requests": int(prompt_tokens.size),
        "span_s": _rounded(span_s(arrivals_s)) if arrivals_s is not None else None,
        "mean_rate_qps": _rounded(mean_rate_qps(arrivals_s)) if arrivals_s is not None else None,
        "gap_cv": _rounded(gap_cv(arrivals_s)) if arrivals_s is not None else None,
        "spearman_prompt_output": round(spearman(prompt_tokens, output_tokens), 6),
        "quantiles": {
            "probability": PROBABILITIES,
            "prompt_tokens": [round(float(v), 3) for v in np.quantile(prompt_tokens, PROBABILITIES)],
            "output_tokens": [round(float(v), 3) for v in np.quantile(output_tokens, PROBABILITIES)],
        },
    }


def _rounded(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 6)


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: writes `<name>.json` for every (or every `--only`) source, each
    whole or not at all (`profiler.atomic_write`: a failed or killed build leaves the shipped file;
    a failed write ends it with the file named)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces-dir", type=Path, default=DEFAULT_TRACES_DIR, help="the public traces (../shared/traces)")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--only", nargs="+", choices=[spec.name for spec in SOURCES], help="build only these")
    args = parser.parse_args(argv)
    for spec in SOURCES:
        if args.only and spec.name not in args.only:
            continue
        profile = profile_from_file(args.traces_dir / spec.path, spec)
        out = args.out_dir / f"{spec.name}.json"
        try:
            write_text_whole(out, json.dumps(profile, indent=1) + "\n")
        except OSError as exc:  # OutputWriteError: the file and the system's reason, not a traceback
            raise SystemExit(f"error: {exc}") from None
        print(f"wrote {out}: {profile['num_requests']} requests from {spec.path}")


if __name__ == "__main__":
    main()
