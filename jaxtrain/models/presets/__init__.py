"""Named architectures with their published hyperparameters (`registry`), what each family
shares (`families`), and tiny debug sizes (`debug`, `ssm`).
"""

from jaxtrain._moved import forward_old_names

__getattr__ = forward_old_names(__name__)
