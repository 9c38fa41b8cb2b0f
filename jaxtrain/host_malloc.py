"""glibc malloc settings that keep a CPU training process's freed memory for its next step.

XLA:CPU allocates each step's scratch buffer (hundreds of MB for a small model) afresh. glibc
serves such sizes with mmap and returns them on free, so every step page-faults the whole buffer
back in: on the 2-core benchmark machine about 93,000 faults and a quarter of a CPU-second per
step, a fifth of the step time. With mmap off, one arena and no trimming, the buffer stays mapped
and is reused. One arena, because an allocation that a worker thread makes in an arena of its own
cannot grow past 64 MB there and glibc then maps it directly, whatever `MALLOC_MMAP_MAX_` says:
with two arenas the scratch buffer went back to being mapped and unmapped every step in about one
start in three, depending on which thread first ran the step.

The settings are environment variables glibc reads once, at start-up, so `python -m jaxtrain`
restarts itself with them before doing anything else (`reexec_with_tuned_malloc`). It does so
only on Linux, only when JAX has no GPU plugin (GPU steps allocate device memory, not this), and
never when `JAXTRAIN_MALLOC=off` or the variables are already set.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import sys

SETTINGS = {
    "MALLOC_MMAP_MAX_": "0",  # large blocks from the heap, which stays mapped ...
    "MALLOC_TRIM_THRESHOLD_": str(64 << 30),  # ... and is never trimmed back to the system;
    "MALLOC_ARENA_MAX": "1",  # worker threads share the one heap that can grow that large.
}
OPT_OUT = "JAXTRAIN_MALLOC"  # =off keeps the process's malloc as it is


def _jax_has_accelerator_plugin() -> bool:
    """Whether an installed JAX PJRT plugin (CUDA, ROCm, TPU) could take over from the CPU."""
    if importlib.metadata.entry_points(group="jax_plugins"):
        return True
    return importlib.util.find_spec("jax_plugins") is not None or (
        importlib.util.find_spec("libtpu") is not None)


def worthwhile(environ: dict[str, str] | None = None) -> bool:
    """Whether restarting with `SETTINGS` applies here (see the module docstring)."""
    environ = os.environ if environ is None else environ
    if environ.get(OPT_OUT, "").lower() in ("off", "0", "false", "no"):
        return False
    if all(environ.get(key) == value for key, value in SETTINGS.items()):
        return False  # already running with them
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    platforms = environ.get("JAX_PLATFORMS", "")
    return platforms == "cpu" or (not platforms and not _jax_has_accelerator_plugin())


def reexec_with_tuned_malloc() -> None:
    """Replaces this process by the same command with `SETTINGS` in its environment, when
    `worthwhile()`; returns (doing nothing) otherwise. Call it before any work is done."""
    if not worthwhile():
        return
    environ = {**os.environ, **SETTINGS}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environ)
