"""What a benchmark figure was measured on: the CPU model and core count, and the disk under a
folder. Throughput on one machine says little without them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from jaxtrain.hardware.backend import cpu_model


def _mount_of(folder: Path) -> tuple[str, str, str]:
    """(device, mount point, filesystem type) of the mount holding `folder` (from
    /proc/mounts; unknown elsewhere)."""
    best = ("unknown device", "/", "unknown filesystem")
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best
    path = str(folder.resolve())
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        device, mount, kind = fields[0], fields[1].replace("\\040", " "), fields[2]
        inside = path == mount or path.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best[1]):
            best = (device, mount, kind)
    return best


def cpu_line() -> str:
    """'AMD EPYC, 2 cores': the CPU model and the cores this process may use."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu_model()}, {cores} cores"


def disk_line(folder: Path) -> str:
    """'/dev/vda (ext4, 252 GB, 78 GB free) mounted at /' for the disk holding `folder` (the
    nearest existing parent when it does not exist yet)."""
    folder = Path(folder).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    device, mount, kind = _mount_of(folder)
    usage = shutil.disk_usage(folder)
    return (
        f"{device} ({kind}, {usage.total / 1e9:.0f} GB, {usage.free / 1e9:.0f} GB free) "
        f"mounted at {mount}"
    )
