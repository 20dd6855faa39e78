"""Run folders: what a command may write where, one run at a time, every file written whole.

Every command that writes a folder of outputs (`sweep`, `simulate`, `engine run`, `verify`,
`calibrate`) claims it with `RunFolder`:

- **Only our files.** The folder keeps a manifest (`.sarathi-sim.json`) of every file the tool
  wrote there. A folder holding anything else (your `report.md`, the config being run, a `plots/`
  of your own) is refused with the name of one such file, so nothing of yours is overwritten or
  deleted: choose a fresh `--out`. A sub-folder with its own manifest (`verify`'s `engine/`) is
  checked against that one. `OUT/.cache` may hold results-cache entries only.
- **One run at a time.** The claim holds an exclusive `fcntl.flock` on `.sarathi-sim.lock` for the
  whole run; a second run into the same folder stops at once, naming the folder and the pid that
  holds it (the lock is released by the kernel when that process ends, even when it is killed).
  It stops rather than waits: two sweeps of the same folder are a mistake more often than a queue.
- **Whole files or none.** `write_atomic` writes a temporary file in the target's folder and
  renames it into place (`profiler.atomic_write.write_whole`: `os.replace`, atomic on POSIX within
  one filesystem), so a full disk or a kill leaves the previous file or none, never a truncated
  one; a failure raises `OutputWriteError` naming the file. Temporaries (`.tmp-sarathi-*`) are removed when the
  run releases the folder, however it ends (a SIGTERM'd sweep's point spool files too); a SIGKILLed run's
  are removed at the next claim.
- **One run's outputs at a time.** Just before a rerun renames its first output into place, the
  files the earlier run listed are deleted (`RunFolder.record`), except those kept across runs: a
  ledger appended to (`write_atomic(keep=True)`), or a file another command wrote into the folder.
  Until then the folder holds the earlier run's outputs; from then on only this run's: a run
  stopped at any instant (Ctrl-C, SIGTERM, SIGKILL, a crash) never leaves its tables beside
  another run's report. The manifest first names the files being deleted (`stale`), so a run
  killed in the middle leaves them marked, and the next claim deletes them. A run that ends
  without rewriting a file of the earlier run (it wrote nothing) deletes them then
  (`RunFolder.remove_stale`).

The manifest is updated before each file is renamed into place, so a file the tool wrote is always
listed (a listed file may be missing if the run died in between: harmless).
"""
from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from profiler.atomic_write import TEMP_PREFIX, OutputWriteError, write_whole

MANIFEST = ".sarathi-sim.json"
LOCK = ".sarathi-sim.lock"
CACHE_DIR = ".cache"
# Results-cache entries (`experiments.planning.results_cache`): a sha256 hex digest.
_CACHE_ENTRY = re.compile(r"^[0-9a-f]{64}\.(zip|pkl)$")  # pkl: older versions' entries

# Run folders claimed by this process, by resolved path: their inputs (never overwritten) and
# the files written this run (the others listed in the manifest are stale).
_ACTIVE: dict[Path, "RunFolder"] = {}


class OutputFolderError(ValueError):
    """A folder that cannot be used for outputs: foreign files in it, another run holding it, an
    input inside it, or it cannot be created. The message names the folder and what to do."""


def write_atomic(path: str | Path, write: Callable[[Path], None], keep: bool = False) -> Path:
    """Write `path` whole or not at all: `write(tmp)` fills a temporary file in the same folder,
    which is then renamed over `path`. The nearest run folder above `path` lists it in its manifest.

    Args:
        path: the output file (its folder is created).
        write: called with the temporary path (an empty file exists there); writes the content.
        keep: a file that outlives runs (a ledger appended to): listed as kept, so a later run that
            does not rewrite it leaves it (`RunFolder.remove_stale`). A file written into a run
            folder no run of this process holds (`trace convert --to runs/x/t.csv`) is kept too.

    Returns:
        `path`.

    Raises:
        OutputWriteError: the folder cannot be created or the write or rename failed (the
            temporary file is removed); or `path` is an input of the run that claimed its folder.
    """
    path = Path(path)
    owner = _owner(path)
    if owner is not None and path.resolve() in owner.inputs:
        raise OutputWriteError(path, "it is an input of this run; choose another --out", errno.EEXIST)
    listed = (lambda: owner.record(path, keep)) if owner is not None else (lambda: _list_in_manifest(path))
    return write_whole(path, write, before_rename=listed)


