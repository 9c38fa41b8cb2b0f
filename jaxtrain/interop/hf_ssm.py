"""Hugging Face configs and tensor names of the state-space families: Mamba-1
(`MambaForCausalLM`), Mamba-2 (`Mamba2ForCausalLM`) and Nemotron-H hybrids
(`NemotronHForCausalLM`, Megatron's hybrid pattern as `hybrid_override_pattern`).

jaxtrain holds these models' sublayers in `blocks.s{j}` stacks (`jaxtrain.models.assembly.hybrid`):
checkpoint layer i is slot i // period of stack i % period. The tensor table is returned as
plain rows for `jaxtrain.interop.hf_tensor_maps.tensor_maps` to wrap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.models.spec.block_pattern import (
    NO_ATTENTION,
    conv_channels,
    period,
    ssm_dt_rank,
    ssm_heads,
    ssm_inner,
)
from jaxtrain.models.spec.hyperparameters import ModelSpec

# Architecture -> (spec family, transformers model_type).
SSM_ARCHITECTURES = {
    "MambaForCausalLM": ("mamba", "mamba"),
    "Mamba2ForCausalLM": ("mamba2", "mamba2"),
    "NemotronHForCausalLM": ("nemotron_h", "nemotron_h"),
}
SSM_FAMILIES = tuple(family for family, _ in SSM_ARCHITECTURES.values())
# (module prefix of the blocks, embedding name, final norm name) per family.
_NAMES = {
    "mamba": ("backbone.", "embeddings", "norm_f"),
    "mamba2": ("backbone.", "embeddings", "norm_f"),
    "nemotron_h": ("backbone.", "embeddings", "norm_f"),
}
_HF_KIND_CHAR = {
    "mamba": "M",
    "linear_attention": "M",
    "attention": "*",
    "full_attention": "*",
    "mlp": "-",
    "moe": "E",
}

# (jaxtrain path, HF name, jaxtrain shape, HF shape, in_rank, layer ids, other TensorMap
# fields: `experts` for per-expert tensors, `dtype` for a pinned stored dtype)
Row = tuple[
    tuple[str, ...], str, tuple[int, ...], tuple[int, ...], int | None, tuple[int, ...], dict
]


def kernel_row(path, name, ins, outs, ids, **extra) -> Row:
    """The row of an nn.Linear weight: jaxtrain [*ins, *outs], HF [prod(outs), prod(ins)]."""
    return (path, name, (*ins, *outs), (math.prod(outs), math.prod(ins)), len(ins), ids, extra)


def vector_row(path, name, shape, ids, hf_shape=None, **extra) -> Row:
    """The row of a tensor kept as it is (flattened on the HF side unless `hf_shape`)."""
    return (path, name, shape, hf_shape or (math.prod(shape),), None, ids, extra)


def _mamba_rows(spec: ModelSpec, at: tuple[str, ...], lay: str, ids) -> list[Row]:
    d, di, n, k = spec.hidden_size, ssm_inner(spec), spec.ssm_state_size, spec.ssm_conv_kernel
    c = conv_channels(spec)
    m = (*at, "mixer")
    if spec.mamba_version == 1:
        r = ssm_dt_rank(spec)
        proj = 2 * di
    else:
        h, g = ssm_heads(spec), spec.ssm_n_groups
        proj = 2 * di + 2 * g * n + h
    rows = [kernel_row((*m, "in_proj", "kernel"), f"{lay}mixer.in_proj.weight", (d,), (proj,), ids)]
    if spec.ssm_proj_bias:
        rows.append(vector_row((*m, "in_proj", "bias"), f"{lay}mixer.in_proj.bias", (proj,), ids))
    rows.append(
        vector_row((*m, "conv_weight"), f"{lay}mixer.conv1d.weight", (c, k), ids, (c, 1, k))
    )
    if spec.ssm_conv_bias:
        rows.append(vector_row((*m, "conv_bias"), f"{lay}mixer.conv1d.bias", (c,), ids))
    if spec.mamba_version == 1:
        rows += [
            kernel_row(
                (*m, "x_proj", "kernel"), f"{lay}mixer.x_proj.weight", (di,), (r + 2 * n,), ids
            ),
            kernel_row((*m, "dt_proj", "kernel"), f"{lay}mixer.dt_proj.weight", (r,), (di,), ids),
            vector_row((*m, "dt_proj", "bias"), f"{lay}mixer.dt_proj.bias", (di,), ids),
            vector_row((*m, "a_log"), f"{lay}mixer.A_log", (di, n), ids, (di, n)),
            vector_row((*m, "d"), f"{lay}mixer.D", (di,), ids),
        ]
    else:
        rows += [
            vector_row((*m, "dt_bias"), f"{lay}mixer.dt_bias", (h,), ids),
            vector_row((*m, "a_log"), f"{lay}mixer.A_log", (h,), ids),
            vector_row((*m, "d"), f"{lay}mixer.D", (h,), ids),
            vector_row((*m, "norm_scale"), f"{lay}mixer.norm.weight", (di,), ids),
        ]
    rows.append(
        kernel_row((*m, "out_proj", "kernel"), f"{lay}mixer.out_proj.weight", (di,), (d,), ids)
    )
    if spec.ssm_proj_bias:
        rows.append(vector_row((*m, "out_proj", "bias"), f"{lay}mixer.out_proj.bias", (d,), ids))
    return rows


def _attention_rows(spec: ModelSpec, at, lay, ids) -> list[Row]:
    d, n, k, h = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim
    rows = [
        kernel_row(
            (*at, "mixer", f"{p}_proj", "kernel"),
            f"{lay}mixer.{p}_proj.weight",
            (d,),
            (heads, h),
            ids,
        )
        for p, heads in (("q", n), ("k", k), ("v", k))
    ]
    return rows + [
        kernel_row(
            (*at, "mixer", "o_proj", "kernel"), f"{lay}mixer.o_proj.weight", (n, h), (d,), ids
        )
    ]


def _mlp_rows(spec: ModelSpec, at, lay, ids) -> list[Row]:
    d, f = spec.hidden_size, spec.intermediate_size
    return [
        kernel_row(
            (*at, "mixer", "up_proj", "kernel"), f"{lay}mixer.up_proj.weight", (d,), (f,), ids
        ),
        kernel_row(
            (*at, "mixer", "down_proj", "kernel"), f"{lay}mixer.down_proj.weight", (f,), (d,), ids
        ),
    ]


def _moe_rows(spec: ModelSpec, at, lay, ids) -> list[Row]:
    """Nemotron-H's mixture of experts: a float32 sigmoid router with its score-correction
    bias, relu2 experts stored one tensor per expert (as `save_pretrained` writes them), and
    one relu2 shared expert."""
    d, e, f, fs = (
        spec.hidden_size,
        spec.num_experts,
        spec.moe_intermediate_size,
        spec.shared_expert_size(),
    )
    m, hf = (*at, "mixer"), f"{lay}mixer."
    rows = [
        kernel_row((*m, "router", "kernel"), f"{hf}gate.weight", (d,), (e,), ids),
        vector_row(
            (*m, "score_bias"), f"{hf}gate.e_score_correction_bias", (e,), ids, dtype="float32"
        ),
        kernel_row(
            (*m, "up_proj"), f"{hf}experts.{{e}}.up_proj.weight", (d,), (f,), ids, experts=e
        ),
        kernel_row(
            (*m, "down_proj"), f"{hf}experts.{{e}}.down_proj.weight", (f,), (d,), ids, experts=e
        ),
    ]
    if fs:
        rows += [
            kernel_row(
                (*m, "shared", "up_proj", "kernel"),
                f"{hf}shared_experts.up_proj.weight",
                (d,),
                (fs,),
                ids,
            ),
            kernel_row(
                (*m, "shared", "down_proj", "kernel"),
                f"{hf}shared_experts.down_proj.weight",
                (fs,),
                (d,),
                ids,
            ),
        ]
    return rows


_ROWS = {"M": _mamba_rows, "*": _attention_rows, "-": _mlp_rows, "E": _moe_rows}


def ssm_tensor_rows(spec: ModelSpec) -> list[Row]:
    """The parameter <-> tensor table of a Mamba / Mamba-2 / Nemotron-H spec."""
    check_ssm_expressible(spec)
    prefix, embed, norm = _NAMES[spec.family]
    d, v = spec.hidden_size, spec.vocab_size
    p = period(spec.block_pattern)
    rows: list[Row] = [
        (("embed", "embedding"), f"{prefix}{embed}.weight", (v, d), (v, d), None, (), {})
    ]
    lay = f"{prefix}layers.{{i}}."
    for j, ch in enumerate(spec.block_pattern[:p]):
        ids = tuple(range(j, spec.num_layers, p))
        at = ("blocks", f"s{j}")
        rows.append(vector_row((*at, "norm", "scale"), f"{lay}norm.weight", (d,), ids))
        rows += _ROWS[ch](spec, at, lay, ids)
    rows.append(vector_row(("final_norm", "scale"), f"{prefix}{norm}.weight", (d,), ()))
    if not spec.tie_embeddings:
        rows.append(kernel_row(("lm_head", "kernel"), "lm_head.weight", (d,), (v,), ()))
    return rows


def check_ssm_expressible(spec: ModelSpec) -> None:
    """ConfigError naming what the spec's transformers class cannot hold."""
    arch = {f: a for a, (f, _) in SSM_ARCHITECTURES.items()}[spec.family]
    allowed = "M" if spec.family in ("mamba", "mamba2") else "M*-E"
    bad = sorted(set(spec.block_pattern) - set(allowed))
    needs = {"mamba_version": 1 if spec.family == "mamba" else 2}
    for key, value in needs.items():
        if getattr(spec, key) != value:
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} cannot be written as {arch}; "
                f"it needs model.{key} = {value}."
            )
    if not spec.block_pattern or bad:
        raise ConfigError(
            f"model.block_pattern={spec.block_pattern!r} cannot be written as "
            f"{arch}, which holds only {' '.join(allowed)} sublayers."
        )
    if (
        spec.family != "mamba"
        and ssm_heads(spec) * spec.ssm_head_dim != (spec.ssm_expand * spec.hidden_size)
        and spec.family == "mamba2"
    ):
        raise ConfigError(
            f"model.ssm_num_heads x ssm_head_dim = "
            f"{ssm_heads(spec) * spec.ssm_head_dim} must equal ssm_expand x "
            f"hidden_size = {spec.ssm_expand * spec.hidden_size} for {arch}."
        )
    attn = "*" in spec.block_pattern
    for key, bad_value in (
        ("kv_lora_rank", spec.mla and attn),
        ("qkv_bias", spec.qkv_bias),
        ("qk_norm", spec.qk_norm),
        ("use_rope", spec.use_rope and attn),
        ("mlp_activation", "-" in spec.block_pattern and spec.mlp_activation != "relu2"),
        ("attn_output_gate", spec.attn_output_gate),
        ("norm_zero_centered", spec.norm_zero_centered),
        ("moe_shared_gate", spec.moe_shared_gate),
    ):
        if bad_value:
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} cannot be written as {arch} "
                "(no-RoPE grouped-query attention, relu2 MLP); set it to the "
                "default that class has."
            )
    if "E" in spec.block_pattern:
        _check_nemotron_moe(spec, arch)


