"""The files and folders a config reads, and a digest of their contents, for the results cache.

A config names its inputs by path (a trace file, a model's `config.json`, a device YAML file, a
`profile:DIR` or `measured:DIR` table folder, ...). The results cache (`results_cache.cache_key`)
keys finished work by the config's values, so a path alone would keep serving the results of a
file's old contents after it is edited. `input_digests` gives, per key holding a path, the
sha256 of what that key reads, so an edit to any input is a new key, while unchanged inputs keep
theirs (a rerun still hits).

What is read, by the key's last name, wherever it sits in the tree (`cluster.decode.device`,
a pool's `engine.acceptance.file`, a length spec's `{dist: empirical, file: ...}` too); each rule
follows the loader that reads the key:

- `path`, `file`: that file (traces, acceptance CSVs, empirical length sources).
- `model`: unless a built-in name, the `config.json` it names or holds
  (`profiler.model_spec.get_model_spec` reads nothing else: never the weights beside it).
- `device`: unless a built-in name, the device YAML file it names (`profiler.device_file.looks_like_path`).
- `cost_model`: the folder of `profile:DIR`, each folder of `measured:DIR[,DIR...]`, whole.
- `name` of a `kind: profile` trace, `profile` of an empirical length spec: a workload-profile
  `.json` file (`traces.workload_profile.check_profile_name`); a built-in name reads shipped data.

Relative paths are taken from the working directory, as the loaders take them (a config file's
own are already absolute: `experiments.config._resolve_paths`). A path that is not there digests
as "missing" (the work then fails, and errors are never cached). Shipped data (built-in devices,
models, profiles and measured tables) is part of the project, keyed by its version instead.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Iterator

MISSING = "missing"
_CHUNK_BYTES = 1 << 20
# sha256 per file, by (path, size, mtime, inode, ctime): a sweep keys many points naming one
# trace, and each worker process hashes it once; an edit changes mtime/ctime (and a new process
# starts with no memo, so nothing is reused across runs on these stats alone).
_FILE_DIGESTS: dict[tuple, str] = {}


def input_digests(tree: dict) -> dict[str, str]:
    """{dotted key: sha256 hex digest of what it reads} for every key of `tree` (a config as
    JSON, `SweepConfig.model_dump(mode="json")`) that names a file or folder (module docstring);
    "missing" for a path that is not there. A `measured:` key's folders are `cost_model[0]`,
    `cost_model[1]`, ... Keys naming built-ins or nothing on disk are left out."""
    return {key: _digest(path, folder) for key, path, folder in _inputs(tree, "")}


def _inputs(node: Any, at: str) -> Iterator[tuple[str, Path, bool]]:
    """(dotted key, path, is a folder) of each input under `node`, whose key path is `at`."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            yield from _inputs(item, f"{at}[{index}]")
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        dotted = f"{at}.{key}" if at else str(key)
        if isinstance(value, str):
            yield from _named(key, value, dotted, profile_trace=node.get("kind") == "profile")
        else:
            yield from _inputs(value, dotted)


def _named(key: str, value: str, dotted: str, profile_trace: bool) -> Iterator[tuple[str, Path, bool]]:
    """The inputs one string value names, by its key (module docstring)."""
    from profiler.device_file import looks_like_path
    from profiler.device_spec import BUILTIN_DEVICES
    from profiler.model_spec import BUILTIN_MODELS

    if key in ("path", "file"):
        yield dotted, Path(value).expanduser(), False
    elif key == "model" and value not in BUILTIN_MODELS:
        path = Path(value).expanduser()
        yield dotted, path / "config.json" if path.is_dir() else path, False
    elif key == "device" and value not in BUILTIN_DEVICES and looks_like_path(value):
        yield dotted, Path(value).expanduser(), False
    elif key == "cost_model" and value.startswith("profile:"):
        yield dotted, Path(value.removeprefix("profile:")).expanduser(), True
    elif key == "cost_model" and value.startswith("measured:"):
        folders = [d for d in value.removeprefix("measured:").split(",") if d]
        for index, folder in enumerate(folders):
            yield f"{dotted}[{index}]", Path(folder).expanduser(), True
    elif ((key == "name" and profile_trace) or key == "profile") and value.endswith(".json"):
        yield dotted, Path(value).expanduser(), False


def _digest(path: Path, folder: bool) -> str:
    """sha256 of a file's bytes, or of a folder's files (each relative path and its digest, in
    sorted order, so a renamed, added or removed file counts); "missing" when not there."""
    if folder:
        if not path.is_dir():
            return MISSING
        h = hashlib.sha256()
        for file in sorted(_files_under(path)):
            h.update(f"{file.relative_to(path).as_posix()}\0{_file_digest(file)}\n".encode())
        return h.hexdigest()
    return _file_digest(path) if path.is_file() else MISSING


def _files_under(folder: Path) -> Iterator[Path]:
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in files:
            if (Path(root) / name).is_file():  # a FIFO or socket is not read: it could wait forever
                yield Path(root) / name


def _file_digest(path: Path) -> str:
    """sha256 hex digest of the file's bytes (memoised by its stat, `_FILE_DIGESTS`); the
    reason, for a file that cannot be read (the work reading it then fails)."""
    try:
        stat = path.stat()
        memo = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_ctime_ns)
        if memo not in _FILE_DIGESTS:
            h = hashlib.sha256()
            with path.open("rb") as f:
                while chunk := f.read(_CHUNK_BYTES):
                    h.update(chunk)
            _FILE_DIGESTS[memo] = h.hexdigest()
        return _FILE_DIGESTS[memo]
    except OSError as exc:
        return f"unreadable ({exc.strerror or exc})"
