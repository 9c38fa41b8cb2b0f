"""Picks a layout for a config on N devices over H hosts: enumerate, guess, compile, rank.

1. `candidates.enumerate_candidates`: every mesh x micro batch x remat x loss chunking the
   trainer accepts, with a first guess of memory and traffic (no compile).
2. Candidates whose guess exceeds the device's memory by more than `PRUNE_MARGIN` are dropped;
   the rest are ordered fitting-first by the cost model on the guessed traffic.
3. The first `compile_top` are compiled (in a child process with N fake CPU devices,
   `compile_worker`) at the config's full depth. Layers are scanned, so the whole stack costs
   about what one layer does to compile (Llama 3.1 8B on 8 devices: 54 s at 32 layers, 55 s
   at 4), while shallower programs schedule their buffers differently enough that no line
   through them extends to the real depth (that 8B: 42 and 41 GiB at 1 and 2 layers, 54 at
   4, 236 at 32). Results are cached under `cache_dir` by the config file's contents, the
   overrides, devices, hosts and jax's version, so a rerun compiles nothing.
4. Compiled candidates are ranked: fitting ones (memory below `HEADROOM` x the device's) first,
   by predicted tokens/s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from ml_collections import ConfigDict

from jaxtrain import run
from jaxtrain.planning import candidates as candidates_lib
from jaxtrain.planning import compile_worker, cost
from jaxtrain.planning.hardware import DeviceKind

GIB = 2**30
HEADROOM = 0.9  # of the device's memory: allocator fragmentation, runtime buffers, misestimate
PRUNE_MARGIN = 1.5  # the first guess is rough: keep candidates up to 1.5x the memory
CACHE_FORMAT = 4


def default_cache_dir() -> str:
    """~/.cache/jaxtrain/plan (XDG_CACHE_HOME respected)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(root, "jaxtrain", "plan")


@dataclasses.dataclass
class Ranked:
    """A compiled candidate with its figures and prediction."""

    cand: candidates_lib.Candidate
    memory_bytes: float
    prediction: cost.Prediction
    fits: bool
    error: str = ""
    cpu_bytes: float = 0.0  # the CPU compile's own peak (memory_bytes is the device's)
    reason: str = ""


def _cache_path(cache_dir: str, job_key: str, cand: candidates_lib.Candidate) -> str:
    text = json.dumps([job_key, cand.overrides()])
    return os.path.join(cache_dir, hashlib.sha256(text.encode()).hexdigest()[:24] + ".json")


def _job_key(
    config_path: str, overrides: Sequence[str], native: Sequence[str], devices: int, hosts: int
) -> str:
    import jax

    path = config_path.partition(":")[0]
    content = config_path  # a preset by name: its name
    if os.path.isfile(path):
        with open(path, "rb") as f:
            content = hashlib.sha256(f.read()).hexdigest()
    return json.dumps(
        [CACHE_FORMAT, content, list(overrides), list(native), devices, hosts, jax.__version__]
    )


def _compile(
    config_path: str,
    overrides: Sequence[str],
    native: Sequence[str],
    chosen: Sequence[candidates_lib.Candidate],
    devices: int,
    hosts: int,
    cache_dir: str,
) -> list[dict]:
    """The compiled figures of each chosen candidate (compiling what the cache lacks)."""
    key = _job_key(config_path, overrides, native, devices, hosts)
    paths = [_cache_path(cache_dir, key, cand) for cand in chosen]
    tasks = [
        {
            "overrides": cand.overrides(),
            "out": path,
            "label": f"{cand.describe_mesh()}, micro {cand.micro_batch}, remat {cand.remat}",
        }
        for cand, path in zip(chosen, paths)
        if not os.path.exists(path)
    ]
    if tasks:
        job = {
            "config": config_path,
            "overrides": list(overrides),
            "native": list(native),
            "devices": devices,
            "hosts": hosts,
            "tasks": tasks,
        }
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(job, f)
        try:
            subprocess.run(
                [sys.executable, "-m", "jaxtrain.planning.compile_worker", f.name],
                env=compile_worker.environment(devices),
                check=True,
            )
        finally:
            os.unlink(f.name)
    out = []
    for path in paths:
        with open(path) as f:
            out.append(json.load(f))
        if "error" in out[-1]:
            os.unlink(path)  # reported now, compiled again next time (the cause may be fixed)
    return out


def device_peak(result: dict, cand: candidates_lib.Candidate, cfg: ConfigDict, kind: Any) -> float:
    """Peak bytes per device on `kind` from a CPU compile's figures.

    XLA's CPU compiler keeps bfloat16 activations as float32: the 4-layer Llama 3.1 8B step
    on 8 devices plans 50.8 GiB of scratch in bfloat16 and 49.7 GiB in float32. An accelerator
    keeps them at the model's width, so on one the scratch beyond the float32 gradients
    (twice the parameters' shard when micro batches accumulate) counts at 2 bytes of 4. On
    `cpu` the compiled peak stands as it is.
    """
    peak = float(result["peak_bytes"])
    if kind.name == "cpu" or cfg.model.dtype not in ("bfloat16", "float16"):
        return peak
    activations = max(float(result["memory"]["temp"]) - cand.grad_bytes, 0.0)
    return peak - activations / 2


