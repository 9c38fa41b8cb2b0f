"""prime-rl's `[wandb]` table -> jaxtrain's `metrics.wandb_*`.

As in prime-rl, the table's presence turns Weights & Biases on: `project` (prime-rl's default
"prime-rl"), `name` the run's name, `offline = true` wandb's offline mode; `entity`, `tags` and
`group` where a file has them. Anything else under `[wandb]` (what extras to log) stays ignored.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport

DEFAULT_PROJECT = "prime-rl"
KEYS = {
    "wandb.name": "metrics.wandb_name",
    "wandb.entity": "metrics.wandb_entity",
    "wandb.group": "metrics.wandb_group",
}


def map_wandb(r: KeyReport, s: dict[str, Any], doc: dict[str, Any]) -> None:
    """The [wandb] table, when the file has one."""
    if not isinstance(doc.get("wandb"), dict):
        return
    s["metrics.wandb_project"] = str(r.get("wandb.project") or DEFAULT_PROJECT)
    if r.has("wandb.project"):
        r.mapped("wandb.project", "metrics.wandb_project")
    else:
        r.note(f"[wandb] without a project: logs to wandb project {DEFAULT_PROJECT!r}")
    for key, target in KEYS.items():
        if r.get(key):
            s[target] = str(r.get(key))
            r.mapped(key, target)
    if r.has("wandb.offline"):
        s["metrics.wandb_mode"] = "offline" if r.get("wandb.offline") else ""
        r.mapped("wandb.offline", "metrics.wandb_mode")
    tags = r.get("wandb.tags")
    if tags:
        s["metrics.wandb_tags"] = ",".join(map(str, tags)) if isinstance(tags, list) else str(tags)
        r.mapped("wandb.tags", "metrics.wandb_tags")
