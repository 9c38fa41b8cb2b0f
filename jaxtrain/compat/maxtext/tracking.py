"""MaxText's profiler and Weights & Biases keys -> jaxtrain's `train.profile_*`, `metrics.wandb_*`.

MaxText traces `profiler_steps` steps after skipping `skip_first_n_steps_for_profiler` when
`profiler` is "xplane" (a JAX profiler trace, what jaxtrain writes); its steps count from 0,
jaxtrain's from 1. "nsys" (an Nsight capture) has no counterpart. With `enable_wandb` MaxText
logs to the wandb project `wandb_project_name`, the run named `wandb_run_name`.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport, is_off

SKIP, STEPS = "skip_first_n_steps_for_profiler", "profiler_steps"


def map_profiler(r: KeyReport, s: dict[str, Any]) -> None:
    """profiler, skip_first_n_steps_for_profiler and profiler_steps."""
    kind = r.get("profiler")
    if is_off(kind):
        return
    if kind != "xplane":
        r.unsupported(
            "profiler",
            f"{kind!r}: only 'xplane' (a JAX profiler trace) is captured",
            "train.profile_start",
        )
        return
    skip, steps = int(r.get(SKIP, 1)), int(r.get(STEPS, 5))
    s["train.profile_start"], s["train.profile_steps"] = skip + 1, steps
    r.mapped("profiler", "train.profile_start, train.profile_steps", "a trace in <run dir>/profile")
    if r.has(SKIP):
        r.mapped(SKIP, "train.profile_start", f"{skip} + 1: jaxtrain counts steps from 1")
    if r.has(STEPS):
        r.mapped(STEPS, "train.profile_steps")


def map_wandb(r: KeyReport, s: dict[str, Any]) -> None:
    """enable_wandb, wandb_project_name and wandb_run_name."""
    if is_off(r.get("enable_wandb")):
        return
    s["metrics.wandb_project"] = str(r.get("wandb_project_name") or "maxtext")
    r.mapped("enable_wandb", "metrics.wandb_project")
    if r.has("wandb_project_name"):
        r.mapped("wandb_project_name", "metrics.wandb_project")
    if not is_off(r.get("wandb_run_name")):
        s["metrics.wandb_name"] = str(r.get("wandb_run_name"))
        r.mapped("wandb_run_name", "metrics.wandb_name")
