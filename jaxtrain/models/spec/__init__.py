"""A model's hyperparameters (`hyperparameters.ModelSpec`) and what follows from them before any
model code runs: the range of each number (`ranges`), the checks between them (`checks`),
parameter counts and FLOPs, and the per-layer patterns.
"""

from jaxtrain._moved import forward_old_names

__getattr__ = forward_old_names(__name__)
