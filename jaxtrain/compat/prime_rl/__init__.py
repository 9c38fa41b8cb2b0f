"""prime-rl pretraining TOMLs (`mode = "pretrain"`) -> jaxtrain settings."""

from jaxtrain._moved import forward_old_names

__getattr__ = forward_old_names(__name__)
