"""Megatron's (and Primus') Weights & Biases keys -> jaxtrain's `metrics.wandb_*`.

Megatron logs to wandb when `wandb_project` is set; Primus adds `disable_wandb`, which turns it
off whatever the project. `wandb_exp_name` names the run, `wandb_save_dir` is the folder wandb
writes under, `wandb_entity` the team. Other `wandb_*` keys stay ignored as logging detail.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport, is_off

KEYS = {
    "wandb_exp_name": "metrics.wandb_name",
    "wandb_save_dir": "metrics.wandb_dir",
    "wandb_entity": "metrics.wandb_entity",
}


def map_tracking(r: KeyReport, s: dict[str, Any]) -> None:
    """wandb_project, wandb_exp_name, wandb_save_dir, wandb_entity and disable_wandb."""
    project = r.get("wandb_project")
    disabled = r.has("disable_wandb") and not is_off(r.get("disable_wandb"))
    if is_off(project):
        if r.has("disable_wandb"):
            r.ignored("disable_wandb", "no wandb_project: nothing is logged to wandb")
        return
    if disabled:
        r.ignored("wandb_project", "disable_wandb=true: nothing is logged to wandb")
        r.mapped("disable_wandb", "(metrics.wandb_project left empty)")
        for key in KEYS:
            if r.has(key):
                r.ignored(key, "disable_wandb=true")
        return
    s["metrics.wandb_project"] = str(project)
    r.mapped("wandb_project", "metrics.wandb_project")
    if r.has("disable_wandb"):
        r.mapped("disable_wandb", "(wandb on)")
    for key, target in KEYS.items():
        if not is_off(r.get(key)):
            s[target] = str(r.get(key))
            r.mapped(key, target)