# What Nemotron-H's mixture of experts is: the spec values its transformers class implies.
_NEMOTRON_MOE = dict(
    moe_activation="relu2",
    moe_score="sigmoid",
    moe_score_bias=True,
    moe_topk_method="noaux_tc",
    moe_router_bias=False,
    moe_expert_bias=False,
    moe_weight_inputs=False,
    moe_residual_mlp=False,
    moe_capacity_factor=0.0,
    router_logit_softcap=0.0,
)


def _check_nemotron_moe(spec: ModelSpec, arch: str) -> None:
    for key, value in _NEMOTRON_MOE.items():
        if getattr(spec, key) != value:
            raise ConfigError(
                f"model.{key}={getattr(spec, key)!r} cannot be written as {arch}, whose "
                f"experts need model.{key}={value!r} (relu2 experts, a sigmoid router "
                "with score-correction bias and grouped top-k)."
            )
    if spec.moe_shared_experts > 1:
        raise ConfigError(
            f"model.moe_shared_experts={spec.moe_shared_experts} cannot be written as {arch}, "
            "which has one shared expert; size it with model.moe_shared_intermediate_size."
        )


def _limit(value: Any) -> float:
    """An upper time-step clamp as the spec holds it: 0 for none (infinity, which
    transformers writes as {"__float__": "Infinity"})."""
    if isinstance(value, Mapping):
        value = value.get("__float__", "inf")
    value = float(value)
    return 0.0 if math.isinf(value) else value