def write_text(path: str | Path, text: str, keep: bool = False) -> Path:
    """`write_atomic` of UTF-8 text."""
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), keep)


def write_parquet(path: str | Path, frame) -> Path:
    """`write_atomic` of a pandas frame as Parquet (no index); a frame of more than one row group (16,384 rows)
    is converted and written a row group at a time (`simulator.records_parquet`), so a run's
    records are not copied whole into Arrow while the frame still holds them."""
    from simulator.records_parquet import ROW_GROUP_ROWS, write_in_row_groups

    if len(frame) > ROW_GROUP_ROWS:
        return write_atomic(path, lambda tmp: write_in_row_groups(frame, tmp))
    return write_atomic(path, lambda tmp: frame.to_parquet(tmp, index=False))


def write_csv(path: str | Path, frame) -> Path:
    """`write_atomic` of a pandas frame as CSV (no index)."""
    return write_atomic(path, lambda tmp: frame.to_csv(tmp, index=False))


def save_figure(fig, path: str | Path, **savefig_kwargs) -> Path:
    """`write_atomic` of a matplotlib figure (format from `path`'s suffix)."""
    fmt = Path(path).suffix.lstrip(".") or "png"
    return write_atomic(path, lambda tmp: fig.savefig(tmp, format=fmt, **savefig_kwargs))


def write_staged(directory: str | Path, write: Callable[[Path], Any]) -> list[Path]:
    """`write_atomic` for a writer of several files that takes a folder (`gpu_engine`'s
    `RunResult.write`): `write(staging)` fills a temporary folder inside `directory`, then each
    file is renamed into place. Returns the files, in `directory`.

    Raises:
        OutputWriteError: a file could not be written (named; the staging folder is removed and
            no file of this write is left half-written; those already renamed are whole).
    """
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=directory, prefix=TEMP_PREFIX))
    except OSError as exc:
        raise OutputWriteError(directory, exc.strerror or str(exc), exc.errno) from exc
    try:
        try:
            write(staging)
        except OSError as exc:
            name = Path(exc.filename).name if exc.filename else "an output"
            raise OutputWriteError(directory / name, exc.strerror or str(exc), exc.errno) from exc
        placed = []
        for path in sorted(p for p in staging.rglob("*") if p.is_file()):
            target = directory / path.relative_to(staging)
            placed.append(write_atomic(target, lambda tmp, src=path: os.replace(src, tmp)))
        return placed
    finally:
        shutil.rmtree(staging, ignore_errors=True)


