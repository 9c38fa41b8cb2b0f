"""Picks a layout for a config on N devices over H hosts: enumerate, guess, compile, rank.

1. `candidates.enumerate_candidates`: every mesh x micro batch x remat x loss chunking the
   trainer accepts, with a first guess of memory and traffic (no compile).
2. Candidates whose guess exceeds the device's memory by more than `PRUNE_MARGIN` are dropped;
   the rest are ordered fitting-first by the cost model on the guessed traffic.
3. The first `compile_top` are compiled (in a child process with N fake CPU devices,
   `compile_worker`) at two small depths; memory and collective bytes are affine in depth
   (layers are scanned), so they are extended to the config's depth. Results are cached under
   `cache_dir` by the config file's contents, the overrides, depth, devices, hosts and jax's
   version, so a rerun compiles nothing.
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
from jaxtrain.config import mesh_check
from jaxtrain.planning import candidates as candidates_lib
from jaxtrain.planning import compile_worker, cost
from jaxtrain.planning.hardware import DeviceKind

GIB = 2**30
HEADROOM = 0.9  # of the device's memory: allocator fragmentation, runtime buffers, misestimate
PRUNE_MARGIN = 1.5  # the first guess is rough: keep candidates up to 1.5x the memory
CACHE_FORMAT = 1


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
    reason: str = ""


def _depths(cfg: ConfigDict, spec: Any, cand: candidates_lib.Candidate) -> tuple[int, ...]:
    """Two small depths to compile (multiples of the pipeline stages), or the real one.

    A block pattern (hybrids) is written for the whole depth, and leading dense blocks or
    interleaved expert blocks do not shrink to one layer: those compile at the real depth.
    """
    full = int(cfg.model.num_layers)
    unit = cand.sizes["pipeline"]
    plain = not spec.block_pattern and mesh_check.pipeline_units(spec)[0] == full
    if not plain or full <= 2 * unit:
        return (full,)
    return (unit, 2 * unit)


def _cache_path(cache_dir: str, job_key: str, cand: candidates_lib.Candidate, depth: int) -> str:
    text = json.dumps([job_key, cand.overrides(), depth])
    return os.path.join(cache_dir, hashlib.sha256(text.encode()).hexdigest()[:24] + ".json")


def _job_key(config_path: str, overrides: Sequence[str], devices: int, hosts: int) -> str:
    import jax

    path = config_path.partition(":")[0]
    content = config_path  # a preset by name: its name
    if os.path.isfile(path):
        with open(path, "rb") as f:
            content = hashlib.sha256(f.read()).hexdigest()
    return json.dumps([CACHE_FORMAT, content, list(overrides), devices, hosts, jax.__version__])


def _compile(
    config_path: str,
    overrides: Sequence[str],
    chosen: Sequence[candidates_lib.Candidate],
    cfg: ConfigDict,
    devices: int,
    hosts: int,
    cache_dir: str,
) -> list[list[dict]]:
    """The compiled figures of each chosen candidate at its depths (compiling what is missing)."""
    spec = run.validate(cfg, check_data=False)
    key = _job_key(config_path, overrides, devices, hosts)
    tasks, paths = [], []
    for cand in chosen:
        cand_paths = []
        for depth in _depths(cfg, spec, cand):
            path = _cache_path(cache_dir, key, cand, depth)
            cand_paths.append(path)
            if not os.path.exists(path):
                label = f"{cand.describe_mesh()}, micro {cand.micro_batch}, remat {cand.remat}"
                tasks.append(
                    {"overrides": cand.overrides(), "depth": depth, "out": path, "label": label}
                )
        paths.append(cand_paths)
    if tasks:
        job = {
            "config": config_path,
            "overrides": list(overrides),
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
    for cand_paths in paths:
        results = []
        for path in cand_paths:
            with open(path) as f:
                results.append(json.load(f))
        out.append(results)
    return out


def _extend(results: list[dict], full: int) -> tuple[float, dict[str, dict[str, float]]]:
    """Peak bytes and collectives at depth `full` from one or two compiled depths."""
    if len(results) == 1:
        return results[0]["peak_bytes"], results[0]["collectives"]
    a, b = results

    def line(ya: float, yb: float) -> float:
        return ya + (yb - ya) * (full - a["depth"]) / (b["depth"] - a["depth"])

    coll = {}
    for key in set(a["collectives"]) | set(b["collectives"]):
        ca = a["collectives"].get(key, {"bus_bytes": 0.0, "runs": 0.0})
        cb = b["collectives"].get(key, {"bus_bytes": 0.0, "runs": 0.0})
        coll[key] = {f: max(line(ca[f], cb[f]), 0.0) for f in ("bus_bytes", "runs")}
    # XLA may schedule a deeper shallow program more tightly (pipelines at 1 and 2 layers per
    # stage did): a line falling with depth is no extrapolation; then the larger peak plus
    # the state's growth per layer (the arguments, which are affine) stands in for it.
    peak = line(a["peak_bytes"], b["peak_bytes"])
    if b["peak_bytes"] < a["peak_bytes"]:
        args_a, args_b = a["memory"]["argument"], b["memory"]["argument"]
        peak = a["peak_bytes"] + line(args_a, args_b) - args_b
    return peak, coll


def _predict(
    kind: DeviceKind, cfg: ConfigDict, spec: Any, cand: Any, coll: dict, devices: int
) -> cost.Prediction:
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
) -> list[Ranked]:
    """The compiled candidates, best first (see the module docstring)."""
    say = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
    spec = run.validate(cfg, check_data=False)
    found = candidates_lib.enumerate_candidates(cfg, devices, hosts)
    capacity = kind.hbm_gib * GIB * HEADROOM
    kept = [c for c in found if c.estimate_bytes <= capacity * PRUNE_MARGIN]
    guesses = {id(c): _predict(kind, cfg, spec, c, c.estimate_collectives, devices) for c in kept}
    kept.sort(key=lambda c: (c.estimate_bytes > capacity, -guesses[id(c)].tokens_per_s))
    chosen = _diverse(kept, compile_top)
    say(
        f"plan: {len(found)} layouts pass the trainer's checks, {len(kept)} may fit "
        f"{kind.hbm_gib:.0f} GiB; compiling the {len(chosen)} best guesses on {devices} "
        f"fake devices (cached in {cache_dir or default_cache_dir()})"
    )
    compiled = _compile(
        config_path, overrides, chosen, cfg, devices, hosts, cache_dir or default_cache_dir()
    )
    ranked = []
    for cand, results in zip(chosen, compiled):
        errors = [r["error"] for r in results if "error" in r]
        if errors:
            nothing = cost.Prediction(float("inf"), 0.0, {}, 0.0, 0.0)
            ranked.append(Ranked(cand, float("inf"), nothing, False, error=errors[0]))
            continue
        peak, coll = _extend(results, int(cfg.model.num_layers))
        pred = _predict(kind, cfg, spec, cand, coll, devices)
        ranked.append(Ranked(cand, peak, pred, peak <= capacity))
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
                why += " (more compute: remat, bubble or small matmuls)"
            r.reason = f"slower by {slower:.0%}{why}"
