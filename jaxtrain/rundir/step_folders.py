"""How a checkpoint folder names its steps, and the one listing of the steps it holds.

Orbax writes step s into `<s>.orbax-checkpoint-tmp*` and renames the folder to `<s>` when the save
commits, so a folder named by a number alone is a committed step and one carrying the marker is a
save that has not finished (or never will). A local listing reads names only: it opens no Orbax
manager, so any layer can use it, from any thread (the lost-process report
of `jaxtrain.parallel.peer_watch` runs in an abort handler), while a run is writing there.

In a bucket (`s3://`, `gs://`) a folder cannot be renamed atomically: Orbax writes step s into
`<s>/` itself and commits it by writing `<s>/commit_success.txt` last, so there a step folder is
committed when it holds that marker, and unfinished when it lacks it. Bucket folders are listed
through `etils.epath`, as Orbax lists them.
"""

from __future__ import annotations

from pathlib import Path

from etils import epath

from jaxtrain.rundir.object_store import is_url

# Orbax names a step folder being written `<step>` + this (+ a suffix in some versions).
TMP_MARKER = ".orbax-checkpoint-tmp"
# The file Orbax writes last into a step folder in a bucket, committing it.
COMMIT_MARKER = "commit_success.txt"


def _bucket_folders(directory: str) -> list[epath.Path]:
    """The entries of a bucket folder ([] when it holds nothing yet)."""
    folder = epath.Path(directory)
    return list(folder.iterdir()) if folder.exists() else []


def step_folder(directory: str | Path, step: int) -> Path | epath.Path:
    """The folder of committed step `step` in `directory` (an `epath.Path` in a bucket)."""
    if is_url(str(directory)):
        return epath.Path(str(directory)) / str(step)
    return Path(directory) / str(step)


def committed_step(path: str | Path) -> int | None:
    """The step a folder holds when its name is that of a committed step, else None."""
    name = Path(path).name
    return int(name) if name.isdigit() else None


def committed_steps(directory: str | Path | None) -> list[int]:
    """The steps of a folder's committed step folders, oldest first ([] without the folder)."""
    if directory is not None and is_url(str(directory)):
        return sorted(
            step
            for p in _bucket_folders(str(directory))
            if (step := committed_step(p)) is not None and (p / COMMIT_MARKER).exists()
        )
    if directory is None or not Path(directory).is_dir():
        return []
    return sorted(
        step for step in (committed_step(p) for p in Path(directory).iterdir()) if step is not None
    )


def latest_committed_step(directory: str | Path | None) -> int | None:
    """The newest committed step of a folder, or None when it holds none."""
    steps = committed_steps(directory)
    return steps[-1] if steps else None


def unfinished_saves(directory: str | Path) -> list[Path] | list[epath.Path]:
    """Step folders a save began but never committed (the writer died or is still writing)."""
    if is_url(str(directory)):
        return sorted(
            (
                p
                for p in _bucket_folders(str(directory))
                if TMP_MARKER in p.name
                or (committed_step(p) is not None and not (p / COMMIT_MARKER).exists())
            ),
            key=str,
        )
    if not Path(directory).is_dir():
        return []
    return sorted(p for p in Path(directory).iterdir() if TMP_MARKER in p.name)
