"""glibc malloc settings that keep a CPU training process's freed memory for its next step.

XLA:CPU allocates each step's scratch buffer (hundreds of MB for a small model) afresh. glibc
serves such sizes with mmap and returns them on free, so every step page-faults the whole buffer
back in (a fifth of a small model's step time on two cores). With mmap off, one arena and no trimming, the buffer stays mapped
and is reused. One arena, because an allocation that a worker thread makes in an arena of its own
cannot grow past 64 MB there and glibc then maps it directly, whatever `MALLOC_MMAP_MAX_` says:
with two arenas the scratch buffer went back to being mapped and unmapped every step in about one
start in three, depending on which thread first ran the step.

The heap is also backed by transparent huge pages (`glibc.malloc.hugetlb=1`, glibc 2.35 and
later; older versions ignore it): the step streams through hundreds of MB of weights, logits and
activations, and with 2 MB pages it misses the TLB far less: about 2% faster steps for about 40%
more resident memory from the heap's partly used huge pages (docs/performance.md#hardware-choices
has the figures).

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
HUGE_PAGES = "glibc.malloc.hugetlb=1"  # madvise the heap for transparent huge pages
OPT_OUT = "JAXTRAIN_MALLOC"  # =off keeps the process's malloc as it is


def tuned_environment(environ: dict[str, str]) -> dict[str, str]:
    """`environ` with `SETTINGS`, and `HUGE_PAGES` added to GLIBC_TUNABLES unless that already
    says how malloc should use huge pages."""
    tuned = {**environ, **SETTINGS}
    tunables = [t for t in environ.get("GLIBC_TUNABLES", "").split(":") if t]
    if not any(t.startswith("glibc.malloc.hugetlb=") for t in tunables):
        tuned["GLIBC_TUNABLES"] = ":".join([*tunables, HUGE_PAGES])
    return tuned


def _jax_has_accelerator_plugin() -> bool:
    """Whether an installed JAX PJRT plugin (CUDA, ROCm, TPU) could take over from the CPU."""
    if importlib.metadata.entry_points(group="jax_plugins"):
        return True
    return importlib.util.find_spec("jax_plugins") is not None or (
        importlib.util.find_spec("libtpu") is not None
    )


def worthwhile(environ: dict[str, str] | None = None) -> bool:
    """Whether restarting with `SETTINGS` applies here (see the module docstring)."""
    environ = os.environ if environ is None else environ
    if environ.get(OPT_OUT, "").lower() in ("off", "0", "false", "no"):
        return False
    if tuned_environment(environ) == dict(environ):
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
    environ = tuned_environment(dict(os.environ))
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], environ)
