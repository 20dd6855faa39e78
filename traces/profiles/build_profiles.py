"""Derive the built-in workload profiles from the public Azure LLM inference traces (2023).

Run from the project root:

    python -m traces.profiles.build_profiles --azure-conv ../shared/traces/azure_public_dataset/AzureLLMInferenceTrace_conv.csv \
        [--azure-code .../AzureLLMInferenceTrace_code.csv] [--out-dir traces/profiles]

Each profile is a JSON file of figures only (quantile tables, a rank correlation, arrival
statistics) with the source and licence of the data; the trace files themselves are never
copied into the project.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from traces.readers import read_trace
from traces.trace_stats import mean_rate_qps, span_s, spearman

# Every percentile, plus extra points in both tails so the rare long prompts and outputs, which
# dominate KV-cache pressure, are interpolated from close-by measured points. 0 and 1 are the
# minimum and maximum.
PROBABILITIES = sorted({round(p, 4) for p in [*np.linspace(0.0, 1.0, 101), 0.001, 0.005, 0.995, 0.999, 0.9995]})

_SOURCE = {
    "repository": "Azure/AzurePublicDataset",
    "paper": "Splitwise: Efficient generative LLM inference using phase splitting (ISCA'24)",
    "collected": "2023-11-16, one hour",
    "license": "CC-BY-4.0",
}


def profile_from_trace(path: Path, name: str, source_file: str, description: str) -> dict:
    """The profile of one trace file as a JSON-ready dict (see `traces.workload_profile`)."""
    requests = read_trace(path, strict=True).requests
    arrivals_s = np.array([request.arrival_s for request in requests])
    prompt_tokens = np.array([request.prompt_tokens for request in requests])
    output_tokens = np.array([request.output_tokens for request in requests])
    # Linear interpolation between order statistics (numpy's default) keeps the table monotone.
    return {
        "name": name,
        "description": description,
        "source": {**_SOURCE, "file": source_file},
        "license": _SOURCE["license"],
        "num_requests": len(requests),
        "span_s": round(span_s(arrivals_s), 6),
        "mean_rate_qps": round(mean_rate_qps(arrivals_s), 6),
        "spearman_prompt_output": round(spearman(prompt_tokens, output_tokens), 6),
        "quantiles": {
            "probability": PROBABILITIES,
            "prompt_tokens": [round(float(v), 3) for v in np.quantile(prompt_tokens, PROBABILITIES)],
            "output_tokens": [round(float(v), 3) for v in np.quantile(output_tokens, PROBABILITIES)],
        },
    }


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point: writes `azure-conv.json` (and `azure-code.json` if given)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--azure-conv", type=Path, required=True, help="AzureLLMInferenceTrace_conv.csv")
    parser.add_argument("--azure-code", type=Path, help="AzureLLMInferenceTrace_code.csv (optional)")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args(argv)
    jobs = [("azure-conv", args.azure_conv, "conversation (chat) requests to an Azure LLM service")]
    if args.azure_code:
        jobs.append(("azure-code", args.azure_code, "code-completion requests to an Azure LLM service"))
    for name, path, description in jobs:
        source_file = f"data/{path.name}"
        profile = profile_from_trace(path, name, source_file, description)
        out = args.out_dir / f"{name}.json"
        out.write_text(json.dumps(profile, indent=1) + "\n")
        print(f"wrote {out}: {profile['num_requests']} requests, {profile['span_s']:.1f} s")


if __name__ == "__main__":
    main()
