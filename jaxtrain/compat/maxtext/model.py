"""MaxText's architecture keys -> jaxtrain's `model.*`, block by block.

`decoder_block` names the architecture. The blocks the zoo builds map with their MaxText
semantics (as of the MaxText commit in tests/fixtures/compat/SOURCES.md):

- llama2, mistral, qwen2, qwen3: dense; `base_mlp_dim` per block.
- mixtral: experts of `base_mlp_dim` in every block; top-k logits softmaxed.
- qwen3_moe: experts of `base_moe_mlp_dim` in every block.
- deepseek: multi-head latent attention (`attention_type: mla`), `first_num_dense_layers`
  dense blocks of `base_mlp_dim`, then experts of `base_moe_mlp_dim` plus `shared_experts`
  shared ones; scores by `routed_score_func` (sigmoid renormalised over the kept experts),
  times `routed_scaling_factor`; group-limited routing (`n_routing_groups`, by each group's
  best two) and the aux-free `routed_bias` only for model names starting with deepseek3, as
  MaxText's router does.
- gpt_oss: sliding (`sliding_window_size`) and global blocks alternate, attention sinks,
  biased projections, router and experts, clamped SwiGLU (`mlp_activations_limit`, 1.702).
- gemma, gemma2, gemma3: see `gemma` (GeGLU, Gemma 2's post-norms and soft-caps, Gemma 3's
  qk-norm and local RoPE base).
- olmo3: see `olmo3` (norms after the sublayers only, qk-norm across heads, three sliding
  blocks per global one).
- gpt3: see `gpt3` (LayerNorms, learned positions, an ungated GELU MLP, biases everywhere).
- qwen3_next, qwen3_5: see `qwen3_next` (Gated DeltaNet and gated attention layers, experts
  with a gated shared expert, or a SwiGLU MLP in dense Qwen3.5).
- llama4: NoPE global blocks every `nope_layer_interval`, chunked attention elsewhere
  (`chunk_attn_window_size`), L2 q/k norms on RoPE blocks (`use_qk_norm`), temperature tuning,
  top-k sigmoid routing weighting the expert input, shared experts, experts every
  `interleave_moe_layer_step` blocks.

The experts' keys are `moe`'s. Any other block is refused by name (`architectures.unbuildable`).
"""

from __future__ import annotations

from typing import Any

from jaxtrain.compat.common.architectures import unbuildable
from jaxtrain.compat.common.report import KeyReport, is_off
from jaxtrain.compat.maxtext.gemma import GEMMA_BLOCKS, map_gemma
from jaxtrain.compat.maxtext.gpt3 import map_gpt3
from jaxtrain.compat.maxtext.moe import map_experts
from jaxtrain.compat.maxtext.olmo3 import map_olmo3
from jaxtrain.compat.maxtext.qwen3_next import QWEN3_NEXT_BLOCKS, map_qwen3_next
from jaxtrain.errors import ConfigError

