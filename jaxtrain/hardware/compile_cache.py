"""JAX's persistent compilation cache for a run's programs (`backend.compile_cache`).

With a cache folder, a restart (a requeued job, a resume after preemption, the next run of the
same config) loads the train and eval steps XLA compiled before instead of compiling them
again: minutes for a large model on a GPU, seconds on a CPU. JAX keys each entry by the
program, the compiler options and XLA_FLAGS, the jaxlib version and the devices, so a changed
config or mesh compiles afresh and stores one entry more.

JAX's key leaves out the CPU's instruction sets: every CPU's device kind is "cpu", while
XLA:CPU compiles for the instruction sets of the host it runs on. A folder shared by different
CPUs (a home directory on a network filesystem) would hand one CPU's machine code to another,
so each kind of device gets its own subfolder, named after the CPU model and a digest of its
flags, or the accelerator's kind.

Only process 0 writes entries (JAX's rule, against write contention), so on several hosts the
folder must be one they share for the others to read them. The cache is trusted code: whoever
can write to the folder can make the trainer run anything, so it must not be writable by
others.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import jax
from jax._src import compilation_cache as jax_cache_internals  # the entries' compression
from jax.experimental.compilation_cache import compilation_cache as jax_cache

from jaxtrain.errors import ConfigError
from jaxtrain.hardware import backend as backend_lib
from jaxtrain.hardware import writable

KEY = "backend.compile_cache"
_HIT = "/jax/compilation_cache/cache_hits"
_SAVED = "/jax/compilation_cache/compile_time_saved_sec"
_SUFFIX = "-cache"  # JAX's file cache names an entry <program>-<key>-cache
# JAX's warning for an entry it found but could not read (it compiles the program instead).
_UNREADABLE = re.compile(r"Error reading persistent compilation cache entry for '([^']+)'")


def device_folder_name(chosen: backend_lib.Backend) -> str:
    """The subfolder of one kind of device: 'cpu-amd-epyc-1f0c2a9b5e' (model and a digest of
    the instruction sets), 'gpu-nvidia-h100-80gb-hbm3'."""
    name = f"{chosen.platform}-{_slug(chosen.kind) or 'unknown'}"
    if chosen.platform == "cpu":
        flags = " ".join(sorted(chosen.cpu_flags))
        name += "-" + hashlib.sha256(flags.encode()).hexdigest()[:10]
    return name


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def install(base: str) -> Path | None:
    """Makes this process's later compilations read and write the cache under `base` (the
    value of `backend.compile_cache`), in the subfolder of this machine's devices; returns that
    folder. An empty `base` leaves JAX's own setting (`JAX_COMPILATION_CACHE_DIR`) as it is
    and returns None."""
    if not base:
        return None
    if "://" in base:
        raise ConfigError(
            f"{KEY}={base!r}: the compilation cache must be a folder on a filesystem (local, or "
            "shared by the hosts), not an object-store URL; give a path such as "
            "~/.cache/jaxtrain/compile or one on the cluster's shared filesystem."
        )
    folder = Path(os.path.expanduser(base)).absolute() / device_folder_name(backend_lib.detect())
    try:
        writable.probe(folder, create=True)
    except OSError as e:
        raise ConfigError(
            f"{KEY}={base!r}: cannot write in {folder} ({e.strerror or e}); give a folder this "
            "user can write, or '' for no cache."
        ) from e
    if jax.config.jax_compilation_cache_dir != str(folder):
        jax_cache.reset_cache()  # JAX opens its folder once; a notebook may switch folders
        jax.config.update("jax_compilation_cache_dir", str(folder))
    return folder


def install_for_reading(base: str, say: Callable[[str], None] | None = None) -> Path | None:
    """`install` for a command that reads a saved run (`eval --run`, `sample`), so that the
    run's cache serves their programs too. A folder this host cannot use costs those compiles,
    not the command: `say` (default: standard error) gets why, and None is returned."""
    try:
        return install(base)
    except ConfigError as error:
        line = f"warning: compiling without the run's compilation cache: {error}"
        if say is None:
            print(line, file=sys.stderr, flush=True)
        else:
            say(line)
        return None


@dataclasses.dataclass
class CacheUse:
    """What the persistent cache did for the compilations inside `watch()`."""

    hits: int = 0  # programs loaded from the cache
    saved_s: float = 0.0  # compile seconds the hits saved (as recorded when they were stored)
    stored: list[str] = dataclasses.field(default_factory=list)  # entries written
    unreadable: list[str] = dataclasses.field(default_factory=list)  # programs whose entry failed


@contextlib.contextmanager
def watch(folder: Path | None = None) -> Iterator[CacheUse]:
    """Counts the cache's hits (JAX's monitoring events) while the block runs, and the entries
    it wrote to `folder`. An entry JAX could not read is named in `unreadable` instead of
    JAX's warning (see `remove_unreadable`); other warnings pass through."""
    use = CacheUse()
    before = _entries(folder)

    def on_event(event: str, **_: object) -> None:
        if event == _HIT:
            use.hits += 1

    def on_duration(event: str, duration: float, **_: object) -> None:
        if event == _SAVED:
            use.saved_s += duration

    jax.monitoring.register_event_listener(on_event)
    jax.monitoring.register_event_duration_secs_listener(on_duration)
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield use
    finally:  # also when the compile fails: its warnings may say why
        jax.monitoring.unregister_event_listener(on_event)
        jax.monitoring.unregister_event_duration_listener(on_duration)
        for warning in caught:
            unreadable = _UNREADABLE.match(str(warning.message))
            if unreadable:
                use.unreadable.append(unreadable.group(1))
            else:
                warnings.warn_explicit(
                    warning.message, warning.category, warning.filename, warning.lineno
                )
        use.stored = sorted(_entries(folder) - before)


