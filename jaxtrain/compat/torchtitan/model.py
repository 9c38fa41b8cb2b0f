"""TorchTitan's `[model] name` + `flavor` -> jaxtrain's `model.*`, from the flavours of
torchtitan/models/*/__init__.py at v0.2.2 (the TorchTitan Primus pins).

Dense flavours are the zoo's presets (TorchTitan's dims equal the published models'). Mixture
-of-experts flavours are written below in TorchTitan's own terms and converted with its
semantics: the router scores by softmax or sigmoid, renormalises the kept scores only with
`route_norm`, multiplies them by `route_scale`, limits routing to `num_limited_groups` groups
ranked by their best two scores, and (load_balance_coeff, default 1e-3) moves an expert bias
used for the top-k choice only; `score_before_experts` weights the expert input. There is no
balancing loss. DeepSeek's YaRN (and its softmax mscale) applies only when training.seq_len
exceeds the original 4096, as TorchTitan precomputes it. Block-causal flavours (flex / varlen
attention) keep each document's attention to itself: jaxtrain's data.reset_attention_mask.
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.architectures import unbuildable
from jaxtrain.compat.common.report import KeyReport
from jaxtrain.errors import ConfigError
from jaxtrain.models.presets.registry import model_config

# Llama 3 flavours always apply the llama3 RoPE scaling (factor 8, original length 8192), i.e.
# the Llama 3.1 architecture.
_LLAMA3_SCALING = dict(
    rope_scaling="llama3",
    rope_factor=8.0,
    rope_low_freq_factor=1.0,
    rope_high_freq_factor=4.0,
    rope_original_max_len=8192,
)
_LLAMA3_DEBUG = (
    "llama-debug",
    dict(
        _LLAMA3_SCALING,
        family="llama",
        vocab_size=2048,
        hidden_size=256,
        num_layers=6,
        num_heads=16,
        num_kv_heads=16,
        head_dim=16,
        intermediate_size=768,
        rope_theta=500000.0,
        norm_eps=1e-5,
    ),
)
# (name, flavor) -> (jaxtrain preset, field overrides): the dense flavours.
FLAVORS: dict[tuple[str, str], tuple[str, dict[str, Any]]] = {
    ("llama3", "debugmodel"): _LLAMA3_DEBUG,
    ("llama3", "debugmodel_flex_attn"): _LLAMA3_DEBUG,
    ("llama3", "debugmodel_varlen_attn"): _LLAMA3_DEBUG,
    ("llama3", "8B"): ("llama3.1-8b", {}),
    ("llama3", "8B_flex"): ("llama3.1-8b", {}),
    ("llama3", "8B_varlen"): ("llama3.1-8b", {}),
    ("llama3", "70B"): ("llama3.1-70b", {}),
    ("llama3", "405B"): ("llama3.1-405b", {}),
    ("qwen3", "debugmodel"): (
        "qwen3-debug",
        dict(
            vocab_size=2048,
            hidden_size=256,
            num_layers=8,
            num_heads=16,
            num_kv_heads=8,
            head_dim=128,
            intermediate_size=3072,
            rope_theta=1000000.0,
            norm_eps=1e-6,
            tie_embeddings=True,
        ),
    ),
    ("qwen3", "0.6B"): ("qwen3-0.6b", {}),
    ("qwen3", "1.7B"): ("qwen3-1.7b", {}),
    ("qwen3", "4B"): ("qwen3-4b", {}),
    ("qwen3", "8B"): ("qwen3-8b", {}),
    ("qwen3", "14B"): ("qwen3-14b", {}),
    ("qwen3", "32B"): ("qwen3-32b", {}),
}
BLOCK_CAUSAL = {
    ("llama3", "debugmodel_flex_attn"),
    ("llama3", "debugmodel_varlen_attn"),
    ("llama3", "8B_flex"),
    ("llama3", "8B_varlen"),
    ("deepseek_v3", "debugmodel_flex_attn"),
    ("deepseek_v3", "16B"),
    ("deepseek_v3", "236B"),
    ("deepseek_v3", "671B"),
    ("llama4", "debugmodel_irope"),
    ("llama4", "17bx16e_irope"),
    ("llama4", "17bx128e_irope"),
}

# The mixture-of-experts flavours in TorchTitan's terms (MoEArgs and the model args).
_DSV3_DEBUG = dict(
    vocab=2048,
    dim=256,
    inter=1024,
    moe_inter=256,
    layers=6,
    dense=1,
    heads=16,
    experts=8,
    shared=2,
    top_k=3,
    score="softmax",
    norm=False,
    q_lora=0,
    mscale=0.70,
)
DEEPSEEK_V3 = {
    "debugmodel": _DSV3_DEBUG,
    "debugmodel_flex_attn": _DSV3_DEBUG,
    "16B": dict(
        vocab=102400,
        dim=2048,
        inter=10944,
        moe_inter=1408,
        layers=27,
        dense=1,
        heads=16,
        experts=64,
        shared=2,
        top_k=6,
        score="softmax",
        norm=False,
        q_lora=0,
        mscale=0.70,
    ),
    "236B": dict(
        vocab=102400,
        dim=5120,
        inter=12288,
        moe_inter=1536,
        layers=60,
        dense=1,
        heads=128,
        experts=160,
        shared=2,
        top_k=6,
        groups=8,
        limited=3,
        score="softmax",
        norm=False,
        scale=16.0,
        q_lora=1536,
    ),
    "671B": dict(
        vocab=129280,
        dim=7168,
        inter=18432,
        moe_inter=2048,
        layers=61,
        dense=3,
        heads=128,
        experts=256,
        shared=1,
        top_k=8,
        groups=8,
        limited=4,
        score="sigmoid",
        norm=True,
        scale=2.5,
        q_lora=1536,
    ),
}
QWEN3_MOE = {
    "debugmodel_moe": dict(
        vocab=2048,
        dim=256,
        layers=8,
        heads=16,
        kv=8,
        hidden=3072,
        theta=1e6,
        moe_inter=768,
        experts=64,
    ),
    "30B-A3B": dict(
        vocab=151936,
        dim=2048,
        layers=48,
        heads=32,
        kv=4,
        hidden=6144,
        theta=1e6,
        moe_inter=768,
        experts=128,
    ),
    "235B-A22B": dict(
        vocab=151936,
        dim=4096,
        layers=94,
        heads=64,
        kv=4,
        hidden=12288,
        theta=5e6,
        moe_inter=1536,
        experts=128,
    ),
}
# Llama 4: dense and expert hidden sizes as TorchTitan derives them (4 dim x 2/3 x
# ffn_dim_multiplier, the experts' divided by top-k + shared, rounded up to multiple_of).
_SCOUT_SCALING = dict(
    rope_scaling="llama3",
    rope_factor=16.0,
    rope_low_freq_factor=1.0,
    rope_high_freq_factor=1.0,
    rope_original_max_len=8192,
)
_L4_DEBUG = dict(
    dim=256,
    layers=6,
    heads=16,
    kv=16,
    vocab=2048,
    hidden=768,
    moe_hidden=512,
    experts=8,
    step=2,
    rope=_SCOUT_SCALING,
)
_L4_16E = dict(
    dim=5120,
    layers=48,
    heads=40,
    kv=8,
    vocab=202048,
    hidden=16384,
    moe_hidden=8192,
    experts=16,
    step=1,
    rope=_SCOUT_SCALING,
)
_L4_128E = dict(_L4_16E, experts=128, step=2, rope={})
LLAMA4 = {
    "debugmodel": _L4_DEBUG,
    "17bx16e": _L4_16E,
    "17bx128e": _L4_128E,
    "debugmodel_irope": dict(_L4_DEBUG, nope=4, chunk=256),
    "17bx16e_irope": dict(_L4_16E, nope=4, chunk=8192),
    "17bx128e_irope": dict(_L4_128E, nope=4, chunk=8192),
}
GPT_OSS = {
    "debugmodel": ("gpt-oss-20b", dict(hidden_size=256, num_layers=4, num_experts=8)),
    "20b": ("gpt-oss-20b", {}),
    "120b": ("gpt-oss-120b", {}),
}
# TorchTitan has no balancing loss; its expert bias (load_balance_coeff 1e-3) balances.
_TITAN_MOE = dict(moe_aux_loss_coef=0.0, moe_score_bias=True, moe_bias_update_rate=1e-3)
# Models TorchTitan trains whose architecture the zoo cannot build.
UNBUILDABLE = {
    "flux": "Flux, a diffusion transformer for images",
    "vlm": "a vision-language model (an image encoder feeding the decoder)",
}


def _deepseek(a: dict[str, Any], seq_len: int) -> dict[str, Any]:
    sigmoid = a["score"] == "sigmoid"
    fields: dict[str, Any] = dict(
        family="deepseek_v3" if sigmoid else "deepseek_v2",
        vocab_size=a["vocab"],
        hidden_size=a["dim"],
        intermediate_size=a["inter"],
        moe_intermediate_size=a["moe_inter"],
        num_layers=a["layers"],
        num_dense_layers=a["dense"],
        num_heads=a["heads"],
        num_kv_heads=a["heads"],
        head_dim=64,
        norm_eps=1e-5,
        q_lora_rank=a["q_lora"],
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
        rope_theta=10000.0,
        rope_interleave=True,
        num_experts=a["experts"],
        num_experts_per_tok=a["top_k"],
        moe_shared_experts=a["shared"],
        moe_score="sigmoid" if sigmoid else "softmax_topk",
        moe_norm_topk=a["norm"],
        moe_routed_scaling=a.get("scale", 1.0),
        **_TITAN_MOE,
    )
    if a.get("groups"):
        fields.update(
            moe_topk_method="noaux_tc", moe_n_group=a["groups"], moe_topk_group=a["limited"]
        )
    if seq_len > 4096:  # TorchTitan's YaRN and softmax mscale: only past the original 4096
        mscale = a.get("mscale", 1.0)
        fields.update(
            rope_scaling="yarn",
            rope_factor=40.0,
            rope_original_max_len=4096,
            rope_beta_fast=32.0,
            rope_beta_slow=1.0,
            rope_mscale=mscale,
            rope_mscale_all_dim=mscale,
            rope_truncate=True,
        )
    else:
        fields.update(rope_scaling="none", rope_factor=1.0)
    return fields


def _qwen3_moe(a: dict[str, Any]) -> dict[str, Any]:
    return dict(
        family="qwen3_moe",
        vocab_size=a["vocab"],
        hidden_size=a["dim"],
        num_layers=a["layers"],
        num_heads=a["heads"],
        num_kv_heads=a["kv"],
        head_dim=128,
        intermediate_size=a["hidden"],
        rope_theta=a["theta"],
        norm_eps=1e-6,
        qk_norm=True,
        num_experts=a["experts"],
        num_experts_per_tok=8,
        moe_intermediate_size=a["moe_inter"],
        moe_score="softmax_topk",
        moe_norm_topk=True,
        **_TITAN_MOE,
    )


def _llama4(a: dict[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = dict(
        family="llama4",
        vocab_size=a["vocab"],
        hidden_size=a["dim"],
        num_layers=a["layers"],
        num_heads=a["heads"],
        num_kv_heads=a["kv"],
        head_dim=a["dim"] // a["heads"],
        intermediate_size=a["hidden"],
        moe_intermediate_size=a["moe_hidden"],
        norm_eps=1e-5,
        rope_theta=500000.0,
        rope_interleave=True,
        num_experts=a["experts"],
        num_experts_per_tok=1,
        moe_layer_step=a["step"],
        moe_shared_experts=1,
        moe_score="sigmoid",
        moe_norm_topk=False,
        moe_weight_inputs=True,
        **_TITAN_MOE,
    )
    fields.update(a["rope"] or dict(rope_scaling="none", rope_factor=1.0))
    if a.get("nope"):
        fields.update(global_layer_step=a["nope"], nope_global=True, attention_chunk=a["chunk"])
    return fields


def _gpt_oss(preset: str, overrides: dict[str, Any]) -> dict[str, Any]:
    return {**model_config(preset), **overrides, **_TITAN_MOE}


def _fields(name: str, flavor: str, seq_len: int) -> tuple[dict[str, Any], str] | None:
    """(model fields, preset or "") of a known flavour, else None."""
    if (name, flavor) in FLAVORS:
        preset, overrides = FLAVORS[(name, flavor)]
        return dict(model_config(preset, **overrides)), "" if overrides else preset
    tables = {
        "deepseek_v3": (DEEPSEEK_V3, lambda a: _deepseek(a, seq_len)),
        "llama4": (LLAMA4, _llama4),
        "gpt_oss": (GPT_OSS, lambda a: _gpt_oss(*a)),
    }
    if name == "qwen3" and flavor in QWEN3_MOE:
        return _qwen3_moe(QWEN3_MOE[flavor]), ""
    if name in tables and flavor in tables[name][0]:
        table, convert = tables[name]
        return convert(table[flavor]), ""
    return None


def known_flavors(name: str) -> list[str]:
    """Every flavour of a TorchTitan model name jaxtrain maps."""
    flavors = {f for n, f in FLAVORS if n == name}
    flavors |= set(
        {"deepseek_v3": DEEPSEEK_V3, "llama4": LLAMA4, "gpt_oss": GPT_OSS, "qwen3": QWEN3_MOE}.get(
            name, {}
        )
    )
    return sorted(flavors)


def model_settings(r: KeyReport, seq_len: int) -> dict[str, Any]:
    """model.* (and the block-causal data.reset_attention_mask) settings for model.name /
    model.flavor; refuses architectures the zoo cannot build, ConfigError for unknown names."""
    name, flavor = str(r.get("model.name", "llama3")), str(r.get("model.flavor", "debugmodel"))
    base = name.rsplit(".", 1)[-1]  # experiments register e.g. "simple_fsdp.llama3"
    if base in UNBUILDABLE:
        raise unbuildable(r.source, "model.name", name, UNBUILDABLE[base])
    found = _fields(base, flavor, seq_len)
    if found is None:
        names = sorted({n for n, _ in FLAVORS} | {"deepseek_v3", "llama4", "gpt_oss"})
        if base not in names:
            raise ConfigError(
                f"{r.source}: model.name={name!r} is not a TorchTitan model "
                f"jaxtrain knows; known: {', '.join(names)}."
            )
        raise ConfigError(
            f"{r.source}: model.flavor={flavor!r} is not a {name} flavour "
            f"jaxtrain knows; known: {', '.join(known_flavors(base))}."
        )
    fields, preset = found
    # TorchTitan sets the model's max_seq_len to training.seq_len (update_from_config).
    fields["max_seq_len"] = seq_len
    r.mapped(
        "model.name",
        "model.*",
        f"{name} {flavor}: family {fields['family']}"
        + (f" = jaxtrain preset {preset}" if preset else ""),
    )
    r.mapped("model.flavor", "model.*")
    settings = {f"model.{k}": v for k, v in fields.items() if k != "preset"}
    settings["model.preset"] = preset
    if (base, flavor) in BLOCK_CAUSAL:
        settings["data.reset_attention_mask"] = True
        r.mapped(
            "model.flavor",
            "model.*, data.reset_attention_mask",
            "block-causal attention: each document attends only to itself",
        )
    if base == "llama4" and fields.get("nope_global"):
        r.unsupported(
            "model.flavor",
            f"{flavor}: TorchTitan's NoPE blocks are 0, 4, 8, ...; "
            "jaxtrain's global blocks are 3, 7, 11, ... (as in Hugging Face's Llama 4)",
        )
    return settings
