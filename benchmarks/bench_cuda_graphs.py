"""What CUDA-graph padding (profiler/cuda_graphs.py) adds to a step's token-count parts (GEMMs,
element-wise kernels, all-reduces) on the measured tables, per step token count T = 1 .. largest
capture size: the padded price over the price at T itself (both graph mode), for a few models and cards.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_cuda_graphs.py

Prints per case the median, P90 and largest ratio over T and the T of the largest.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.device_spec import get_device_spec  # noqa: E402
from profiler.measured.shipped import build_measured  # noqa: E402
from profiler.model_spec import get_model_spec  # noqa: E402

CASES = [("qwen3-32b", "h100-sxm", 2), ("llama-3-8b", "h100-sxm", 1), ("llama-3.1-70b", "a100-80gb", 4)]


def padding_ratios(model_name: str, device: str, tp: int) -> np.ndarray:
    """Padded / unpadded token-part seconds for T = 1 .. the largest capture size (512)."""
    padded = build_measured("auto", get_model_spec(model_name), get_device_spec(device), tp)
    exact = build_measured("auto", get_model_spec(model_name), get_device_spec(device), tp)
    exact.cuda_graph_sizes = tuple(range(1, padded.cuda_graph_max_tokens + 1))  # every count captured: no padding
    tokens = range(1, padded.cuda_graph_max_tokens + 1)
    return np.array([padded._token_part(t)[0] / exact._token_part(t)[0] for t in tokens])


def main() -> None:
    for model_name, device, tp in CASES:
        r = padding_ratios(model_name, device, tp)
        print(f"{model_name} {device} TP{tp}: padded / exact token parts, T 1-{len(r)}: median {np.median(r):.4f}, "
              f"P90 {np.percentile(r, 90):.4f}, max {r.max():.4f} at T {int(r.argmax()) + 1}")


if __name__ == "__main__":
    main()
