"""Load the (prompt, output) lengths of a file: a lengths-only stats file, or any trace file."""
from __future__ import annotations

import os

from traces.readers.load_result import LengthsLoadResult
from traces.readers.parse_file import parse_file


def read_lengths(path: str | os.PathLike, format: str = "auto", strict: bool = False) -> LengthsLoadResult:
    """Read the prompt and output lengths of every valid row of a file, in file order.

    Lengths-only formats: `lengths`, the `num_prefill_tokens,num_decode_tokens,num_total_tokens,
    pd_ratio` stats files of microsoft/vidur (arxiv_summarization), microsoft/sarathi-serve
    (sharegpt_8k) and project-etalon/etalon (bwb), tokens counted with the Llama-2 tokenizer;
    and `canonical_lengths`, `prompt_tokens,output_tokens`. A trace file of any format also
    works (its arrivals are read, validated and dropped). Rows are validated as `read_trace`
    does (a 1-token prompt is valid: arxiv has 72 of them).

    Args:
        path: the file.
        format: "auto" or a name of `traces.readers.FORMATS`.
        strict: raise on the first unknown column or bad row.

    Raises:
        As `read_trace`, except that a lengths-only file is what this reads.
    """
    parsed = parse_file(path, format, strict)
    return LengthsLoadResult(
        prompt_tokens=parsed.columns["prompt_tokens"], output_tokens=parsed.columns["output_tokens"],
        **parsed.row_account(),
    )
