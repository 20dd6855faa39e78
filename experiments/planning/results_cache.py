"""On-disk cache of finished sweep work, so an interrupted sweep resumes where it stopped and a
change of reporting only re-renders.

Each unit of work (one point's simulation, or one point × seed capacity search) is stored under a
key hashing the kind of work, the project's version and the config keys that work reads: the keys
in `REPORT_ONLY` are left out, because what they decide is recomputed from the cached result each
time (`experiments.point.report_columns`, `experiments.planning.search.fleet_row`). Entries are
written by the worker that computed them, atomically (a temporary file renamed into place), so a
run killed at any moment leaves only complete entries. Errors are never cached; a cache that
cannot be written (a full disk) costs a recomputation next time, never the result.
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
from experiments.outputs import TEMP_PREFIX

# Top-level config keys a unit of work does not read, by kind:
# - "point" (one simulation): the simulator never sees `slo:` or `goodput:` (the verdicts and
#   goodput are computed from the cached summary and requests), `fleet:` (sizing from a
#   capacity), `search:` (the caller passes its trim_fraction, the one key a trial reads, as an
#   extra), the sweep's `name` and `variants` (already applied to the point).
# - "capacity" (one bisection): every trial's pass/fail depends on the SLOs, so `slo:` stays in
#   the key (the caller keys the config as its trials see it, `sweep.search_cache_key`: the
#   effective SLOs, Sarathi-Serve's defaults when none are set, and the QPS, size and seeds the
#   search sets itself); `goodput:` and `fleet:` only shape the report, and `search.loads` is a
#   separate grid (each of its loads is "point" work).
REPORT_ONLY = {
    "point": ("name", "variants", "slo", "goodput", "fleet", "search"),
    "capacity": ("name", "variants", "goodput", "fleet", "search.loads"),
}


def project_version() -> str:
    try:
        return metadata.version("sarathi-sim")
    except metadata.PackageNotFoundError:  # running from a checkout without installing
        return "dev"


def work_config(kind: str, config: SweepConfig) -> dict:
    """The config as JSON without the keys `kind` of work does not read (`REPORT_ONLY`).

    Raises:
        KeyError: an unknown kind.
    """
    tree = config.model_dump(mode="json")
    for dotted in REPORT_ONLY[kind]:
        node, _, leaf = dotted.rpartition(".")
        parent = tree.get(node) if node else tree
        if isinstance(parent, dict):
            parent.pop(leaf, None)
    return tree


def cache_key(kind: str, config: SweepConfig, *extra: Any) -> str:
    """sha256 of (kind, project version, `work_config(kind, config)`, extra) — same work, same key."""
    payload = json.dumps([kind, project_version(), work_config(kind, config), list(extra)], sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


class ResultsCache:
    """A folder of pickled results by key; `None` as the folder disables caching.

    `write_error` holds the reason the last `put` failed (e.g. "No space left on device"), or None.
    """

    def __init__(self, directory: Path | None):
        self.directory = directory
        self.write_error: str | None = None

    def get(self, key: str, valid: Callable[[Any], bool] = lambda value: True) -> Any | None:
        """The stored value, or None when absent, unreadable, not `valid` (an entry of another
        shape, say from another version: recomputed, not trusted), or caching is off."""
        if self.directory is None:
            return None
        path = self.directory / f"{key}.pkl"
        try:
            with path.open("rb") as f:
                value = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError, ValueError):
            return None
        return value if value is not None and valid(value) else None

    def get_or_compute(self, key: str, compute: Callable[[], Any],
                       valid: Callable[[Any], bool] = lambda value: True) -> tuple[Any, bool]:
        """(the stored value, True), or (compute(), False) after storing it. An exception from
        `compute` propagates and nothing is stored; a failed store only sets `write_error`."""
        cached = self.get(key, valid)
        if cached is not None:
            return cached, True
        value = compute()
        self.put(key, value)
        return value, False

    def put(self, key: str, value: Any) -> bool:
        """Store atomically (a temporary file beside the entry, renamed into place); False, with
        `write_error` set and nothing partial left, when the folder cannot be written."""
        if self.directory is None:
            return True
        tmp = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=TEMP_PREFIX, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.directory / f"{key}.pkl")
        except OSError as exc:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            self.write_error = exc.strerror or str(exc)
            return False
        except BaseException:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            raise
        return True
