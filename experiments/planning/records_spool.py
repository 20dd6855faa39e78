"""Where a sweep's workers put their points' record files (`run_sweep(records_dir=)`).

A point that writes its records as it runs (`run_point(temporary=True)`) leaves them as temporary
files of the run folder, which the driver joins (`sweep.write_results`); nothing but its scalar
columns comes back from the worker. Local worker processes always see that folder. A Ray worker
may not (another node, no shared filesystem), so the driver leaves a marker file of a fresh name
in the folder (`records_spool`) and a worker looks for it (`RecordsSpool.visible_path`):

- it is there (a worker on the driver's machine, or on a node sharing the filesystem): the
  worker writes into the run folder itself, as a local worker does;
- it is not: the worker writes the point's files into a temporary folder of its own node, then
  sends them back as bytes (`ship`: Parquet, ~8 bytes a token time, a point at a time), and the
  driver writes them into temporary files of the run folder as each point arrives (`land`), so
  the driver never holds more than the points in flight, and neither side builds the frames.

Marker and files carry `profiler.atomic_write.TEMP_PREFIX`, so a killed run's are removed at the
folder's next claim (`experiments.outputs.RunFolder`).
"""
from __future__ import annotations

import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from experiments.point import PointResult, temporary_record_file
from profiler.atomic_write import TEMP_PREFIX


@dataclass(frozen=True)
class RecordsSpool:
    """The run folder a sweep's workers write their points' records into.

    Attributes:
        path: the run folder (absolute for Ray, whose workers may run elsewhere).
        marker: the name of the marker file a worker must find in `path` to write there itself;
            None for local workers (always on this machine).
    """

    path: Path
    marker: str | None = None

    def visible_path(self) -> Path | None:
        """`path` when this process sees the folder (its marker is there, holding its own name),
        else None (the worker then ships its files: `ship`)."""
        if self.marker is None:
            return self.path
        try:
            return self.path if (self.path / self.marker).read_text() == self.marker else None
        except OSError:  # no such file, another machine's folder, unreadable
            return None


@contextmanager
def records_spool(records_dir: Path | None, backend: str) -> Iterator[RecordsSpool | None]:
    """The spool of a sweep on `backend` (None without a folder); for Ray, its marker file is
    written into the folder for the block and removed after it."""
    if records_dir is None:
        yield None
        return
    if backend == "local":
        yield RecordsSpool(Path(records_dir))
        return
    folder = Path(records_dir).resolve()
    marker = f"{TEMP_PREFIX}records-spool-{uuid.uuid4().hex}"
    (folder / marker).write_text(marker)
    try:
        yield RecordsSpool(folder, marker)
    finally:
        (folder / marker).unlink(missing_ok=True)


@dataclass
class Shipped:
    """A point's result from a worker that could not see the run folder: `result` without files,
    and the bytes of each record file it wrote (`files`: "requests" / "steps" -> Parquet bytes)."""

    result: PointResult
    files: dict[str, bytes] = field(default_factory=dict)


def ship(run: Callable[[Path], PointResult]) -> Shipped:
    """run(folder) with a temporary folder of this node as its records folder; the result with
    its files' bytes instead of their paths (the folder is removed)."""
    with tempfile.TemporaryDirectory(prefix=TEMP_PREFIX) as folder:
        result = run(Path(folder))
        files = {name: Path(path).read_bytes() for name, path in result.files.items()}
        result.files = {}
        return Shipped(result, files)


def land(value: PointResult | Shipped, folder: Path | None, point_id: int) -> PointResult:
    """A worker's result as the driver keeps it: a `Shipped` one's bytes written into temporary
    files of the run folder (`temporary_record_file`; each removed again if any fails) and
    named in its `files`; any other as it is.

    Raises:
        OSError: a file cannot be written (none of this point's is left)."""
    if not isinstance(value, Shipped):
        return value
    result, written = value.result, {}
    try:
        for name, data in value.files.items():
            written[name] = temporary_record_file(folder, point_id, name)
            written[name].write_bytes(data)
    except BaseException:
        for path in written.values():
            path.unlink(missing_ok=True)
        raise
    value.files = {}
    result.files = written
    return result
