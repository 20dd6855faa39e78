"""Read a file that must hold one JSON object, with an error that names the file and says what
was wrong, never a traceback: profile sidecars, model config.json files, recorded runs' meta.json,
vLLM bench results. Beside `profiler.atomic_write` for the same reason: the lowest package that
reads these files, importing nothing of the project (tests/test_layout.py).
"""
from __future__ import annotations

import json
from pathlib import Path


def read_json_object(path: str | Path, unreadable: str = "not readable JSON",
                     expected: str = "must hold a JSON object", error: type[Exception] = ValueError) -> dict:
    """The JSON object in `path`.

    Args:
        path: the file.
        unreadable: the message (after "PATH: ") when the file cannot be read or parsed; the
            reason follows in parentheses, "(ExceptionType: detail)".
        expected: the message (after "PATH: ") when it holds JSON other than an object; ", got
            <type>" follows (list, str, int, ...).
        error: the exception class raised (a `ValueError` subclass of the caller's, e.g. `ProfileError`).

    Raises:
        `error`: the file cannot be read (OSError), is not UTF-8, is not JSON, nests too deeply
            (RecursionError) or holds an integer of over 4,300 digits (Python's limit: a
            ValueError); or it holds JSON that is not an object.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, RecursionError, ValueError) as exc:  # JSONDecodeError, UnicodeDecodeError, int digits
        raise error(f"{path}: {unreadable} ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict):
        raise error(f"{path}: {expected}, got {type(data).__name__}")
    return data