FAMILIES = {
    "llama2": "llama",
    "mistral": "mistral",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "mixtral": "mixtral",
    "qwen3_moe": "qwen3_moe",
    "deepseek": "deepseek_v2",
    "gpt_oss": "gpt_oss",
    "llama4": "llama4",
    "gemma": "gemma",
    "gemma2": "gemma2",
    "gemma3": "gemma3",
    "olmo3": "olmo3",
    "gpt3": "gpt3",
    "qwen3_next": "qwen3_next",
    "qwen3_5": "qwen3_5",
}
MOE_BLOCKS = ("mixtral", "qwen3_moe", "deepseek", "gpt_oss", "llama4", *QWEN3_NEXT_BLOCKS)
# What the blocks the zoo cannot build are (the parts it lacks).
UNBUILDABLE = {
    "gemma4": "Gemma 4 (GeGLU MLP, post-norms, shared K/V projections)",
    "gemma4_small": "Gemma 4's small models (GeGLU MLP, layers sharing K/V)",
    "envy": "Envy Switch (post-MLP norms)",
    "deepseek4": "DeepSeek-V4 (compressed attention, hyper-connections)",
    "qwen3_custom_moe": "MaxText's custom Qwen3 MoE block",
    "simple": "MaxText's test block",
    "simple_mlp": "MaxText's test block",
}
# Keys that add parts the zoo cannot build to a block it can: (key, what it adds).
EXTRA_PARTS = (
    ("use_multimodal", "a multimodal model (its vision encoder)"),
    ("use_indexer", "DeepSeek sparse attention (a lightning indexer)"),
    ("engram_layers", "Engram memory layers"),
    ("mhc_expansion_rate", "manifold hyper-connections (several residual streams)"),
)
# Keys of the vision encoder, unused without use_multimodal.
VISION_KEYS = (
    "vision_encoder_block",
    "image_placeholder",
    "*_for_vit",
    "image_size_*",
    "video_placeholder",
    "audio_*",
    "spatial_merge_size*",
    "temporal_patch_size*",
)
_DENSE = (
    ("base_emb_dim", "hidden_size"),
    ("base_num_query_heads", "num_heads"),
    ("base_num_kv_heads", "num_kv_heads"),
    ("base_mlp_dim", "intermediate_size"),
    ("base_num_decoder_layers", "num_layers"),
    ("head_dim", "head_dim"),
    ("vocab_size", "vocab_size"),
    ("normalization_layer_epsilon", "norm_eps"),
    ("logits_via_embedding", "tie_embeddings"),
    ("rope_max_timescale", "rope_theta"),
)


def _refuse_unbuildable(r: KeyReport) -> str:
    block = str(r.get("decoder_block"))
    if block not in FAMILIES:
        what = UNBUILDABLE.get(block, "a MaxText decoder block with no jaxtrain family")
        raise unbuildable(r.source, "decoder_block", block, what)
    for key, what in EXTRA_PARTS:
        value = r.get(key)
        if key == "mhc_expansion_rate" and value is not None and int(value) <= 1:
            continue
        if not is_off(value):
            raise unbuildable(r.source, key, value, what)
    return block


def architecture(r: KeyReport, seq_len: int) -> dict[str, Any]:
    """model.* fields of the architecture a resolved MaxText config defines; refuses blocks
    (and parts) the zoo cannot build."""
    block = _refuse_unbuildable(r)
    fields: dict[str, Any] = {target: r.get(key) for key, target in _DENSE}
    fields.update(
        family=FAMILIES[block],
        max_seq_len=seq_len,
        rope_scaling="none",
        rope_factor=1.0,
        sliding_window=0,
        qk_norm=bool(r.get("use_qk_norm")) and block != "llama4",
        qkv_bias=bool(r.get("attention_bias")),
    )
    for key, target in (
        *_DENSE,
        ("decoder_block", "family"),
        ("use_qk_norm", "qk_norm"),
        ("attention_bias", "qkv_bias"),
    ):
        if r.has(key) and not r.handled(key):
            r.mapped(key, f"model.{target}")
    for key in ("use_multimodal", "use_indexer", "engram_layers", "mhc_expansion_rate"):
        if r.has(key):
            r.ignored(key, "off: the plain decoder")
    _rope(r, fields, block)
    if block in GEMMA_BLOCKS:
        map_gemma(r, fields, block)
    elif block == "olmo3":
        map_olmo3(r, fields)
    elif block in QWEN3_NEXT_BLOCKS:
        map_qwen3_next(r, fields, block)
    else:
        _attention(r, fields, block)
    if block == "gpt3":
        map_gpt3(r, fields)
    if block in MOE_BLOCKS and int(r.get("num_experts", 1)) > 1:
        map_experts(r, fields, block)
    else:
        many = int(r.get("num_experts", 1) or 1) > 1
        for key in ("num_experts", "num_experts_per_tok", "base_moe_mlp_dim"):
            if r.has(key) and not r.handled(key):
                r.ignored(
                    key,
                    f"the {block} block has a dense MLP whatever num_experts is"
                    if many
                    else "num_experts 1: a dense MLP",
                )
    _activations(r, fields, block)
    return fields


