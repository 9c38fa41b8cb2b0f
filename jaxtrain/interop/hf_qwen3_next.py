"""Hugging Face configs and tensor names of Qwen3-Next (`Qwen3NextForCausalLM`) and Qwen3.5 text
models (`Qwen3_5ForCausalLM`, `Qwen3_5MoeForCausalLM`).

A checkpoint layer is two sublayers of a jaxtrain hybrid stack (`jaxtrain.models.assembly.hybrid`):
a token mixer (`G` Gated DeltaNet where `layer_types` says `linear_attention`, `*` gated
attention for `full_attention`) and a feed-forward (`E` experts, `-` a SwiGLU MLP). Checkpoint
layer i is sublayers 2i and 2i + 1; stack j of the pattern's period p holds sublayers j, j + p,
...

Both families fuse projections that jaxtrain keeps apart; the maps pick rows of the fused
tensor (`TensorMap.rows`): the attention's `q_proj` holds [query, gate] per head; Qwen3-Next's
`in_proj_qkvz` holds [q, k, v, z] and `in_proj_ba` [b, a] per key head (its value heads
grouped under their key head); Qwen3.5's `in_proj_qkv` and the one `conv1d` of both hold q, k
and v one after another. Rows are returned in `hf_ssm`'s row format for `hf_tensor_maps`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf_layout import PAIRED_FAMILIES, require_settings
from jaxtrain.interop.hf_rope_keys import rope_fields, rope_parameters
from jaxtrain.interop.hf_ssm import Row, kernel_row, vector_row
from jaxtrain.models.spec.block_pattern import period
from jaxtrain.models.spec.hyperparameters import ModelSpec

QWEN3_NEXT_ARCHITECTURES = {
    "Qwen3NextForCausalLM": ("qwen3_next", "qwen3_next"),
    "Qwen3_5ForCausalLM": ("qwen3_5", "qwen3_5_text"),
    "Qwen3_5MoeForCausalLM": ("qwen3_5_moe", "qwen3_5_moe_text"),
}
QWEN3_NEXT_FAMILIES = PAIRED_FAMILIES
_MIXER = {"linear_attention": "G", "full_attention": "*"}


def _need(cfg: Mapping[str, Any], key: str, where: str) -> Any:
    if cfg.get(key) is None:
        raise ConfigError(f"{where}: required key {key!r} is missing.")
    return cfg[key]


def _layer_types(cfg: Mapping[str, Any], layers: int, where: str) -> list[str]:
    """`layer_types`, or the full attention every `full_attention_interval` layers (4) that
    transformers fills in when it is absent."""
    interval = int(cfg.get("full_attention_interval") or 4)
    types = list(
        cfg.get("layer_types")
        or [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(layers)
        ]
    )
    if len(types) != layers:
        raise ConfigError(
            f"{where}: layer_types has {len(types)} entries for num_hidden_layers={layers}; "
            "give one per layer."
        )
    for kind in types:
        if kind not in _MIXER:
            raise ConfigError(
                f"{where}: layer_types entry {kind!r} is not one of {sorted(_MIXER)}."
            )
    return types


def _expert_layers(cfg: Mapping[str, Any], family: str, layers: int) -> list[bool]:
    """Which checkpoint layers hold experts: Qwen3-Next's rule (not in `mlp_only_layers`,
    index + 1 a multiple of `decoder_sparse_step`), every layer of Qwen3.5-MoE, none of Qwen3.5."""
    if family == "qwen3_5":
        return [False] * layers
    if family == "qwen3_5_moe":
        return [True] * layers
    step = int(cfg.get("decoder_sparse_step") or 1)
    only = set(cfg.get("mlp_only_layers") or [])
    experts = int(cfg.get("num_experts") or 0)
    return [experts > 0 and i not in only and (i + 1) % step == 0 for i in range(layers)]


def _rope(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The rotary fields and `partial_rotary_factor` (top level in transformers 4 files, inside
    `rope_parameters` in 5). Qwen3.5's multimodal sections (`mrope_section`) turn every
    section by the same text position, which is plain RoPE for text."""
    params = dict(cfg.get("rope_parameters") or {})
    factor = params.pop("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    plain = {k: v for k, v in cfg.items() if k != "partial_rotary_factor"}
    return {
        **rope_fields({**plain, "rope_parameters": params}, where),
        "partial_rotary_factor": float(factor),
    }


def qwen3_next_fields(cfg: Mapping[str, Any], family: str, where: str) -> dict[str, Any]:
    """ModelSpec fields from a Qwen3-Next or Qwen3.5 text `config.json`."""
    act = cfg.get("hidden_act", "silu")
    if act not in ("silu", "swish"):
        raise ConfigError(f"{where}: hidden_act={act!r} is not supported (SwiGLU needs silu).")
    if cfg.get("attention_bias"):
        raise ConfigError(f"{where}: attention_bias=true is not supported for {family}.")
    layers = int(_need(cfg, "num_hidden_layers", where))
    types = _layer_types(cfg, layers, where)
    experts = _expert_layers(cfg, family, layers)
    pattern = "".join(_MIXER[t] + ("E" if e else "-") for t, e in zip(types, experts, strict=True))
    hidden = int(_need(cfg, "hidden_size", where))
    heads = int(_need(cfg, "num_attention_heads", where))
    fields: dict[str, Any] = dict(
        family=family,
        vocab_size=int(_need(cfg, "vocab_size", where)),
        hidden_size=hidden,
        num_layers=2 * layers,
        block_pattern=pattern,
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or hidden // heads),
        # Qwen3.5-MoE has no dense layer and no such key: any valid size does.
        intermediate_size=int(
            cfg.get("intermediate_size")
            or _need(
                cfg,
                "moe_intermediate_size" if family == "qwen3_5_moe" else "intermediate_size",
                where,
            )
        ),
        max_seq_len=int(_need(cfg, "max_position_embeddings", where)),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        init_std=float(cfg.get("initializer_range", 0.02)),
        norm_zero_centered=True,
        qk_norm=True,
        attn_output_gate=True,
        linear_num_key_heads=int(_need(cfg, "linear_num_key_heads", where)),
        linear_num_value_heads=int(_need(cfg, "linear_num_value_heads", where)),
        linear_key_head_dim=int(_need(cfg, "linear_key_head_dim", where)),
        linear_value_head_dim=int(_need(cfg, "linear_value_head_dim", where)),
        linear_conv_kernel=int(cfg.get("linear_conv_kernel_dim") or 4),
        **_rope(cfg, where),
    )
    if any(experts):
        k = int(_need(cfg, "num_experts_per_tok", where))
        shared = int(cfg.get("shared_expert_intermediate_size") or 0)
        fields.update(
            num_experts=int(_need(cfg, "num_experts", where)),
            num_experts_per_tok=k,
            moe_intermediate_size=int(_need(cfg, "moe_intermediate_size", where)),
            moe_score="softmax_topk",
            # Qwen3.5-MoE's router always renormalizes (its config has no such key).
            moe_norm_topk=bool(cfg.get("norm_topk_prob", True)) if family == "qwen3_next" else True,
            # transformers counts its balance loss per token, jaxtrain per assignment.
            moe_aux_loss_coef=float(cfg.get("router_aux_loss_coef", 0.0)) * k,
            moe_shared_experts=1 if shared else 0,
            moe_shared_intermediate_size=shared,
            moe_shared_gate=bool(shared),
        )
    return fields


def check_qwen3_next_expressible(spec: ModelSpec, arch: str) -> None:
    """ConfigError naming the first setting the spec's transformers class cannot hold."""
    pattern = spec.block_pattern
    pairs = [pattern[i : i + 2] for i in range(0, len(pattern), 2)]
    ffn = "-" if spec.family == "qwen3_5" else "E" if spec.family == "qwen3_5_moe" else "-E"
    if len(pattern) % 2 or any(p[0] not in "G*" or p[1] not in ffn for p in pairs):
        raise ConfigError(
            f"model.block_pattern={pattern!r} cannot be written as {arch}; it needs pairs of a "
            f"mixer (G or *) and a feed-forward ({' or '.join(ffn)})."
        )
    shared = spec.shared_expert_size() > 0
    needs = {
        "norm_zero_centered": (spec.norm_zero_centered, "True"),
        "qk_norm": (spec.qk_norm and not spec.qk_norm_across_heads, "True, per head"),
        "attn_output_gate": (spec.attn_output_gate, "True"),
        "qkv_bias": (not spec.qkv_bias and not spec.o_bias, "False (o_bias too)"),
        "sliding_window": (not spec.sliding_window, "0"),
        "linear_short_conv": (spec.linear_short_conv, "True"),
        "linear_output_gate": (spec.linear_output_gate, "True"),
        "rope_interleave": (not spec.rope_interleave, "False"),
        "mlp_activation": (spec.mlp_activation == "swiglu", "'swiglu'"),
        "mla": (not spec.mla, "off (kv_lora_rank = 0)"),
    }
    if spec.num_experts:
        needs.update(
            moe_score=(spec.moe_score == "softmax_topk", "'softmax_topk'"),
            moe_topk_method=(spec.moe_topk_method == "greedy", "'greedy'"),
            moe_routed_scaling=(spec.moe_routed_scaling == 1.0, "1.0"),
            moe_score_bias=(not spec.moe_score_bias, "False"),
            moe_activation=(spec.moe_activation == "swiglu", "'swiglu'"),
            moe_shared_gate=(spec.moe_shared_gate == shared, str(shared)),
            moe_norm_topk=(spec.moe_norm_topk or spec.family == "qwen3_next", "True"),
        )
    needs = {key.replace("mla", "kv_lora_rank"): value for key, value in needs.items()}
    require_settings(spec, arch, needs)


def qwen3_next_config(spec: ModelSpec, transformers_major: int) -> dict[str, Any]:
    """The transformers keys of a Qwen3-Next / Qwen3.5 spec (architectures, model_type and
    dtype are added by the caller)."""
    pattern = spec.block_pattern
    layers = len(pattern) // 2
    types = [
        "linear_attention" if pattern[2 * i] == "G" else "full_attention" for i in range(layers)
    ]
    rope = {**rope_parameters(spec), "rope_theta": spec.rope_theta}
    rope["partial_rotary_factor"] = spec.partial_rotary_factor
    cfg: dict[str, Any] = dict(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        num_hidden_layers=layers,
        layer_types=types,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        intermediate_size=spec.intermediate_size,
        max_position_embeddings=spec.max_seq_len,
        rms_norm_eps=spec.norm_eps,
        tie_word_embeddings=spec.tie_embeddings,
        initializer_range=spec.init_std,
        hidden_act="silu",
        attention_bias=False,
        linear_num_key_heads=spec.linear_num_key_heads,
        linear_num_value_heads=spec.linear_num_value_heads,
        linear_key_head_dim=spec.linear_key_head_dim,
        linear_value_head_dim=spec.linear_value_head_dim,
        linear_conv_kernel_dim=spec.linear_conv_kernel,
    )
    if transformers_major >= 5:
        cfg["rope_parameters"] = rope
    else:
        scaling = rope_parameters(spec)
        cfg.update(
            rope_theta=spec.rope_theta,
            partial_rotary_factor=spec.partial_rotary_factor,
            rope_scaling=None if scaling["rope_type"] == "default" else scaling,
        )
    if spec.num_experts:
        cfg.update(
            num_experts=spec.num_experts,
            num_experts_per_tok=spec.num_experts_per_tok,
            moe_intermediate_size=spec.moe_intermediate_size,
            shared_expert_intermediate_size=spec.shared_expert_size(),
            router_aux_loss_coef=spec.moe_aux_loss_coef / spec.num_experts_per_tok,
        )
        if spec.family == "qwen3_next":
            cfg.update(
                norm_topk_prob=spec.moe_norm_topk,
                decoder_sparse_step=1,
                mlp_only_layers=[i for i in range(layers) if pattern[2 * i + 1] == "-"],
            )
    return cfg


def _gdn_rows(spec: ModelSpec, at: tuple[str, ...], lay: str, ids) -> list[Row]:
    """A Gated DeltaNet mixer: Qwen3-Next's fused `in_proj_qkvz` / `in_proj_ba`, or Qwen3.5's
    `in_proj_qkv`, `in_proj_z`, `in_proj_b`, `in_proj_a`; the one conv over q|k|v."""
    d, n, h = spec.hidden_size, spec.linear_num_key_heads, spec.linear_num_value_heads
    kd, vd, w = spec.linear_key_head_dim, spec.linear_value_head_dim, spec.linear_conv_kernel
    g = h // n  # value heads per key head
    m, hf = (*at, "mixer"), f"{lay}linear_attn."
    q = list(range(n * kd))
    k = list(range(n * kd, 2 * n * kd))
    v = list(range(2 * n * kd, 2 * n * kd + h * vd))
    conv = 2 * n * kd + h * vd
    rows: list[Row] = []
    if spec.family == "qwen3_next":
        width = 2 * kd + 2 * g * vd  # one key head's [q, k, v group, z group]
        qkvz = n * width

        def pick(offset: int, size: int) -> tuple[int, ...]:
            return tuple(j * width + offset + r for j in range(n) for r in range(size))

        def pick_ba(offset: int) -> tuple[int, ...]:
            return tuple(j * 2 * g + offset + r for j in range(n) for r in range(g))

        fused = (
            ("q_proj", (n, kd), pick(0, kd), "in_proj_qkvz", qkvz),
            ("k_proj", (n, kd), pick(kd, kd), "in_proj_qkvz", qkvz),
            ("v_proj", (h, vd), pick(2 * kd, g * vd), "in_proj_qkvz", qkvz),
            ("g_proj", (h, vd), pick(2 * kd + g * vd, g * vd), "in_proj_qkvz", qkvz),
            ("b_proj", (h,), pick_ba(0), "in_proj_ba", 2 * h),
            ("a_proj", (h,), pick_ba(g), "in_proj_ba", 2 * h),
        )
    else:
        qkv = 2 * n * kd + h * vd
        fused = (
            ("q_proj", (n, kd), tuple(q), "in_proj_qkv", qkv),
            ("k_proj", (n, kd), tuple(k), "in_proj_qkv", qkv),
            ("v_proj", (h, vd), tuple(v), "in_proj_qkv", qkv),
            ("g_proj", (h, vd), None, "in_proj_z", h * vd),
            ("b_proj", (h,), None, "in_proj_b", h),
            ("a_proj", (h,), None, "in_proj_a", h),
        )
    for ours, outs, picked, theirs, size in fused:
        path, name, shape, _, rank, _, _ = kernel_row((*m, ours, "kernel"), "", (d,), outs, ids)
        extra = {} if picked is None else {"rows": picked}
        rows.append((path, f"{hf}{theirs}.weight", shape, (size, d), rank, ids, extra))
    for ours, picked, heads, width in (
        ("q_conv", q, n, kd),
        ("k_conv", k, n, kd),
        ("v_conv", v, h, vd),
    ):
        rows.append(
            (
                (*m, ours, "weight"),
                f"{hf}conv1d.weight",
                (w, heads, width),
                (conv, 1, w),
                1,
                ids,
                {"rows": tuple(picked)},
            )
        )
    return rows + [
        vector_row((*m, "dt_bias"), f"{hf}dt_bias", (h,), ids),
        vector_row((*m, "A_log"), f"{hf}A_log", (h,), ids),
        vector_row((*m, "o_norm", "scale"), f"{hf}norm.weight", (vd,), ids),
        kernel_row((*m, "o_proj", "kernel"), f"{hf}out_proj.weight", (h, vd), (d,), ids),
    ]


def _attention_rows(spec: ModelSpec, at: tuple[str, ...], lay: str, ids) -> list[Row]:
    """Gated attention: `q_proj` holds each head's query then its output gate."""
    d, n, kv, hd = spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.head_dim
    m, hf = (*at, "mixer"), f"{lay}self_attn."
    rows: list[Row] = []
    for ours, offset in (("q_proj", 0), ("gate_proj", hd)):
        picked = tuple(j * 2 * hd + offset + r for j in range(n) for r in range(hd))
        path, _, shape, _, rank, _, _ = kernel_row((*m, ours, "kernel"), "", (d,), (n, hd), ids)
        rows.append(
            (path, f"{hf}q_proj.weight", shape, (2 * n * hd, d), rank, ids, {"rows": picked})
        )
    return rows + [
        kernel_row((*m, "k_proj", "kernel"), f"{hf}k_proj.weight", (d,), (kv, hd), ids),
        kernel_row((*m, "v_proj", "kernel"), f"{hf}v_proj.weight", (d,), (kv, hd), ids),
        kernel_row((*m, "o_proj", "kernel"), f"{hf}o_proj.weight", (n, hd), (d,), ids),
        vector_row((*m, "q_norm", "scale"), f"{hf}q_norm.weight", (hd,), ids),
        vector_row((*m, "k_norm", "scale"), f"{hf}k_norm.weight", (hd,), ids),
    ]


def _mlp_rows(spec: ModelSpec, at: tuple[str, ...], lay: str, ids) -> list[Row]:
    d, f = spec.hidden_size, spec.intermediate_size
    m = (*at, "mixer")
    return [
        kernel_row((*m, f"{p}_proj", "kernel"), f"{lay}mlp.{p}_proj.weight", ins, outs, ids)
        for p, ins, outs in (("gate", (d,), (f,)), ("up", (d,), (f,)), ("down", (f,), (d,)))
    ]


def _moe_rows(spec: ModelSpec, at: tuple[str, ...], lay: str, ids) -> list[Row]:
    """Router, one tensor per expert (as `save_pretrained` writes them), the gated shared
    expert."""
    d, e, f, fs = (
        spec.hidden_size,
        spec.num_experts,
        spec.moe_intermediate_size,
        spec.shared_expert_size(),
    )
    m, hf = (*at, "mixer"), f"{lay}mlp."
    rows = [kernel_row((*m, "router", "kernel"), f"{hf}gate.weight", (d,), (e,), ids)]
    for p, ins, outs in (("gate", (d,), (f,)), ("up", (d,), (f,)), ("down", (f,), (d,))):
        name = f"{hf}experts.{{e}}.{p}_proj.weight"
        rows.append(kernel_row((*m, f"{p}_proj"), name, ins, outs, ids, experts=e))
    if fs:
        for p, ins, outs in (("gate", (d,), (fs,)), ("up", (d,), (fs,)), ("down", (fs,), (d,))):
            name = f"{hf}shared_expert.{p}_proj.weight"
            rows.append(kernel_row((*m, "shared", f"{p}_proj", "kernel"), name, ins, outs, ids))
        rows.append(
            kernel_row(
                (*m, "shared_gate", "kernel"), f"{hf}shared_expert_gate.weight", (d,), (1,), ids
            )
        )
    return rows


_ROWS = {"G": _gdn_rows, "*": _attention_rows, "-": _mlp_rows, "E": _moe_rows}
# The checkpoint name of each sublayer's pre-norm: the mixer's, then the feed-forward's.
_NORMS = ("input_layernorm", "post_attention_layernorm")


def qwen3_next_tensor_rows(spec: ModelSpec) -> list[Row]:
    """The parameter <-> tensor table of a Qwen3-Next / Qwen3.5 spec."""
    d, v = spec.hidden_size, spec.vocab_size
    p = period(spec.block_pattern)  # even: mixers and feed-forwards alternate
    rows: list[Row] = [
        (("embed", "embedding"), "model.embed_tokens.weight", (v, d), (v, d), None, (), {})
    ]
    lay = "model.layers.{i}."
    for j, ch in enumerate(spec.block_pattern[:p]):
        ids = tuple(i // 2 for i in range(j, spec.num_layers, p))
        at = ("blocks", f"s{j}")
        rows.append(vector_row((*at, "norm", "scale"), f"{lay}{_NORMS[j % 2]}.weight", (d,), ids))
        rows += _ROWS[ch](spec, at, lay, ids)
    rows.append(vector_row(("final_norm", "scale"), "model.norm.weight", (d,), ()))
    if not spec.tie_embeddings:
        rows.append(kernel_row(("lm_head", "kernel"), "lm_head.weight", (d,), (v,), ()))
    return rows