class RunFolder:
    """A claimed output folder (a context manager): checked, locked, its writes listed.

    Args:
        path: the folder (created when missing).
        inputs: files this run reads (the config): refused when inside the folder, never written.
        option: how the folder was named on the command line, for messages (`--out`).
        adopt: on leaving, list every file now in the folder as ours (`calibrate`, whose profiler
            writes files without `write_atomic`; the folder held only our files when claimed).

    Raises (on entering):
        OutputFolderError: the folder cannot be created, holds a file the tool did not write,
            holds an input, or another run holds its lock (the message gives that run's pid).
    """

    def __init__(self, path: str | Path, inputs: Iterable[str | Path] = (), option: str = "--out",
                 adopt: bool = False):
        self.path = Path(path)
        self.inputs = {Path(p).resolve() for p in inputs}
        self.option = option
        self.adopt = adopt
        self.written: dict[str, None] = {}  # files written this run, in order (an ordered set)
        self.failed: list[tuple[str, str]] = []  # (output, reason) of what could not be written
        self._lock_fd: int | None = None
        self._listed: set[str] = set()  # the manifest's files: this run's and earlier runs'
        self._kept: set[str] = set()  # the manifest's files that no later run deletes
        self._retired: set[str] = set()  # the earlier run's files deleted at this run's first write

    # ----- claiming --------------------------------------------------------------------------
    def __enter__(self) -> "RunFolder":
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputFolderError(f"{self.option} {self.path}: cannot create the run folder "
                                    f"({exc.strerror or exc})") from None
        if not self.path.is_dir():
            raise OutputFolderError(f"{self.option} {self.path}: not a folder")
        root = self.path.resolve()
        for item in self.inputs:
            if root == item or root in item.parents:
                raise OutputFolderError(f"{self.option} {self.path}: holds {item.name}, an input of this run; "
                                        "outputs go into a folder of their own: choose another --out")
        self._refuse_foreign()  # before the lock file is made: a refused folder is left as it was
        self._lock()
        try:
            self._refuse_foreign()  # again under the lock (another run may have been writing)
            self._listed, self._kept = _read_lists(self.path)
            self._listed -= _remove_marked_stale(self.path, self._kept)
            _remove_temporaries(self.path)
            self._write_manifest()
        except OutputWriteError as exc:
            self._unlock()
            raise OutputFolderError(f"{self.option} {self.path}: cannot write its manifest ({exc.reason})") from None
        except BaseException:
            self._unlock()
            raise
        _ACTIVE[root] = self
        return self

    def __exit__(self, *exc_info) -> None:
        _ACTIVE.pop(self.path.resolve(), None)
        try:
            if self.adopt:
                own = [p for p in _files(self.path) if _owner_root(p) == self.path.resolve()
                       and p.name not in (MANIFEST, LOCK) and not p.name.startswith(TEMP_PREFIX)]
                self._listed |= {p.relative_to(self.path).as_posix() for p in own}
                self._write_manifest()
        finally:
            try:  # a run stopped (SIGTERM, Ctrl-C, an error) leaves no spool files of its points
                _remove_temporaries(self.path)
            finally:
                self._unlock()

    def _refuse_foreign(self) -> None:
        foreign = foreign_files(self.path, limit=2)
        if foreign:
            more = " (and more)" if len(foreign) > 1 else ""
            raise OutputFolderError(
                f"{self.option} {self.path}: holds {foreign[0]}{more}, which sarathi-sim did not write; "
                f"so that nothing of yours is overwritten or deleted, outputs go into a fresh folder: "
                f"choose a new --out (e.g. {self.path / 'run'}) or an empty folder")

    def _lock(self) -> None:
        lock_path = self.path / LOCK
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise OutputFolderError(f"{self.option} {self.path}: cannot create its lock file "
                                    f"({exc.strerror or exc})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise OutputFolderError(f"{self.option} {self.path}: another sarathi-sim run (pid {holder}) is writing "
                                    "this folder; wait for it to finish or choose another --out") from None
        except OSError as exc:  # a filesystem without locks (some FUSE mounts): say so, do not run unlocked
            os.close(fd)
            raise OutputFolderError(f"{self.option} {self.path}: cannot be locked ({exc.strerror or exc}); "
                                    "choose a folder on a filesystem with file locks") from None
        self._lock_fd = fd
        pid = f"{os.getpid()}\n".encode()
        try:  # the holder's pid, for the message of a run that finds the folder taken
            os.pwrite(fd, pid, 0)
            os.ftruncate(fd, len(pid))
        except OSError as exc:
            self._unlock()
            raise OutputFolderError(f"{self.option} {self.path}: cannot write its lock file "
                                    f"({exc.strerror or exc})") from None

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # ----- writing ---------------------------------------------------------------------------
    def record(self, path: Path, keep: bool = False) -> None:
        """List `path` (a file inside this folder) in the manifest before it is renamed into place;
        `keep`: as a file no later run deletes (`write_atomic`)."""
        name = Path(path).resolve().relative_to(self.path.resolve()).as_posix()
        if not self.written and not self.adopt:  # its first output: the earlier run's go first
            self._retire_earlier()
        self.written[name] = None
        if name not in self._listed or (keep and name not in self._kept):
            self._listed.add(name)
            if keep:
                self._kept.add(name)
            self._write_manifest()

    def _retire_earlier(self) -> None:
        """Delete the files an earlier run listed here (not those kept across runs), before this
        run renames its first output into place, so the folder never holds two runs' outputs.
        The manifest names them `stale` first (a run killed while deleting leaves them marked for
        the next claim), then no longer lists them. A file that cannot be deleted (a directory
        someone put in its place) stays listed; its own write or `remove_stale` says why.
        Not for an `adopt` folder, whose writer rewrites files without listing them."""
        earlier = self._listed - self._kept
        if not earlier:
            return
        _dump_manifest(self.path, self._listed, self._kept, stale=earlier)
        removed = _remove_files(self.path, earlier)
        self._retired |= removed
        self._listed -= removed
        self._write_manifest()

    def completed(self) -> list[str]:
        """The files this run wrote, in order, less those whose write failed (`failed`)."""
        failed = {name for name, _ in self.failed}
        return [name for name in self.written if name not in failed]

    def attempt(self, write: Callable[..., Any], *args, outputs: Iterable[str] = ()) -> Any:
        """`write(*args)`, or None when it raised an OSError (an `OutputWriteError`, or a folder
        that cannot be made): the file is added to `failed` with the reason, and so is each of
        `outputs` (files `write` makes after the failing one) that this run did not write."""
        try:
            return write(*args)
        except OSError as exc:
            path = Path(getattr(exc, "path", None) or exc.filename or "?")
            reason = getattr(exc, "reason", None) or exc.strerror or str(exc)
            self.failed.append((self._name(path), reason))
            for name in outputs:
                if name not in self.written and name != self._name(path):
                    self.failed.append((name, f"not written after {self._name(path)} failed"))
            return None

    def failure_message(self) -> str | None:
        """'could not write A, B (reason); C (reason) in FOLDER', or None when all was written."""
        if not self.failed:
            return None
        by_reason: dict[str, list[str]] = {}
        for name, reason in self.failed:
            by_reason.setdefault(reason, []).append(name)
        parts = "; ".join(f"{', '.join(names)} ({reason})" for reason, names in by_reason.items())
        return f"could not write {parts} in {self.path}"

    def _name(self, path: Path) -> str:
        try:
            return Path(path).resolve().relative_to(self.path.resolve()).as_posix()
        except ValueError:
            return str(path)

    def remove_stale(self) -> list[str]:
        """Delete the files an earlier run listed here that this run did not write (so no old
        table or plot sits beside this run's); returns their names, with those already deleted at
        this run's first write (`_retire_earlier`). Only manifest files go.

        Raises:
            OSError: a listed file cannot be deleted (it stays listed)."""
        stale = self._listed - set(self.written) - self._kept
        for name in sorted(stale):
            (self.path / name).unlink(missing_ok=True)
        self._listed -= stale
        _prune_folders(self.path, stale)
        self._write_manifest()
        return sorted(stale | (self._retired - set(self.written)))

    def _write_manifest(self) -> None:
        _dump_manifest(self.path, self._listed, self._kept)