def _rope(r: KeyReport, fields: dict[str, Any], block: str) -> None:
    kind = str(r.get("rope_type", "default"))
    name = str(r.get("model_name", ""))
    if kind.startswith("llama3.1") or (kind == "default" and name.startswith("llama3.1")):
        # MaxText's LLaMARotaryEmbedding: fixed factor 8, bands 1 / 4, original length 8192,
        # chosen by rope_type or by a model name starting with llama3.1.
        if r.get("rope_use_scale", True):
            fields.update(
                rope_scaling="llama3",
                rope_factor=8.0,
                rope_low_freq_factor=1.0,
                rope_high_freq_factor=4.0,
                rope_original_max_len=8192,
            )
        why = (
            "llama3 scaling with MaxText's fixed factor 8 and original length 8192"
            if r.get("rope_use_scale", True)
            else "rope_use_scale false: no scaling"
        )
        r.mapped(
            "rope_type",
            "model.rope_scaling",
            why + ("" if kind.startswith("llama3.1") else f" (model_name {name} chooses it)"),
        )
        if r.has("rope_use_scale"):
            r.mapped("rope_use_scale", "model.rope_scaling")
    elif kind == "yarn":
        _yarn(r, fields, block)
    elif kind == "default":
        r.mapped("rope_type", "model.rope_scaling")
        linear = float(r.get("rope_linear_scaling_factor", 1.0) or 1.0)
        if linear != 1.0:
            fields.update(rope_scaling="linear", rope_factor=linear)
            r.mapped("rope_linear_scaling_factor", "model.rope_factor")
    else:
        r.unsupported("rope_type", f"{kind!r} rotary embeddings are not implemented")
    if not r.handled("rope_use_scale") and r.has("rope_use_scale"):
        r.ignored("rope_use_scale", "used only with llama3.1 rotary embeddings")
    if kind != "yarn":
        for key in (
            "rope_factor",
            "original_max_position_embeddings",
            "beta_fast",
            "beta_slow",
            "mscale",
            "rope_interleave",
            "rope_truncate",
            "rope_attention_scaling",
            "max_position_embeddings",
        ):
            if r.has(key) and not r.handled(key):
                r.ignored(key, "used only with rope_type yarn")


def _yarn(r: KeyReport, fields: dict[str, Any], block: str) -> None:
    # MLA scales the softmax by yarn_get_mscale(factor, mscale)^2 (HF's mscale_all_dim) and
    # leaves cos/sin unscaled; rope_attention_scaling instead scales cos/sin by the default
    # attention factor (mscale 0 in jaxtrain: 0.1 ln(factor) + 1), as gpt-oss does.
    mscale = float(r.get("mscale", 1.0)) if block == "deepseek" else 0.0
    for key in ("rope_factor", "original_max_position_embeddings", "beta_fast", "beta_slow"):
        if r.get(key) is None:
            raise ConfigError(
                f"rope_type yarn needs {key}, which the file leaves unset: set it (MaxText's "
                "base.yml has it), or pass --maxtext-root so base.yml is read."
            )
    fields.update(
        rope_scaling="yarn",
        rope_factor=float(r.get("rope_factor")),
        rope_original_max_len=int(r.get("original_max_position_embeddings")),
        rope_beta_fast=float(r.get("beta_fast")),
        rope_beta_slow=float(r.get("beta_slow")),
        rope_truncate=bool(r.get("rope_truncate", True)),
        rope_interleave=bool(r.get("rope_interleave", True)),
        rope_mscale=mscale,
        rope_mscale_all_dim=mscale,
    )
    r.mapped("rope_type", "model.rope_scaling")
    for key, target in (
        ("rope_factor", "rope_factor"),
        ("original_max_position_embeddings", "rope_original_max_len"),
        ("beta_fast", "rope_beta_fast"),
        ("beta_slow", "rope_beta_slow"),
        ("rope_truncate", "rope_truncate"),
        ("rope_interleave", "rope_interleave"),
    ):
        if r.has(key):
            r.mapped(key, f"model.{target}")
    if r.has("mscale"):
        if block == "deepseek":
            r.mapped(
                "mscale",
                "model.rope_mscale, model.rope_mscale_all_dim",
                "latent attention's softmax scale",
            )
        else:
            r.ignored("mscale", "used only by latent attention")
    # jaxtrain scales cos/sin by the YaRN attention factor outside latent attention only.
    scaling, expected = bool(r.get("rope_attention_scaling")), block != "deepseek"
    if scaling == expected and r.has("rope_attention_scaling"):
        r.mapped(
            "rope_attention_scaling",
            "model.rope_mscale",
            "true: cos/sin scaled by the YaRN attention factor"
            if scaling
            else "false: cos/sin unscaled",
        )
    elif scaling != expected:
        r.unsupported(
            "rope_attention_scaling",
            f"{scaling}: jaxtrain scales cos/sin by the "
            "YaRN attention factor outside latent attention only",
        )
    if r.has("max_position_embeddings"):
        r.ignored(
            "max_position_embeddings",
            "YaRN's frequencies depend on rope_factor and the "
            "original length only; jaxtrain's context is max_target_length",
        )


