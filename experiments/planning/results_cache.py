"""On-disk cache of finished sweep work, so an interrupted sweep resumes where it stopped.

Each unit of work (one point's simulation, or one point × seed capacity search) is stored under a
key hashing its full validated config, the kind of work and the project's version. Entries are
written by the worker that computed them, atomically (a temporary file renamed into place), so a
run killed at any moment leaves only complete entries. Errors are never cached.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from experiments.config import SweepConfig


def project_version() -> str:
    try:
        return metadata.version("sarathi-sim")
    except metadata.PackageNotFoundError:  # running from a checkout without installing
        return "dev"


def cache_key(kind: str, config: SweepConfig, *extra: Any) -> str:
    """sha256 of (kind, project version, the config as JSON, extra) — same work, same key."""
    payload = json.dumps([kind, project_version(), config.model_dump(mode="json"), list(extra)], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


class ResultsCache:
    """A folder of pickled results by key; `None` as the folder disables caching."""

    def __init__(self, directory: Path | None):
        self.directory = directory

    def get(self, key: str) -> Any | None:
        """The stored value, or None when absent (or caching is off)."""
        if self.directory is None:
            return None
        path = self.directory / f"{key}.pkl"
        try:
            with path.open("rb") as f:
                return pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            return None

    def get_or_compute(self, key: str, compute: Callable[[], Any]) -> tuple[Any, bool]:
        """(the stored value, True), or (compute(), False) after storing it. An exception from
        `compute` propagates and nothing is stored."""
        cached = self.get(key)
        if cached is not None:
            return cached, True
        value = compute()
        self.put(key, value)
        return value, False

    def put(self, key: str, value: Any) -> None:
        """Store atomically: write a temporary file beside the entry, then rename it into place."""
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.directory / f"{key}.pkl")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