def _predict(
    kind: DeviceKind,
    cfg: ConfigDict,
    spec: Any,
    cand: Any,
    coll: dict,
    devices: int,
    compiled: dict | None = None,
) -> cost.Prediction:
    """The cost model's prediction from a first guess, or from a compile's figures: on `cpu`
    the compiled program is the one that runs, so its own matmul FLOPs count."""
    executed = float((compiled or {}).get("dot_flops", 0.0)) if kind.name == "cpu" else 0.0
    tokens = cfg.train.global_batch_size * cfg.train.seq_len
    return cost.predict(
        kind,
        model_flops_per_device=spec.flops_per_token(cfg.train.seq_len) * tokens / devices,
        remat=cand.remat,
        rows_per_device=candidates_lib.rows_per_device(cand, int(cfg.train.seq_len)),
        bubble=cand.bubble,
        collectives=coll,
        dcn=cand.dcn,
        tokens_per_step=tokens,
        devices=devices,
        update_bytes=cand.update_bytes,
        executed_flops_per_device=executed,
    )


def plan(
    cfg: ConfigDict,
    config_path: str,
    overrides: Sequence[str],
    kind: DeviceKind,
    devices: int,
    hosts: int,
    compile_top: int = 8,
    cache_dir: str = "",
    progress: Any = None,
    given_only: bool = False,
    native_overrides: Sequence[str] = (),
) -> list[Ranked]:
    """The compiled candidates, best first (see the module docstring); with `given_only`,
    only the config's own layout, compiled and predicted the same way (no search)."""
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    spec = run.validate(cfg, check_data=False)
    capacity = kind.hbm_gib * GIB * HEADROOM
    if given_only:
        chosen = [candidates_lib.given(cfg, devices, hosts)]
        say(
            f"plan: scoring the config's own layout ({chosen[0].describe_mesh()}) on "
            f"{devices} fake devices (cached in {cache_dir or default_cache_dir()})"
        )
    else:
        found = candidates_lib.enumerate_candidates(cfg, devices, hosts)
        kept = [c for c in found if c.estimate_bytes <= capacity * PRUNE_MARGIN]
        guesses = {
            id(c): _predict(kind, cfg, spec, c, c.estimate_collectives, devices) for c in kept
        }
        kept.sort(key=lambda c: (c.estimate_bytes > capacity, -guesses[id(c)].tokens_per_s))
        chosen = _diverse(kept, compile_top)
        say(
            f"plan: {len(found)} layouts pass the trainer's checks, {len(kept)} may fit "
            f"{kind.hbm_gib:.0f} GiB; compiling the {len(chosen)} best guesses on {devices} "
            f"fake devices (cached in {cache_dir or default_cache_dir()})"
        )
    compiled = _compile(
        config_path,
        overrides,
        native_overrides,
        chosen,
        devices,
        hosts,
        cache_dir or default_cache_dir(),
    )
    ranked = []
    for cand, result in zip(chosen, compiled):
        if "error" in result:
            nothing = cost.Prediction(float("inf"), 0.0, 0.0, {}, 0.0, 0.0)
            ranked.append(Ranked(cand, float("inf"), nothing, False, error=result["error"]))
            continue
        pred = _predict(kind, cfg, spec, cand, result["collectives"], devices, result)
        peak = device_peak(result, cand, cfg, kind)
        ranked.append(Ranked(cand, peak, pred, peak <= capacity, cpu_bytes=result["peak_bytes"]))
    ranked.sort(key=lambda r: (not r.fits, -r.prediction.tokens_per_s))
    _explain(ranked, capacity)
    return ranked


def _diverse(kept: list, top: int) -> list:
    """The first `top`, taking at most half of them from any one mesh, so that the compiled
    set compares layouts rather than only the settings of the best-guessed mesh."""
    chosen, per_mesh = [], {}
    for c in kept:
        mesh = c.describe_mesh()
        if per_mesh.get(mesh, 0) >= max(top // 2, 1):
            continue
        per_mesh[mesh] = per_mesh.get(mesh, 0) + 1
        chosen.append(c)
        if len(chosen) == top:
            break
    return chosen


def _explain(ranked: list[Ranked], capacity: float) -> None:
    """A reason for every candidate after the first."""
    if not ranked:
        return
    best = ranked[0].prediction
    if ranked[0].error:
        ranked[0].reason = f"did not compile: {ranked[0].error}"
    for r in ranked[1:]:
        if r.error:
            r.reason = f"did not compile: {r.error}"
        elif not r.fits:
            r.reason = f"doesn't fit: {r.memory_bytes / GIB:.1f} GiB > {capacity / GIB:.1f} GiB"
        else:
            slower = 1 - r.prediction.tokens_per_s / best.tokens_per_s
            worst = r.prediction.worst_collective
            why = f" ({worst}: {r.prediction.comm_s[worst] * 1e3:.0f} ms exposed)" if worst else ""
            if r.prediction.compute_s > best.compute_s * 1.01:
                why += (
                    f" (more compute: {r.prediction.compute_s * 1e3:.0f} ms against "
                    f"{best.compute_s * 1e3:.0f}: remat, bubble, padded rows or small matmuls)"
                )
            if r.prediction.update_s > best.update_s * 1.01 + 1e-4 * best.step_s:
                why += f" (optimizer update over more state: {r.prediction.update_s * 1e3:.0f} ms)"
            r.reason = f"slower by {slower:.0%}{why}"