def _attention(r: KeyReport, fields: dict[str, Any], block: str) -> None:
    kind = str(r.get("attention_type", "global"))
    if block == "deepseek":
        if kind != "mla":
            r.unsupported(
                "attention_type", f"{kind!r}: jaxtrain's DeepSeek blocks use latent attention (mla)"
            )
        _mla(r, fields)
    elif block == "gpt_oss":
        # Blocks alternate sliding and global attention, the sliding one first.
        fields.update(
            sliding_window=int(r.get("sliding_window_size")),
            global_layer_step=2,
            attention_sinks=bool(r.get("attention_sink")),
            o_bias=bool(r.get("attention_bias")),
        )
        r.mapped(
            "sliding_window_size",
            "model.sliding_window, model.global_layer_step",
            "sliding and global blocks alternate, the sliding one first",
        )
        r.mapped("attention_sink", "model.attention_sinks")
        r.mapped("attention_bias", "model.qkv_bias, model.o_bias")
        if r.has("attention_type"):
            r.ignored("attention_type", "gpt-oss blocks choose sliding or global by position")
    elif block == "llama4":
        _llama4_attention(r, fields)
    elif kind == "local_sliding":
        fields["sliding_window"] = int(r.get("sliding_window_size"))
        r.mapped("attention_type", "model.sliding_window")
        r.mapped("sliding_window_size", "model.sliding_window")
    elif kind not in ("global", "full"):
        r.unsupported("attention_type", f"{kind!r} attention is not implemented")
    elif r.has("attention_type"):
        r.mapped("attention_type", "model.sliding_window", "global: full causal attention")
    if block in ("gpt_oss", "llama4") and r.has("inhomogeneous_layer_cycle_interval"):
        r.ignored(
            "inhomogeneous_layer_cycle_interval",
            "how MaxText scans the repeating layer pattern; the pattern itself is mapped",
        )
    if block != "gpt_oss" and r.get("attention_sink"):
        r.unsupported("attention_sink", "attention sinks exist only in gpt-oss blocks")


def _mla(r: KeyReport, fields: dict[str, Any]) -> None:
    rope_dim = int(r.get("qk_rope_head_dim"))
    fields.update(
        kv_lora_rank=int(r.get("kv_lora_rank")),
        q_lora_rank=int(r.get("q_lora_rank") or 0),
        qk_nope_head_dim=int(r.get("qk_nope_head_dim")),
        qk_rope_head_dim=rope_dim,
        v_head_dim=int(r.get("v_head_dim")),
        # unused by MLA; the presets mirror transformers' config
        num_kv_heads=fields["num_heads"],
        head_dim=rope_dim,
        qk_norm=False,
    )
    r.mapped("attention_type", "model.kv_lora_rank", "multi-head latent attention")
    for key in (
        "q_lora_rank",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
    ):
        r.mapped(key, f"model.{key}")
    for key in ("head_dim", "base_num_kv_heads"):
        r.ignored(key, "latent attention has no separate kv heads or head width")


