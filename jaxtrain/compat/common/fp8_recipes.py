"""The jaxtrain fp8 recipe every stack's fp8 keys become: `model.quantization` & co.

jaxtrain (`jaxtrain.models.layers.fp8`) computes per-tensor scaled fp8 matmuls with float32
accumulation, scaled from an amax history ("delayed") or from this step's amax ("current"),
e4m3 forward and e5m2 gradients ("hybrid") or e4m3 for both. Each stack's `fp8.py` reads that
stack's own keys and sets one such recipe here.
"""

from __future__ import annotations

from typing import Any

NO_FP8_ATTENTION = (
    "fp8 attention (scores and softmax inputs) is not implemented; attention stays in model.dtype"
)


def set_fp8_recipe(
    s: dict[str, Any],
    recipe: str,
    history: int = 1024,
    algo: str = "max",
    margin: int = 0,
    fmt: str = "hybrid",
) -> None:
    """Sets the settings `s` of per-tensor scaled fp8 with `recipe` ("delayed" or "current")."""
    s.update(
        {
            "model.quantization": "fp8",
            "model.fp8_recipe": recipe,
            "model.fp8_amax_history": history,
            "model.fp8_amax_algo": algo,
            "model.fp8_margin": margin,
            "model.fp8_format": fmt,
        }
    )