def read_manifest(folder: Path) -> list[str]:
    """The files listed in `folder`'s manifest, sorted ([] when there is none or it is unreadable)."""
    return sorted(_read_lists(folder)[0])


def _read_lists(folder: Path) -> tuple[set[str], set[str]]:
    """(every file the manifest lists, those of them kept across runs)."""
    try:
        manifest = json.loads((Path(folder) / MANIFEST).read_text())
        files, kept = manifest.get("files", []), manifest.get("kept", [])
    except (OSError, ValueError, AttributeError):
        return set(), set()
    kept = {f for f in kept if isinstance(f, str)} if isinstance(kept, list) else set()
    return {f for f in files if isinstance(f, str)} | kept if isinstance(files, list) else kept, kept


def foreign_files(folder: Path, limit: int | None = None) -> list[str]:
    """Files under `folder` (relative) that the tool did not write: not in its manifest (or a
    nested run folder's), not a results-cache entry, lock, manifest or temporary. The folder's own
    files come first (sorted), then those in its sub-folders; with `limit`, the scan stops after
    that many (a refused `--out ~` is not walked to the end)."""
    found = []
    for name in _foreign(Path(folder)):
        found.append(name)
        if limit is not None and len(found) >= limit:
            break
    return found


def _foreign(folder: Path) -> Iterator[str]:
    listed = set(read_manifest(folder))
    entries = sorted(folder.iterdir())
    folders = [e for e in entries if e.is_dir() and not e.is_symlink()]
    for entry in entries:
        if entry not in folders and entry.name not in (MANIFEST, LOCK) and not entry.name.startswith(TEMP_PREFIX) \
                and entry.name not in listed:
            yield entry.name
    for entry in folders:
        if (entry / MANIFEST).is_file():  # a run folder of its own (verify's engine/, point<i>/)
            yield from (f"{entry.name}/{name}" for name in _foreign(entry))
        elif entry.name == CACHE_DIR:
            yield from (f"{entry.name}/{p.name}" for p in sorted(entry.iterdir())
                        if not (_CACHE_ENTRY.match(p.name) or p.name.startswith(TEMP_PREFIX)))
        else:
            for dirpath, _, filenames in os.walk(entry):
                for filename in sorted(filenames):
                    relative = (Path(dirpath) / filename).relative_to(folder).as_posix()
                    if relative not in listed and not filename.startswith(TEMP_PREFIX):
                        yield relative


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in Path(folder).rglob("*") if p.is_file() or p.is_symlink())


