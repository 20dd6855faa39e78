"""On-disk cache of finished sweep work, so an interrupted sweep resumes where it stopped and a
change of reporting only re-renders.

Each unit of work (one point's simulation, or one point × seed capacity search) is stored under a
key hashing the kind of work, the project's version and code (`project_code_digest`: every
source and shipped data file of the packages, so an editable checkout's edit or an upgrade is new
work), the config keys that work reads and the contents of the files and folders they name (`config_inputs`: an edited trace, model config.json,
device file or measured table is new work, never a stale result). The keys in `REPORT_ONLY` are
left out, because what they decide is recomputed from the cached result each
time (`experiments.point.report_columns`, `experiments.planning.search.fleet_row`). Entries are
written by the worker that computed them, atomically (a temporary file renamed into place), so a
run killed at any moment leaves only complete entries. Errors are never cached; a cache that
cannot be written (a full disk) costs a recomputation next time, never the result.

An entry is data only, never code: `KEY.zip` (stored, uncompressed) holding `entry.json` (the
value as JSON, tuples tagged) and, for a point's result, its `requests.parquet` and
`steps.parquet`. An entry is verified before it is served: `entry.json` carries the SHA-256 of
each of those files as written and of its own content (`sha256`), checked as a file is read or
copied out (a damaged or edited file whose zip CRC still holds, a file of another point, an
edited row); a point's files must also hold the columns the report derives from
(`REQUIRED_REQUEST_COLUMNS`) and the rows its row counts (`num_requests`, and `num_steps` where
it kept its steps). `entry.json` also holds the key it was stored under (covered by its own
digest): an entry copied or renamed over another key's file (`cp .cache/A.zip .cache/B.zip`) is
another unit of work's result, never served for this one. Any mismatch is an unreadable entry,
recomputed with a note; entries of earlier formats (no digests: 1; no key: 2) are recomputed the
same way. Reading one runs no constructor of the file's choosing (the folder may be on a
filesystem others write, `--out` shared with Ray workers), unlike the pickles older versions wrote
(`KEY.pkl`: never read, replaced when the key is stored again). An entry that cannot be read or is
not of the expected shape is recomputed with a note on stderr naming it.

A sweep that writes its points' records as they run (`run_sweep(records_dir=)`) is served a
cached point the same way (`get(records=...)`): its `requests.parquet` / `steps.parquet` are
copied out of the entry a megabyte at a time into temporary files of the run folder (their
`point_id` set to the point's), as a computed point leaves them, and only the requests' scalar
columns are read into memory; never its token times or steps. A copy that fails leaves no file:
an entry that turns out unreadable (a bad CRC or digest, a file of the wrong rows) is recomputed, a run
folder that cannot be written fails the point as it would fail a computed one.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import json
import sys
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from experiments.config import SweepConfig
from experiments.planning.config_inputs import input_digests
from experiments.point import PointResult, temporary_record_file
from profiler.atomic_write import OutputWriteError, write_whole
from simulator.records_parquet import copy_with_constants, write_in_row_groups

ENTRY_SUFFIX = ".zip"
LEGACY_SUFFIX = ".pkl"  # pickles of older versions: never unpickled
_FORMAT = 3  # 2: every member's SHA-256 and entry.json's own (`_DIGESTS`, `_SELF_DIGEST`); 3: its key (`_KEY`)
_KEY = "key"  # entry.json: the cache key it was stored under (`cache_key`), checked by `decode_entry`
_JSON = "entry.json"
_FRAMES = ("requests", "steps")  # a PointResult's frames, each `NAME.parquet`
_DIGESTS = "members_sha256"  # entry.json: {"requests.parquet": hex, "steps.parquet": hex}
_SELF_DIGEST = "sha256"  # entry.json: hex SHA-256 of its other keys (`_head_digest`)
# Columns of a cached point's requests that the sweep reads after the simulation: the goodput
# thresholds' metrics and finish reason (`experiments.point.report_columns`,
# `simulator.metrics.goodput_count`; goodput keys from `SweepConfig._goodput_keys`), point_id.
REQUIRED_REQUEST_COLUMNS = ("point_id", "finish_reason", "ttft_s", "tpot_s", "e2e_s")
_TUPLE = "__tuple__"  # JSON has no tuples: {"__tuple__": [...]} stands for one

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


# The packages whose code and shipped data (built-in devices, models, measured tables, fitted
# roofline) decide a result; gpu_engine only runs engine checks, which the cache does not store.
CODE_PACKAGES = ("traces", "profiler", "simulator", "experiments")
_CODE_SUFFIXES = {".py", ".yaml", ".yml", ".json", ".csv", ".parquet", ".txt"}
# Example configs are the user's input, not code: their keys are in the config tree and the files
# they name in `input_digests` (editing a report-only key there must still re-render from cache).
_CODE_EXCLUDED = {("experiments", "configs")}


def code_digest(roots: list[Path]) -> str:
    """sha256 over the relative path and bytes of every source/data file (`_CODE_SUFFIXES`;
    `__pycache__` and `_CODE_EXCLUDED` left out) under `roots`, in sorted order: any edit, added
    or removed file changes it."""
    digest = hashlib.sha256()
    for root in roots:
        excluded = [root.joinpath(*rest) for name, *rest in _CODE_EXCLUDED if name == root.name]
        files = sorted(p for p in root.rglob("*")
                       if p.suffix in _CODE_SUFFIXES and "__pycache__" not in p.parts
                       and not any(p.is_relative_to(e) for e in excluded) and p.is_file())
        for path in files:
            digest.update(f"{root.name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def project_code_digest() -> str:
    """`code_digest` of the installed `CODE_PACKAGES` (found without importing them; ~3 MB,
    tens of ms, once per process). The version alone missed edits in an editable install: a
    changed simulator or shipped table then served results of the old code from the cache."""
    roots = []
    for name in CODE_PACKAGES:
        spec = importlib.util.find_spec(name)
        roots.extend(Path(p) for p in (spec.submodule_search_locations or []) if spec is not None)
    return code_digest(roots)


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
    """sha256 of (kind, project version and code digest, `work_config(kind, config)`, extra, and
    the digest of every file and folder that config names: `config_inputs.input_digests`) — same
    work, same key; an edited trace, model config.json, device file, measured table or project
    source file, a new key."""
    tree = work_config(kind, config)
    payload = json.dumps([kind, project_version(), project_code_digest(), tree, list(extra), input_digests(tree)],
                         sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


class CacheEntryError(ValueError):
    """A value the cache cannot store as data (`put`), or an entry it cannot read back (`get`)."""


def encode_entry(value: Any, stream, key: str | None = None) -> None:
    """Write `value` as a data-only entry (module docstring) to the binary `stream`, stored under
    `key` (its `entry.json` says so: `decode_entry(key=)` serves it for that key only).

    Values: a `PointResult` (a frame it wrote to a file, `PointResult.files`, stored as that
    file), or JSON data (None, bool, int, float including NaN/inf, str, lists,
    tuples, dicts with str keys; numpy scalars as their Python value).

    Raises:
        CacheEntryError: anything else (nothing is a pickle fallback); pyarrow.ArrowException: a
            frame column Arrow cannot store.
    """
    with zipfile.ZipFile(stream, "w", zipfile.ZIP_STORED) as archive:
        if isinstance(value, PointResult):
            head = {"format": _FORMAT, _KEY: key, "type": "point_result", "row": _to_json(value.row), _DIGESTS: {}}
            for name in _FRAMES:
                member = f"{name}.parquet"
                if name in value.files:  # the run wrote it (`PointResult.files`): the file as it is
                    info = zipfile.ZipInfo.from_file(value.files[name], member)  # its size: ZIP64 past 2 GiB
                    info.compress_type = zipfile.ZIP_STORED
                    with open(value.files[name], "rb") as source, archive.open(info, "w") as target:
                        head[_DIGESTS][member] = _copy_hashing(source, target.write)
                    continue
                buffer = io.BytesIO()  # an in-memory point's frame: its Parquet is smaller still
                write_in_row_groups(getattr(value, name), buffer)
                archive.writestr(member, buffer.getvalue())
                head[_DIGESTS][member] = hashlib.sha256(buffer.getvalue()).hexdigest()
        else:
            head = {"format": _FORMAT, _KEY: key, "type": "json", "value": _to_json(value)}
        archive.writestr(_JSON, json.dumps({**head, _SELF_DIGEST: _head_digest(head)}))


def _head_digest(head: dict) -> str:
    """SHA-256 (hex) of entry.json's keys other than its own digest, as sorted JSON: the same
    for the dict written and the dict read back (Python's JSON round-trips its floats)."""
    return hashlib.sha256(json.dumps(head, sort_keys=True).encode()).hexdigest()


def _copy_hashing(source, write: Callable[[bytes], Any]) -> str:
    """Copy the binary `source` to `write` a `_COPY_BYTES` piece at a time; the SHA-256 (hex)
    of the bytes copied."""
    digest = hashlib.sha256()
    while chunk := source.read(_COPY_BYTES):
        digest.update(chunk)
        write(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class RecordsFolder:
    """Where a cached point's record files go (`decode_entry(records=)`): the run folder of a
    sweep that writes its points' records as they run, and the point's `point_id` (the files'
    leading column, as `run_point(point_id, records_dir, temporary=True)` writes it)."""

    path: Path
    point_id: int


class _RecordsNotWritten(Exception):
    """Carries an OSError of writing a record file into the run folder past the handlers that
    take any OSError for an unreadable entry: the folder's failure is the point's, not the entry's."""


def decode_entry(stream, records: RecordsFolder | None = None, key: str | None = None) -> Any:
    """The value `encode_entry` wrote to the binary `stream`; with `key`, only an entry stored
    under that key (another's, copied over this one's file, is refused).

    A point's result comes with its frames in memory; with `records`, as a point that wrote its
    records as it ran (`PointResult.files`): its files copied into temporary files of
    `records.path` (`_point_with_files`), `requests` without `token_times_s`, `steps` no rows.

    Raises:
        CacheEntryError: not an entry of this format (garbage, truncated, a pickle, another
            version's layout, a bad CRC or SHA-256, stored under another key, record files of the
            wrong rows or without the columns the report reads); the message says what
            is wrong, and no record file is left.
        _RecordsNotWritten: a record file could not be written (its OSError as the cause).
    """
    try:
        with zipfile.ZipFile(stream) as archive:
            head = json.loads(archive.read(_JSON))
            if not isinstance(head, dict) or head.get("format") != _FORMAT:
                raise CacheEntryError(f"not format {_FORMAT}")
            if head.pop(_SELF_DIGEST, None) != _head_digest(head):
                raise CacheEntryError(f"its {_JSON} does not match its SHA-256 (edited or damaged)")
            if key is not None and head.get(_KEY) != key:
                raise CacheEntryError(f"it was stored under the key {str(head.get(_KEY))[:12]}…, not this one's "
                                      "(an entry copied or renamed from another unit of work)")
            if head.get("type") == "json":
                return _from_json(head["value"])
            if head.get("type") != "point_result" or not isinstance(head.get("row"), dict) \
                    or not isinstance(head.get(_DIGESTS), dict):
                raise CacheEntryError(f"unknown entry type {head.get('type')!r}")
            row = _from_json(head["row"])
            if records is not None:
                return _point_with_files(archive, row, records, head[_DIGESTS])
            frames = {name: pd.read_parquet(io.BytesIO(_verified_member(archive, name, head[_DIGESTS])))
                      for name in _FRAMES}
            _check_records(row, list(frames["requests"].columns), len(frames["requests"]),
                           list(frames["steps"].columns), len(frames["steps"]))
            return PointResult(row, frames["requests"], frames["steps"])
    except (CacheEntryError, _RecordsNotWritten):
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, KeyError, EOFError, OSError, ValueError,
            TypeError, RecursionError, pa.ArrowException) as exc:  # JSONDecodeError is a ValueError
        raise CacheEntryError(f"not a readable entry ({type(exc).__name__}: {exc})") from None


def _verified_member(archive: zipfile.ZipFile, name: str, digests: dict) -> bytes:
    """The bytes of the entry's `name` records, checked against their stored SHA-256.

    Raises:
        CacheEntryError: they differ."""
    member = f"{name}.parquet"
    data = archive.read(member)
    _check_digest(member, hashlib.sha256(data).hexdigest(), digests)
    return data


def _check_digest(member: str, found: str, digests: dict) -> None:
    if digests.get(member) != found:
        raise CacheEntryError(f"its {member} does not match the SHA-256 stored when it was written "
                              "(damaged or edited)")


def _check_records(row: dict, requests_columns: list[str], requests_rows: int,
                   steps_columns: list[str], steps_rows: int) -> None:
    """A point's record files fit its row: the requests hold `REQUIRED_REQUEST_COLUMNS` and
    `num_requests` rows; steps, when it kept any, `num_steps` rows and a point_id. (A digest
    proves a file is the one stored, these that the one stored is whole.)

    Raises:
        CacheEntryError: what does not fit."""
    missing = [c for c in REQUIRED_REQUEST_COLUMNS if c not in requests_columns]
    if missing:
        raise CacheEntryError(f"its requests file lacks the column(s) {', '.join(missing)}")
    if "num_requests" in row and requests_rows != row["num_requests"]:
        raise CacheEntryError(f"its requests file holds {requests_rows} rows, its row says {row['num_requests']}")
    if steps_rows and "point_id" not in steps_columns:
        raise CacheEntryError("its steps file lacks the column point_id")
    if steps_rows and "num_steps" in row and steps_rows != row["num_steps"]:
        raise CacheEntryError(f"its steps file holds {steps_rows} rows, its row says {row['num_steps']}")


_COPY_BYTES = 1 << 20


def _point_with_files(archive: zipfile.ZipFile, row: dict, records: RecordsFolder, digests: dict) -> PointResult:
    """A cached point as `run_point(records.point_id, records.path, temporary=True)` returns a
    computed one: each record file copied out of the entry into a temporary file of the run
    folder (named as that run names its own, so a killed run's are removed at the folder's next
    claim) and checked against its stored SHA-256 (`digests`) and its row (`_check_records`),
    with `point_id` set to `records.point_id` (`copy_with_constants`: row group by row
    group, only when the entry's differs); a step file of no rows (a point that kept no steps)
    read as the frame. Every file is removed again when any step fails."""
    files: dict[str, Path] = {}
    try:
        for name in _FRAMES:
            files[name], found = _copy_out(archive, f"{name}.parquet", records, name)
            _check_digest(f"{name}.parquet", found, digests)
        schemas = {name: pq.read_schema(files[name]) for name in _FRAMES}
        rows = {name: pq.read_metadata(files[name]).num_rows for name in _FRAMES}
        _check_records(row, schemas["requests"].names, rows["requests"], schemas["steps"].names, rows["steps"])
        for name in _FRAMES:
            point_ids = pq.read_table(files[name], columns=["point_id"]).column(0) if rows[name] else []
            if len(point_ids) and pc.min_max(point_ids).as_py() != {"min": records.point_id, "max": records.point_id}:
                renumbered = _temporary_file(records, name)
                try:
                    _write_records(lambda: copy_with_constants(files[name], renumbered, {"point_id": records.point_id}))
                except BaseException:
                    renumbered.unlink(missing_ok=True)
                    raise
                files.pop(name).unlink()
                files[name] = renumbered
        if rows["steps"]:
            steps = schemas["steps"].empty_table().to_pandas()
        else:  # as a computed point that kept no steps has them: an empty frame, no file
            steps = pd.read_parquet(files["steps"])
            files.pop("steps").unlink()
        requests = pd.read_parquet(files["requests"], columns=[c for c in schemas["requests"].names
                                                               if c != "token_times_s"])
    except BaseException:
        for path in files.values():
            path.unlink(missing_ok=True)
        raise
    return PointResult(row, requests, steps, files)


def _temporary_file(records: RecordsFolder, name: str) -> Path:
    """A fresh temporary file of the run folder for the point's `name` records."""
    return _write_records(lambda: temporary_record_file(records.path, records.point_id, name))


def _write_records(write: Callable[[], Any]) -> Any:
    """write(), its OSError (a full or read-only run folder) carried as `_RecordsNotWritten`."""
    try:
        return write()
    except OSError as exc:
        raise _RecordsNotWritten() from exc


def _copy_out(archive: zipfile.ZipFile, member: str, records: RecordsFolder, name: str) -> tuple[Path, str]:
    """The archive's `member` copied into a new temporary file of the run folder, a megabyte at
    a time (its CRC checked at its end by `zipfile`), and the SHA-256 (hex) of what was copied;
    the file removed when the copy fails."""
    path = _temporary_file(records, name)
    try:
        with archive.open(member) as source, _write_records(lambda: open(path, "wb")) as target:
            found = _copy_hashing(source, lambda chunk: _write_records(lambda: target.write(chunk)))
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path, found


def _to_json(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic) and isinstance(value.item(), (bool, int, float, str)):
        return value.item()
    if isinstance(value, tuple):
        return {_TUPLE: [_to_json(v) for v in value]}
    if isinstance(value, list):
        return [_to_json(v) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value) and _TUPLE not in value:
        return {k: _to_json(v) for k, v in value.items()}
    raise CacheEntryError(f"cannot store a {type(value).__name__} as data")


def _from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        if set(value) == {_TUPLE} and isinstance(value[_TUPLE], list):
            return tuple(_from_json(v) for v in value[_TUPLE])
        return {k: _from_json(v) for k, v in value.items()}
    return value


class ResultsCache:
    """A folder of data-only entries by key (module docstring); `None` as the folder disables caching.

    `write_error` holds the reason the last `put` failed (e.g. "No space left on device"), or None.
    """

    def __init__(self, directory: Path | None):
        self.directory = directory
        self.write_error: str | None = None

    def path(self, key: str) -> Path:
        """The entry file of `key` (caching on)."""
        return self.directory / f"{key}{ENTRY_SUFFIX}"

    def get(self, key: str, valid: Callable[[Any], bool] = lambda value: True,
            records: RecordsFolder | None = None) -> Any | None:
        """The stored value, or None when absent, unreadable, not `valid` (an entry of another
        shape, say from another version: recomputed, not trusted), or caching is off. An entry
        that is there but not used is named in a note on stderr. `records`: a point's result
        comes with its record files copied into that folder (`decode_entry`), removed again
        when it is not used.

        Raises:
            OSError: a record file could not be written into `records.path`."""
        if self.directory is None:
            return None
        path = self.path(key)
        try:
            with path.open("rb") as f:
                value = decode_entry(f, records, key)
        except FileNotFoundError:
            return None
        except _RecordsNotWritten as failed:
            raise failed.__cause__ from None
        except OSError as exc:
            return _discarded(path, exc.strerror or str(exc))
        except CacheEntryError as exc:
            return _discarded(path, str(exc))
        if value is None or not valid(value):
            for file in getattr(value, "files", {}).values():
                Path(file).unlink(missing_ok=True)
            return _discarded(path, f"not a result of the expected shape (a {type(value).__name__})")
        return value

    def get_or_compute(self, key: str, compute: Callable[[], Any], valid: Callable[[Any], bool] = lambda value: True,
                       records: RecordsFolder | None = None) -> tuple[Any, bool]:
        """(the stored value, True), or (compute(), False) after storing it. An exception from
        `compute` propagates and nothing is stored; a failed store only sets `write_error`.
        `records`: as `get`."""
        cached = self.get(key, valid, records)
        if cached is not None:
            return cached, True
        value = compute()
        self.put(key, value)
        return value, False

    def put(self, key: str, value: Any) -> bool:
        """Store atomically (a temporary file beside the entry, renamed into place); False, with
        `write_error` set and nothing partial left, when the folder cannot be written or the
        value cannot be stored as data (`encode_entry`)."""
        if self.directory is None:
            return True

        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                encode_entry(value, f, key=key)

        try:
            write_whole(self.path(key), write, temp_suffix=".tmp")  # a temporary is no `*.zip` entry
            (self.directory / f"{key}{LEGACY_SUFFIX}").unlink(missing_ok=True)
        except (OSError, CacheEntryError, pa.ArrowException) as exc:
            reason = exc.reason if isinstance(exc, OutputWriteError) else getattr(exc, "strerror", None)
            self.write_error = reason or str(exc)  # "No space left on device": the entry's path says nothing
            return False
        return True


def _discarded(path: Path, reason: str) -> None:
    """Say that the entry at `path` is not used (it is recomputed and replaced); None."""
    print(f"note: results cache entry {path} is not used ({reason}); recomputing it", file=sys.stderr)
    return None