def _llama4_attention(r: KeyReport, fields: dict[str, Any]) -> None:
    nope = int(r.get("nope_layer_interval", -1))
    chunk = int(r.get("chunk_attn_window_size", 0))
    if nope > 1:
        # NoPE blocks are those with (i + 1) % interval == 0: jaxtrain's global blocks.
        fields.update(
            global_layer_step=nope,
            nope_global=True,
            attn_temperature_tuning=bool(r.get("temperature_tuning")),
            attn_scale=0.1,
            attn_floor_scale=8192.0,
        )
        r.mapped("nope_layer_interval", "model.global_layer_step, model.nope_global")
        r.mapped(
            "temperature_tuning",
            "model.attn_temperature_tuning",
            "MaxText's fixed scale 0.1 and floor 8192",
        )
    else:
        for key in ("nope_layer_interval", "temperature_tuning"):
            if r.has(key):
                r.ignored(key, "no NoPE blocks")
    fields["attention_chunk"] = chunk
    r.mapped(
        "chunk_attn_window_size",
        "model.attention_chunk",
        "RoPE blocks attend within their chunk" if chunk else "0: full attention",
    )
    fields["qk_l2_norm"] = bool(r.get("use_qk_norm"))
    r.mapped(
        "use_qk_norm", "model.qk_l2_norm", "Llama 4: weightless L2 norm of q and k on RoPE blocks"
    )
    if r.has("attention_type"):
        r.ignored("attention_type", "Llama 4 blocks choose chunked or global by position")


def _activations(r: KeyReport, fields: dict[str, Any], block: str) -> None:
    acts = list(r.get("mlp_activations") or ["silu", "linear"])
    limit = float(r.get("mlp_activations_limit", -1.0) or -1.0)
    if block == "gpt_oss":
        if acts != ["sigmoid", "linear"]:
            r.unsupported(
                "mlp_activations",
                f"{acts}: gpt-oss experts use MaxText's clamped SwiGLU (sigmoid, linear)",
            )
        # MaxText's gpt-oss experts: (up + 1) x gate x sigmoid(1.702 gate), both clamped.
        fields.update(
            moe_activation="clamped_swiglu",
            moe_swiglu_alpha=1.702,
            moe_swiglu_limit=float(r.get("mlp_activations_limit")),
        )
        r.mapped(
            "mlp_activations",
            "model.moe_activation",
            "clamped SwiGLU: (up + 1) x gate x sigmoid(1.702 gate)",
        )
        r.mapped("mlp_activations_limit", "model.moe_swiglu_limit")
        return
    if acts == ["silu", "linear"] and block not in (*GEMMA_BLOCKS, "gpt3"):
        r.mapped("mlp_activations", "model.intermediate_size", "SwiGLU")
    elif acts == ["gelu", "linear"] and block in GEMMA_BLOCKS:
        r.mapped("mlp_activations", "model.mlp_activation", "GeGLU (tanh GELU)")
    elif acts == ["gelu"] and block == "gpt3":
        r.mapped("mlp_activations", "model.mlp_activation", "ungated tanh GELU (flax's nn.gelu)")
    else:
        expected = "SwiGLU (silu, linear)"
        if block in GEMMA_BLOCKS:
            expected = "GeGLU (gelu, linear)"
        elif block == "gpt3":
            expected = "an ungated GELU (gelu)"
        r.unsupported("mlp_activations", f"{acts}: the {block} block's MLP is {expected}")
    if limit > 0:
        r.unsupported("mlp_activations_limit", "clamped activations exist only in gpt-oss experts")
    elif r.has("mlp_activations_limit"):
        r.ignored("mlp_activations_limit", "-1: no clamping")
