"""backend.compile_cache: a second run of a config loads its train step from JAX's persistent
compilation cache instead of compiling it, and trains exactly as the first did."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from jaxtrain.errors import ConfigError
from jaxtrain.hardware import backend as backend_lib
from jaxtrain.hardware import compile_cache


def _train(run_dir: Path, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxtrain",
            "--config",
            "llama_debug.py",
            "--config.train.steps=4",
            "--config.train.log_every=1",
            f"--config.run.dir={run_dir}",
            f"--config.backend.compile_cache={cache}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        # Every compile is stored, however short (JAX's default skips those under a second).
        env={**os.environ, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"},
    )


def _losses(run_dir: Path) -> list[float]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines if '"loss"' in line]


def _ready(run_dir: Path) -> dict:
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    return next(e for e in events if e["event"] == "ready")


def test_a_second_run_loads_the_train_step_from_the_cache_and_trains_alike(tmp_path):
    cache = tmp_path / "cache"
    folder = cache / compile_cache.device_folder_name(backend_lib.detect())
    first = _train(tmp_path / "first", cache)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"; stored in {folder}" in first.stdout
    assert any(p.name.startswith("jit_train_step-") for p in folder.iterdir())
    second = _train(tmp_path / "second", cache)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"loaded the train step from the compilation cache {folder} in " in second.stdout
    assert "compiled train step" not in second.stdout
    assert [_ready(tmp_path / r)["compile_cached"] for r in ("first", "second")] == [False, True]
    losses = _losses(tmp_path / "first")
    assert len(losses) == 4 and _losses(tmp_path / "second") == losses  # bit for bit
    # An entry cut short (a process killed while writing it) is compiled past and removed,
    # where JAX alone would keep it, and fail to read it, at every later start.
    (entry,) = folder.glob("jit_train_step-*")
    entry.write_bytes(entry.read_bytes()[:1000])
    third = _train(tmp_path / "third", cache)
    assert third.returncode == 0, third.stdout + third.stderr
    assert "compiled train step in " in third.stdout
    assert (
        f"warning: removed 1 unreadable compilation cache entry of jit_train_step from {folder}"
        in third.stdout
    )
    assert "Error reading persistent compilation cache entry" not in third.stderr
    assert not entry.exists() and _losses(tmp_path / "third") == losses


def test_each_kind_of_cpu_gets_its_own_folder():
    avx512 = backend_lib.TARGETS["cpu-avx512-bf16"]
    avx2_only = dataclasses.replace(avx512, cpu_flags=frozenset({"avx2", "fma"}))
    names = {compile_cache.device_folder_name(b) for b in (avx512, avx2_only)}
    assert len(names) == 2 and all(n.startswith("cpu-x86-cpu-with-avx512-bf16-") for n in names)
    assert compile_cache.device_folder_name(avx512) == compile_cache.device_folder_name(
        dataclasses.replace(avx512)
    )
    assert compile_cache.device_folder_name(backend_lib.TARGETS["nvidia-h100"]) == (
        "gpu-nvidia-h100"
    )


def _compile_stored(folder: Path, scale: float) -> compile_cache.CacheUse:
    """Compiles a small program with every compile stored; what the cache did in `folder`."""
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    try:
        with compile_cache.watch(folder) as use:
            jax.jit(lambda x: jnp.sin(x) * scale).lower(
                jax.ShapeDtypeStruct((7,), jnp.float32)
            ).compile()
    finally:
        jax.config.update(
            "jax_persistent_cache_min_compile_time_secs",
            float(os.environ.get("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", 1.0)),
        )
    return use


def test_installing_switches_the_process_to_the_new_folder(tmp_path, jax_cache_setting):
    first = compile_cache.install(str(tmp_path / "a"))
    assert len(_compile_stored(first, 2.0).stored) == 1  # JAX has opened the first folder
    second = compile_cache.install(str(tmp_path / "b"))
    assert first != second and jax.config.jax_compilation_cache_dir == str(second)
    use = _compile_stored(second, 3.0)
    assert use.hits == 0 and [name.split("-")[0] for name in use.stored] == ["jit__lambda"]
    assert len(list(first.iterdir())) == 1 and len(list(second.iterdir())) == 1


def test_entries_cut_short_are_removed_and_whole_ones_kept(tmp_path, jax_cache_setting):
    folder = compile_cache.install(str(tmp_path))
    (whole,) = _compile_stored(folder, 4.0).stored
    data = (folder / whole).read_bytes()
    (folder / "jit__lambda-cut-cache").write_bytes(data[: len(data) // 2])
    (folder / "jit__lambda-empty-cache").write_bytes(b"")
    removed = compile_cache.remove_unreadable(folder, "jit__lambda")
    assert sorted(p.name for p in removed) == ["jit__lambda-cut-cache", "jit__lambda-empty-cache"]
    assert [p.name for p in folder.iterdir()] == [whole]


def test_no_folder_leaves_jax_setting_as_it_is(jax_cache_setting):
    before = jax.config.jax_compilation_cache_dir
    assert compile_cache.install("") is None
    assert jax.config.jax_compilation_cache_dir == before


def test_a_url_or_a_folder_that_cannot_be_made_is_refused(tmp_path, jax_cache_setting):
    with pytest.raises(ConfigError, match=r"backend.compile_cache='s3://bucket/cache'.*not an"):
        compile_cache.install("s3://bucket/cache")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=rf"backend.compile_cache=.*cannot write in {blocker}/"):
        compile_cache.install(str(blocker))


def test_a_folder_that_refuses_new_entries_is_refused(read_only_folder, jax_cache_setting):
    # Also where the permission bits would let this user write (root; /sys).
    with pytest.raises(ConfigError, match=rf"cannot write in {read_only_folder}/cpu-"):
        compile_cache.install(str(read_only_folder))


def test_other_warnings_pass_through_also_when_the_compile_fails():
    with pytest.warns(UserWarning, match="said before the failure"):
        with pytest.raises(RuntimeError, match="compile failed"):
            with compile_cache.watch():
                warnings.warn("said before the failure", UserWarning, stacklevel=1)
                raise RuntimeError("compile failed")


def test_sample_reads_and_fills_the_runs_cache(tmp_path, datatrove_corpus, jax_cache_setting):
    from jaxtrain.config import loader as config_lib
    from jaxtrain.trainer import Trainer

    run, cache = tmp_path / "run", tmp_path / "cache"
    cfg = config_lib.load_config(
        "llama_debug.py",
        {
            "run.dir": str(run),
            "data.kind": "datatrove",
            "data.paths": str(datatrove_corpus.folder),
            "data.tokenizer": str(datatrove_corpus.tokenizer),
            "train.seq_len": 32,
            "train.global_batch_size": 4,
            "train.steps": 1,
            "train.progress": False,
            "backend.compile_cache": str(cache),
        },
    )
    trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
    trainer.run()
    trainer.close()
    folder = cache / compile_cache.device_folder_name(backend_lib.detect())

    def sample() -> tuple[str, set[str]]:
        done = subprocess.run(
            [sys.executable, "-m", "jaxtrain", "sample", "--run", str(run), "--prompt", "the"],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"},
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout, {p.name for p in folder.iterdir()}

    trained = {p.name for p in folder.iterdir()}
    first, after_first = sample()
    new = after_first - trained
    assert any(name.startswith("jit_") for name in new), new  # the sampler's programs
    second, after_second = sample()
    assert second == first and after_second == after_first  # loaded, none compiled again


def test_a_saved_runs_cache_this_host_cannot_use_is_named_and_skipped(
    read_only_folder, jax_cache_setting, capsys
):
    said = []
    assert compile_cache.install_for_reading(str(read_only_folder), said.append) is None
    assert jax.config.jax_compilation_cache_dir == jax_cache_setting
    (line,) = said
    assert line.startswith(
        "warning: compiling without the run's compilation cache: "
        f"backend.compile_cache='{read_only_folder}': cannot write in {read_only_folder}/cpu-"
    )
    # Without `say` (the commands), the line goes to standard error.
    assert compile_cache.install_for_reading(str(read_only_folder)) is None
    assert capsys.readouterr().err == line + "\n"
