"""Settings of a run: loading `.py` configs with overrides and reading back the config a run
saved (`loader`), and every check made before anything is built: the range of each number
(`ranges`), and model, batch and sequence against the mesh (`mesh_check`).
"""

from jaxtrain._moved import forward_old_names

__getattr__ = forward_old_names(__name__)
