"""Checkpoints of a run: Orbax saving and restoring (`manager`, `items`), reading arrays (`read`),
value checksums (`checksums`), which step a run starts from (`resume`), reading a finished run
back (`saved_run`) and starting from other weights (`init_from`).
"""

from jaxtrain._moved import forward_old_names

__getattr__ = forward_old_names(__name__)
