"""Bring your torch config: Primus (Megatron / TorchTitan / MaxText backends), native TorchTitan
TOML, MaxText YAML, prime-rl pretraining TOML and Hugging Face config.json files as jaxtrain
configs, each with a report of what became of every source key.

One folder per source stack (`megatron/`, `maxtext/`, `torchtitan/`, `primus/`, `prime_rl/`,
`huggingface/`), the pieces they share in `common/`, and `dispatch` that tells the formats apart.
"""

from jaxtrain.compat.dispatch import detect, is_foreign, load_config_file, load_foreign

__all__ = ["detect", "is_foreign", "load_config_file", "load_foreign"]
