"""Megatron's straggler detector keys -> jaxtrain's `train.straggler_*`.

Megatron (`log_straggler`) times each rank's work and, every `log_interval` iterations, prints
the slowest and fastest ranks; jaxtrain compares its hosts every `train.straggler_every` steps
and names one that stays behind (`jaxtrain.train.straggler_watch`). `log_straggler: false`
(Primus' default) turns the comparison off, `true` runs it at the file's logging interval. The
detector's own controls (a port to toggle it at run time, how many ranks to print, starting it
disabled) have no counterpart.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.report import KeyReport, is_off

_CONTROLS = ("straggler_ctrlr_port", "straggler_minmax_count", "disable_straggler_on_startup")


def map_stragglers(r: KeyReport, s: dict[str, Any]) -> None:
    """log_straggler, and the detector's controls as ignored."""
    if r.has("log_straggler"):
        if is_off(r.get("log_straggler")):
            s["train.straggler_every"] = 0
            r.mapped("log_straggler", "train.straggler_every=0 (no host comparison)")
        else:
            every = int(r.get("log_interval") or 100)
            s["train.straggler_every"] = every
            r.mapped("log_straggler", f"train.straggler_every={every} (log_interval)")
    for key in _CONTROLS:
        if r.has(key):
            r.ignored(
                key,
                "a control of Megatron's detector; jaxtrain names a host behind at "
                "train.straggler_patience checks in a row",
            )