def _remove_marked_stale(folder: Path, kept: set[str]) -> set[str]:
    """Delete the files the manifest marks `stale` (a run killed while deleting an earlier run's
    files, `RunFolder._retire_earlier`), but those kept across runs; returns the names deleted."""
    try:
        stale = json.loads((Path(folder) / MANIFEST).read_text()).get("stale", [])
    except (OSError, ValueError, AttributeError):
        return set()
    names = {n for n in stale if isinstance(n, str)} - kept if isinstance(stale, list) else set()
    return _remove_files(Path(folder), names)


def _remove_files(folder: Path, names: set[str]) -> set[str]:
    """Delete the listed files `names` (relative to `folder`; missing ones count as deleted) and
    the sub-folders left empty; returns the names gone. One that cannot be deleted (a directory
    in its place, no permission) is skipped."""
    removed = set()
    for name in sorted(names):
        path = folder / name
        if ".." in Path(name).parts or Path(name).is_absolute():  # a manifest edited by hand: not ours
            continue
        try:
            path.unlink(missing_ok=True)
        except OSError:
            continue
        removed.add(name)
    _prune_folders(folder, removed)
    return removed


def _prune_folders(folder: Path, names: set[str]) -> None:
    """Remove the sub-folders of `folder` that deleting `names` left empty (deepest first)."""
    for parent in sorted({(folder / n).parent for n in names}, key=lambda p: -len(p.parts)):
        if parent != folder and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()


def _remove_temporaries(folder: Path) -> None:
    """Temporaries of a killed write (ours by their prefix), outside nested run folders."""
    for path in Path(folder).rglob(f"{TEMP_PREFIX}*"):
        if _owner_root(path) == Path(folder).resolve() and path.is_file():
            path.unlink(missing_ok=True)


def _owner_root(path: Path) -> Path | None:
    """The nearest folder above `path` with a manifest (resolved), or None."""
    for parent in Path(path).resolve().parents:
        if (parent / MANIFEST).is_file():
            return parent
    return None


def _list_in_manifest(path: Path) -> None:
    """A file written into a run folder no run of this process holds (`verify` appending to a
    calibration's ledger.csv): list it in that folder's manifest, so the folder stays ours."""
    root = _owner_root(path)
    if root is None:
        return
    files, kept = _read_lists(root)
    name = Path(path).resolve().relative_to(root).as_posix()
    if name not in kept:
        _dump_manifest(root, files | {name}, kept | {name})


def _dump_manifest(folder: Path, files: set[str], kept: set[str], stale: Iterable[str] = ()) -> None:
    """Write `folder`'s manifest atomically (not through `write_atomic`: it lists itself nowhere):
    every file the tool wrote there, those no later run deletes (`write_atomic`'s `keep`), and,
    while a run deletes an earlier run's files, those (`stale`: not outputs of any finished run)."""
    manifest = {"tool": "sarathi-sim", "files": sorted(files), "kept": sorted(kept)}
    if stale:
        manifest["stale"] = sorted(stale)
    text = json.dumps(manifest, indent=1) + "\n"
    write_whole(Path(folder) / MANIFEST, lambda tmp: tmp.write_text(text))


def _owner(path: Path) -> RunFolder | None:
    """The run folder claimed in this process that holds `path` (the nearest one)."""
    if not _ACTIVE:
        return None
    for parent in Path(path).resolve().parents:
        if parent in _ACTIVE:
            return _ACTIVE[parent]
    return None


def _forget_in_child() -> None:
    """In a forked child (a sweep's worker process): drop the inherited copies of the lock files
    (closing them leaves the parent's lock held; LOCK_UN would release it for both), so that a
    worker outliving a killed run does not keep its folder locked."""
    for folder in _ACTIVE.values():
        if folder._lock_fd is not None:
            os.close(folder._lock_fd)
            folder._lock_fd = None
    _ACTIVE.clear()


os.register_at_fork(after_in_child=_forget_in_child)