def _entries(folder: Path | None) -> set[str]:
    if folder is None or not folder.is_dir():
        return set()
    return {p.name for p in folder.glob(f"*{_SUFFIX}")}


def remove_unreadable(folder: Path, program: str) -> list[Path]:
    """Removes `program`'s entries in `folder` that do not decompress (a process killed while
    JAX wrote one leaves it cut short); returns them. JAX never replaces an entry whose file
    exists, so a broken one would otherwise make every later start compile again."""
    removed = []
    for path in sorted(folder.glob(f"{program}-*{_SUFFIX}")):
        try:
            jax_cache_internals.decompress_executable(path.read_bytes())
        except Exception:  # any failure to decompress: the entry is unusable
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def outcome_line(program: str, seconds: float, use: CacheUse, folder: Path | None) -> str:
    """The log line of one compile: loaded from the cache, or compiled (and stored)."""
    if use.hits:
        where = f" {folder}" if folder else ""
        return (
            f"loaded the {program} from the compilation cache{where} in {seconds:.1f}s, "
            f"saving about {use.saved_s:.0f}s of compiling"
        )
    stored = f"; stored in {folder}" if use.stored else ""
    return f"compiled {program} in {seconds:.1f}s{stored}"


def mend(folder: Path | None, use: CacheUse) -> list[str]:
    """Removes the entries JAX could not read inside `watch()` (see `remove_unreadable`);
    returns a warning line for each program, saying what was done."""
    lines = []
    for program in use.unreadable:
        removed = remove_unreadable(folder, program) if folder else []
        if removed:
            lines.append(
                f"warning: removed {len(removed)} unreadable compilation cache entr"
                f"{'y' if len(removed) == 1 else 'ies'} of {program} from {folder} (cut short "
                "by a process stopped while writing); it was compiled instead and the next "
                "start stores it again"
            )
        else:
            lines.append(
                f"warning: the compilation cache entry of {program} could not be read "
                f"({folder or 'JAX_COMPILATION_CACHE_DIR'}); it was compiled instead"
            )
    return lines
