"""Write requests as a canonical trace: CSV `arrival_s,prompt_tokens,output_tokens[,priority]` or JSON lines."""
from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from traces.request import Request


def write_canonical(requests: Sequence[Request], path: str | os.PathLike) -> Path:
    """Write `requests` as a canonical trace that `read_trace` reads back identically.

    The suffix picks the layout: `.jsonl` writes one JSON object per request with keys
    `arrival_s, prompt_tokens, output_tokens` (plus `priority` when any is non-zero and
    `prefix_hash_ids` when any request has them); anything else writes canonical CSV with the
    same columns except the hashes. Arrivals are in seconds, written with Python's shortest
    round-trip float repr, so reading the file back gives the same floats.

    Returns:
        the path written.
    """
    path = Path(path)
    with_priority = any(request.priority for request in requests)
    columns = ["arrival_s", "prompt_tokens", "output_tokens"] + (["priority"] if with_priority else [])
    if path.suffix == ".jsonl":
        with_hashes = any(request.prefix_hash_ids for request in requests)
        with path.open("w", encoding="utf-8") as handle:
            for request in requests:
                record = {name: getattr(request, name) for name in columns}
                if with_hashes:
                    record["prefix_hash_ids"] = list(request.prefix_hash_ids)
                handle.write(json.dumps(record) + "\n")
        return path
    frame = pd.DataFrame({name: [getattr(request, name) for request in requests] for name in columns}, columns=columns)
    frame.to_csv(path, index=False)
    return path
