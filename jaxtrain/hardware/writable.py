"""Whether this process can write into a folder, found out by writing there.

The permission bits (`os.access`) do not stop root, and they pass a folder that refuses new
entries all the same (an immutable folder, a read-only pseudo-filesystem such as /sys). Each
check that guards work to come (the checkpoint folder, an export's output folder, the
compilation cache) therefore makes an entry in the folder and removes it again.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

PROBE_PREFIX = ".jaxtrain-write-test-"


def _nearest_existing(folder: Path) -> Path:
    """`folder`, or its nearest parent that exists (where the folder would be made)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def probe(folder: Path, *, create: bool) -> None:
    """Raises the OSError that writing into `folder` meets, else returns.

    `create` makes the folder and its parents first, and they stay. Without it nothing is left
    behind: a folder that does not exist yet is probed in its nearest existing parent, where it
    would be made."""
    if create:
        folder.mkdir(parents=True, exist_ok=True)
        target = folder
    else:
        target = _nearest_existing(folder)
        if not target.is_dir():
            raise NotADirectoryError(f"{target} is a file")
    os.rmdir(tempfile.mkdtemp(dir=target, prefix=PROBE_PREFIX))
