"""What every adapter shares about architectures: the families the model zoo builds, and the
one refusal for a file whose architecture it cannot build.

A foreign file names its architecture its own way (MaxText's `decoder_block`, TorchTitan's
`[model] name`, Megatron's `model_type` and layer switches). When the zoo has no such family the
file is refused by that name: it is never mapped onto another family or onto jaxtrain's default
model, so `config` prints no parameter count for it.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.models.presets.registry import family_names

# The zoo's families (ModelSpec.family): those with a preset, so a new family needs no change
# here.
ZOO_FAMILIES = family_names()


def unbuildable(source: str, key: str, value: Any, what: str) -> ConfigError:
    """The error for a file whose `key=value` names an architecture the zoo cannot build;
    `what` says what that architecture is (the part the zoo lacks)."""
    return ConfigError(
        f"{source}: {key}={value!r} is {what}, an architecture jaxtrain's model zoo cannot "
        "build; the file is refused rather than trained as another model. The zoo builds "
        f"{', '.join(ZOO_FAMILIES)} (docs/migrating.md: what each stack's files map to)."
    )


def moe_family(model: dict[str, Any]) -> str:
    """The zoo family a mixture of experts without a named family is: DeepSeek's when its
    attention is latent (V3: sigmoid scores) or its routing is DeepSeek's (shared experts or
    sigmoid scores), Qwen3-MoE's with q/k norms, else Mixtral's."""
    if (
        model.get("kv_lora_rank")
        or model.get("moe_score") == "sigmoid"
        or model.get("moe_shared_experts")
    ):
        return "deepseek_v3" if model.get("moe_score") == "sigmoid" else "deepseek_v2"
    return "qwen3_moe" if model.get("qk_norm") else "mixtral"