def ssm_fields(cfg: Mapping[str, Any], family: str, where: str) -> dict[str, Any]:
    """ModelSpec fields from a Mamba / Mamba-2 / Nemotron-H `config.json`."""

    def need(key: str) -> Any:
        if key not in cfg:
            raise ConfigError(f"{where}: missing key {key!r} (needed for {family}).")
        return cfg[key]

    act = cfg.get("mamba_hidden_act" if family == "nemotron_h" else "hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ConfigError(f"{where}: hidden_act={act!r} is not supported (Mamba uses silu).")
    hidden = int(need("hidden_size"))
    limit = cfg.get("time_step_limit") or (0.0, float("inf"))
    fields: dict[str, Any] = dict(
        family=family,
        vocab_size=int(need("vocab_size")),
        hidden_size=hidden,
        ssm_state_size=int(
            cfg.get(
                "ssm_state_size" if family == "nemotron_h" else "state_size",
                128 if family != "mamba" else 16,
            )
        ),
        ssm_expand=int(cfg.get("expand", 2)),
        ssm_conv_kernel=int(cfg.get("conv_kernel", 4)),
        ssm_conv_bias=bool(cfg.get("use_conv_bias", True)),
        ssm_proj_bias=bool(cfg.get("use_bias", False)),
        ssm_dt_min=float(cfg.get("time_step_min", 0.001)),
        ssm_dt_max=float(cfg.get("time_step_max", 0.1)),
        ssm_dt_floor=float(cfg.get("time_step_floor", 1e-4)),
        ssm_dt_limit_min=float(limit[0]),
        ssm_dt_limit_max=_limit(limit[1]),
        norm_eps=float(cfg.get("layer_norm_epsilon", 1e-5)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", family == "mamba")),
        init_std=float(cfg.get("initializer_range", 0.02)),
        use_rope=False,
        **NO_ATTENTION,
    )
    if family == "mamba":
        n = int(need("num_hidden_layers"))
        rank = cfg.get("time_step_rank", "auto")
        fields.update(
            block_pattern="M" * n,
            num_layers=n,
            mamba_version=1,
            ssm_dt_rank=0 if rank == "auto" else int(rank),
        )
        if int(cfg.get("intermediate_size", fields["ssm_expand"] * hidden)) != (
            fields["ssm_expand"] * hidden
        ):
            raise ConfigError(f"{where}: intermediate_size must equal expand x hidden_size.")
        return fields
    fields.update(
        ssm_n_groups=int(cfg.get("n_groups", 8)),
        ssm_chunk_size=int(cfg.get("chunk_size", 256 if family == "mamba2" else 128)),
    )
    if family == "mamba2":
        n = int(need("num_hidden_layers"))
        fields.update(
            block_pattern="M" * n,
            num_layers=n,
            ssm_num_heads=int(need("num_heads")),
            ssm_head_dim=int(cfg.get("head_dim", 64)),
        )
        return fields
    pattern = cfg.get("hybrid_override_pattern")
    if not pattern:
        types = need("layers_block_type")
        unknown = sorted(set(types) - set(_HF_KIND_CHAR))
        if unknown:
            raise ConfigError(
                f"{where}: layers_block_type has {unknown}, not one of {sorted(_HF_KIND_CHAR)}."
            )
        pattern = "".join(_HF_KIND_CHAR[t] for t in types)
    if "E" in pattern:
        fields.update(_nemotron_moe_fields(cfg, where, need))
    if cfg.get("mlp_hidden_act", "relu2") != "relu2" or cfg.get("mlp_bias"):
        raise ConfigError(f"{where}: only mlp_hidden_act='relu2' without mlp_bias is supported.")
    if cfg.get("attention_bias"):
        raise ConfigError(f"{where}: attention_bias=true is not supported for Nemotron-H.")
    heads = int(need("num_attention_heads"))
    fields.update(
        block_pattern=pattern,
        num_layers=len(pattern),
        ssm_num_heads=int(need("mamba_num_heads")),
        ssm_head_dim=int(cfg.get("mamba_head_dim", 64)),
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        intermediate_size=int(need("intermediate_size")),
        mlp_activation="relu2",
        max_seq_len=int(cfg.get("max_position_embeddings", 4096)),
    )
    return fields


def _nemotron_moe_fields(cfg: Mapping[str, Any], where: str, need) -> dict[str, Any]:
    """The expert fields of a Nemotron-H config with E sublayers."""
    if cfg.get("moe_latent_size") is not None:
        raise ConfigError(
            f"{where}: moe_latent_size={cfg['moe_latent_size']} (experts on a latent "
            "projection of the hidden state) is not supported; only moe_latent_size=null."
        )
    shared = int(cfg.get("moe_shared_expert_intermediate_size", 7688))
    return dict(
        _NEMOTRON_MOE,
        num_experts=int(cfg.get("n_routed_experts", cfg.get("num_local_experts", 8))),
        num_experts_per_tok=int(cfg.get("num_experts_per_tok", 2)),
        moe_intermediate_size=int(cfg.get("moe_intermediate_size", 7688)),
        moe_shared_experts=1 if shared else 0,
        moe_shared_intermediate_size=shared,
        moe_n_group=int(cfg.get("n_group", 1)),
        moe_topk_group=int(cfg.get("topk_group", 1)),
        moe_norm_topk=bool(cfg.get("norm_topk_prob", True)),
        moe_routed_scaling=float(cfg.get("routed_scaling_factor", 1.0)),
    )


def ssm_config(spec: ModelSpec) -> dict[str, Any]:
    """The transformers config keys of a Mamba / Mamba-2 / Nemotron-H spec (architectures,
    model_type and dtype are added by the caller)."""
    check_ssm_expressible(spec)
    # json writes float("inf") as Infinity, which both json and transformers read back.
    limit = [spec.ssm_dt_limit_min, spec.ssm_dt_limit_max or float("inf")]
    cfg: dict[str, Any] = dict(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        expand=spec.ssm_expand,
        conv_kernel=spec.ssm_conv_kernel,
        use_conv_bias=spec.ssm_conv_bias,
        use_bias=spec.ssm_proj_bias,
        time_step_min=spec.ssm_dt_min,
        time_step_max=spec.ssm_dt_max,
        time_step_floor=spec.ssm_dt_floor,
        layer_norm_epsilon=spec.norm_eps,
        tie_word_embeddings=spec.tie_embeddings,
        initializer_range=spec.init_std,
        residual_in_fp32=True,
        use_cache=True,
    )
    if spec.family == "mamba":
        return dict(
            cfg,
            num_hidden_layers=spec.num_layers,
            state_size=spec.ssm_state_size,
            intermediate_size=ssm_inner(spec),
            time_step_rank=ssm_dt_rank(spec),
            hidden_act="silu",
        )
    cfg.update(n_groups=spec.ssm_n_groups, chunk_size=spec.ssm_chunk_size, time_step_limit=limit)
    if spec.family == "mamba2":
        return dict(
            cfg,
            num_hidden_layers=spec.num_layers,
            state_size=spec.ssm_state_size,
            num_heads=ssm_heads(spec),
            head_dim=spec.ssm_head_dim,
            hidden_act="silu",
        )
    if "E" in spec.block_pattern:
        cfg.update(
            n_routed_experts=spec.num_experts,
            num_experts_per_tok=spec.num_experts_per_tok,
            moe_intermediate_size=spec.moe_intermediate_size,
            moe_shared_expert_intermediate_size=spec.shared_expert_size(),
            n_group=spec.moe_n_group,
            topk_group=spec.moe_topk_group,
            norm_topk_prob=spec.moe_norm_topk,
            routed_scaling_factor=spec.moe_routed_scaling,
            moe_latent_size=None,
        )
    return dict(
        cfg,
        hybrid_override_pattern=spec.block_pattern,
        ssm_state_size=spec.ssm_state_size,
        mamba_num_heads=ssm_heads(spec),
        mamba_head_dim=spec.ssm_head_dim,
        mamba_hidden_act="silu",
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        intermediate_size=spec.intermediate_size,
        mlp_hidden_act="relu2",
        mlp_bias=False,
        attention_bias=False,
        max_position_embeddings=spec.max_seq_len,
        residual_in_fp32=False,
    )
