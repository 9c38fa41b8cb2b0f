"""Test setup: 8 fake CPU devices (set before jax is imported) and shared fixtures."""

import gc
import importlib.util
import os
import pathlib
import sys

# Tests are dominated by XLA compile time on two cores: compile with LLVM optimisations off
# (4x faster to compile, numerically the same programs) and reuse compiled programs across tests.
os.environ.setdefault(
    "XLA_FLAGS", "--xla_force_host_platform_device_count=8 --xla_backend_optimization_level=0"
)
os.environ.setdefault(
    "JAX_COMPILATION_CACHE_DIR",
    str(pathlib.Path(__file__).resolve().parent.parent / ".pytest_cache" / "jax"),
)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import cpu_turns  # noqa: E402
import jax  # noqa: E402
import pytest  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parent.parent


def load_tool(name: str):
    """The script tools/<name>.py as a module, registered under its name so that what it
    defines (dataclasses, pickled functions) resolves back to it."""
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


# Verbatim copies of real config files from other stacks, in their repositories' layout;
# fixtures/compat/SOURCES.md names each file's repository, commit and license.
COMPAT_SAMPLES = REPO / "tests" / "fixtures" / "compat"


@pytest.fixture
def compat_samples() -> pathlib.Path:
    """The folder of real Primus / TorchTitan / MaxText / prime-rl config files."""
    return COMPAT_SAMPLES


@pytest.fixture
def unraisable(monkeypatch) -> list[str]:
    """What Python reports as "Exception ignored" while the test runs (callbacks from
    library threads that fail, e.g. into a closed event loop), instead of printing it."""
    caught: list[str] = []
    monkeypatch.setattr(
        sys, "unraisablehook", lambda u: caught.append(f"{u.exc_type.__name__}: {u.exc_value}")
    )
    return caught


@pytest.fixture(autouse=True, scope="module")
def _free_compiled_programs():
    """Drops every compiled program after each test module.

    Each XLA:CPU executable keeps its machine code in a few memory mappings for as long as
    jax's caches hold it. One process running the whole suite accumulates ~60k of them and
    reaches the kernel's limit (vm.max_map_count, 65530 by default), after which the next
    mapping fails inside XLA and the process dies with SIGSEGV at whichever test is
    compiling (or inside `executable.serialize()` writing a persistent-cache entry). A later
    module that compiles the same program loads it from the persistent cache instead.
    """
    yield
    jax.clear_caches()
    gc.collect()


@pytest.fixture
def jax_cache_setting():
    """Puts this process's compilation cache folder back as it was after the test (a trainer
    with `backend.compile_cache` switches it); yields the folder it had."""
    from jax.experimental.compilation_cache import compilation_cache as jax_cache

    before = jax.config.jax_compilation_cache_dir
    yield before
    jax_cache.reset_cache()
    jax.config.update("jax_compilation_cache_dir", before)


# Session fixtures of the data-layer tests (a tiny tokenizer, shards written by datatrove).
from data_fixtures import datatrove_corpus, tiny_tokenizer  # noqa: E402,F401

# moto's S3 server, started once per test run for the object-storage tests of every module.
from s3_fixture import s3_server  # noqa: E402,F401

# The suite runs in two pytest-xdist workers (pyproject's addopts; `-n 0` runs it in one
# process). Each test file goes to one worker whole, so its module fixtures (trained models,
# compiled programs) are built once; the files that use a session service go to one worker
# together, so the service starts once per run.
SHARED_SERVICES = ("s3_server",)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    service_of_file = {}
    for item in items:
        for service in SHARED_SERVICES:
            if service in getattr(item, "fixturenames", ()):
                service_of_file[item.path] = service
    for item in items:
        group = service_of_file.get(item.path, item.path.name)
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under xdist, a test marked `alone` runs while the other worker waits: each test holds a
    shared lock through its setup, call and teardown (module fixtures included), an `alone`
    test an exclusive one (`cpu_turns`)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return (yield)
    with cpu_turns.turn(
        item.config.rootpath / ".pytest_cache", alone=bool(item.get_closest_marker("alone"))
    ):
        return (yield)


def _can_write(folder: pathlib.Path) -> bool:
    try:
        (folder / ".write-probe").touch()
    except OSError:
        return False
    (folder / ".write-probe").unlink()
    return True


@pytest.fixture
def read_only_folder(tmp_path: pathlib.Path):
    """A folder this process cannot write into, even as root.

    Permission bits stop other users; root writes through them, so there the folder is made
    immutable (`chattr +i`, on filesystems that have the flag), or else a path under /sys is
    used (sysfs refuses new entries to everyone). Skipped where none of these works.
    """
    import shutil
    import subprocess

    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    immutable = False
    if _can_write(folder) and shutil.which("chattr"):
        immutable = (
            subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0
        )
    try:
        if not _can_write(folder):
            yield folder
        elif not _can_write(pathlib.Path("/sys")):
            yield pathlib.Path("/sys/jaxtrain-read-only-test")
        else:
            pytest.skip("no folder can be made read-only for this user here")
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)
