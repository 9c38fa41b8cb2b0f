"""Megatron-LM model arguments -> jaxtrain's `model.*`: the zoo family its settings define,
attention, MLP, rotary embeddings, precision, recomputation and the vocabulary.

Megatron names no architecture, so the family follows from the settings (experts, latent
attention, soft-capped logits); multi-latent attention, experts and Mamba stacks are mapped by
`mla`, `moe` and `mamba`. The vocabulary is the tokenizer's
size padded to a multiple of make_vocab_size_divisible_by x tensor parallel size.
"""

from __future__ import annotations

import math
from typing import Any

from jaxtrain.compat.common import known
from jaxtrain.compat.common.architectures import moe_family, unbuildable
from jaxtrain.compat.common.report import KeyReport, is_off
from jaxtrain.compat.megatron import gated_delta_net
from jaxtrain.compat.megatron.mamba import map_mamba
from jaxtrain.compat.megatron.mla import map_mla
from jaxtrain.compat.megatron.moe import map_moe
from jaxtrain.errors import ConfigError
from jaxtrain.models.presets.registry import model_spec

# len() of Megatron's GPT2BPETokenizer: GPT-2's 50,257 BPE entries (the EOD is one of them).
GPT2_BPE_TOKENS = 50_257

# Megatron model types and layer switches that build what the zoo cannot: (key, what).
_OTHER_MODEL_TYPES = {
    "diffusion_model": "a diffusion transformer for images",
    "flux_schnell": "Flux, a diffusion transformer for images",
    "deepseek_v4": "DeepSeek-V4 (compressed attention, hyper-connections)",
    "kimi_k3": "Kimi K3's text backbone (Kimi-Linear: linear attention blocks)",
}
_OTHER_LAYERS = (
    ("lfm_layer_types", "LFM2's short-convolution blocks"),
    (
        "experimental_attention_variant",
        "an experimental attention (e.g. gated DeltaNet linear attention)",
    ),
    ("hybrid_override_pattern", "a Mamba-attention hybrid layer pattern"),
    ("is_hybrid_model", "a Mamba-attention hybrid model"),
)


def refuse_unbuildable(r: KeyReport) -> None:
    """Refuses, by the key that names it, a Megatron model the zoo cannot build: a model_type
    other than gpt, or GPT layers the zoo lacks."""
    kind = r.get("model_type", "gpt")
    if kind == "mamba":
        r.mapped(
            "model_type", "model.block_pattern", "Megatron's MambaModel: Mamba-2 and hybrid stacks"
        )
        return
    if kind not in (None, "gpt"):
        what = _OTHER_MODEL_TYPES.get(
            str(kind), "a Megatron model type with no jaxtrain family (jaxtrain's are GPT decoders)"
        )
        raise unbuildable(r.source, "model_type", kind, what)
    if r.has("model_type"):
        r.ignored("model_type", "gpt: a decoder-only transformer")
    for key, what in _OTHER_LAYERS:
        if key == "experimental_attention_variant" and r.get(key) == gated_delta_net.VARIANT:
            continue  # Qwen3-Next's / Qwen3.5's layers: gated_delta_net.py
        if not is_off(r.get(key)):
            raise unbuildable(r.source, key, r.get(key), what)


def int_key(report: KeyReport, key: str, default: Any = None) -> int:
    """The integer value of `key` (`default` when absent); ConfigError naming the key when it is
    null or not an integer."""
    value = report.get(key, default)
    if value is None:
        raise ConfigError(f"{report.source}: required key {key!r} is missing or null.")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ConfigError(f"{report.source}: {key}={value!r} must be an integer.")
    return int(value)


def map_model(r: KeyReport, s: dict[str, Any], tp: int) -> None:
    """The model keys -> `model.*` (and `data.tokenizer` for a local tokenizer folder)."""
    layers, hidden = int_key(r, "num_layers"), int_key(r, "hidden_size")
    heads = int_key(r, "num_attention_heads")
    ffn = r.get("ffn_hidden_size")
    if ffn is None:  # Megatron's defaults: 4h, or its 2/3 rounded to 64 for SwiGLU
        ffn = int(4 * hidden * 2 / 3 / 64) * 64 if r.get("swiglu") else 4 * hidden
        r.note(f"ffn_hidden_size unset: Megatron's default {ffn} used")
    groups = r.get("num_query_groups")
    kv = int(groups) if r.get("group_query_attention") and groups else heads
    head_dim = int(r.get("kv_channels") or hidden // heads)
    qk_norm, qkv_bias = bool(r.get("qk_layernorm")), bool(r.get("add_qkv_bias"))
    linear_bias = _linear_bias(r)
    model = {
        "num_layers": layers,
        "hidden_size": hidden,
        "num_heads": heads,
        "num_kv_heads": kv,
        "head_dim": head_dim,
        "intermediate_size": int(ffn),
        "qk_norm": qk_norm,
        "qkv_bias": qkv_bias or linear_bias,
        "o_bias": linear_bias,
        "mlp_bias": linear_bias,
        # Llama's attention_bias / mlp_bias hold every linear bias; Qwen2 the q/k/v ones.
        "family": (
            "qwen3" if qk_norm else "llama" if linear_bias else "qwen2" if qkv_bias else "llama"
        ),
        "norm_eps": float(r.get("norm_epsilon", 1e-5)),
        "rope_theta": float(r.get("rotary_base", 10000)),
        # Megatron ties the output to the embedding unless this is set.
        "tie_embeddings": not r.get("untie_embeddings_and_output_weights", False),
        "init_std": float(r.get("init_method_std", 0.02)),
        "max_seq_len": int(r.get("max_position_embeddings") or r.get("seq_length")),
        "sliding_window": 0,
        "rope_scaling": "none",
        "rope_factor": 1.0,
    }
    for key, target in (
        ("num_layers", "num_layers"),
        ("hidden_size", "hidden_size"),
        ("num_attention_heads", "num_heads"),
        ("ffn_hidden_size", "intermediate_size"),
        ("kv_channels", "head_dim"),
        ("qk_layernorm", "qk_norm"),
        ("add_qkv_bias", "qkv_bias"),
        ("norm_epsilon", "norm_eps"),
        ("rotary_base", "rope_theta"),
        ("max_position_embeddings", "max_seq_len"),
        ("untie_embeddings_and_output_weights", "tie_embeddings"),
    ):
        if r.has(key):
            r.mapped(key, f"model.{target}")
    for key in ("group_query_attention", "num_query_groups"):
        if r.has(key):
            r.mapped(
                key,
                "model.num_kv_heads",
                "" if r.get("group_query_attention") else "no GQA: one kv head per query head",
            )
    if r.has("init_method_std"):
        r.mapped(
            "init_method_std",
            "model.init_std",
            "Megatron also scales the output "
            "projections' std by 1/sqrt(2 x num_layers); jaxtrain does not",
        )
    if not r.has("untie_embeddings_and_output_weights"):
        r.note(
            "untie_embeddings_and_output_weights unset: Megatron's default shares the "
            "embedding with the output layer (model.tie_embeddings true)"
        )
    if r.get("use_rope_scaling"):
        model.update(
            rope_scaling="llama3",
            rope_factor=float(r.get("rope_scaling_factor", 8.0)),
            rope_low_freq_factor=1.0,
            rope_high_freq_factor=4.0,
            rope_original_max_len=8192,
        )
        r.mapped(
            "use_rope_scaling",
            "model.rope_scaling",
            "llama3 scaling, Megatron's fixed "
            "low/high frequency factors 1/4 and original length 8192",
        )
        r.mapped("rope_scaling_factor", "model.rope_factor")
    else:
        for key in ("use_rope_scaling", "rope_scaling_factor"):
            if r.has(key):
                r.ignored(key, "use_rope_scaling is off: no llama3 rope scaling")
    interp = r.get("rotary_seq_len_interpolation_factor")
    if interp not in (None, 1, 1.0):
        model.update(rope_scaling="linear", rope_factor=float(interp))
        r.mapped(
            "rotary_seq_len_interpolation_factor",
            "model.rope_scaling",
            "linear position interpolation",
        )
    elif r.has("rotary_seq_len_interpolation_factor"):
        r.ignored("rotary_seq_len_interpolation_factor", "1/unset: no position interpolation")
    if r.has("use_rotary_position_embeddings"):
        r.ignored(
            "use_rotary_position_embeddings", "legacy switch; position_embedding_type decides"
        )
    # Mixed precision: float32 master weights, bf16 compute (Megatron's bf16 path).
    if r.get("bf16"):
        model["dtype"], model["param_dtype"] = "bfloat16", "float32"
        r.mapped(
            "bf16",
            "model.dtype",
            "bf16 compute, float32 parameters as Megatron's optimizer keeps them",
        )
    elif r.has("bf16"):
        model["dtype"] = "float32"
        r.mapped("bf16", "model.dtype")
    granularity = r.get("recompute_granularity")
    if granularity:
        model["remat"] = "full" if granularity == "full" else "dots"
        r.mapped("recompute_granularity", "model.remat", "memory/speed only")
    for key in (
        "recompute_granularity",
        "recompute_method",
        "recompute_num_layers",
        "recompute_activations",
        "distribute_saved_activations",
        "checkpoint_activations",
    ):
        if r.has(key) and not r.handled(key):
            r.ignored(
                key,
                "activation recomputation detail (memory only); jaxtrain remats "
                "every layer alike (model.remat)",
            )
    if r.get("multi_latent_attention"):
        map_mla(r, model)
    if r.get("num_experts"):
        map_moe(r, model)
    _softcaps(r, model)
    model["family"] = _family(model, _grok_preset(r))
    if r.get("model_type") == "mamba":  # Mamba-2 / hybrid stacks: megatron/mamba.py
        map_mamba(r, model)
    if r.get("experimental_attention_variant") == gated_delta_net.VARIANT:
        gated_delta_net.map_gated_delta_net(r, model)
    if model["family"] == "grok":
        r.note(
            "family grok: Primus' grok preset (or its soft-capped logits); Megatron builds "
            "its GPT layers, so the model keeps their SwiGLU experts, pre-norm-only blocks, "
            "plain embeddings and uncapped attention scores, not xAI's GELU experts, output "
            "norms, multipliers and capped attention (presets grok-1 / grok-2 have those)"
        )
    elif not model.get("block_pattern", "").count("G"):  # gated_delta_net notes its own
        r.note(
            f"family {model['family']}: Megatron names no architecture, so the zoo family "
            "is the one these settings define (whatever the preset or tokenizer is called)"
        )
    model["vocab_size"] = _vocab(r, s, tp)
    s.update({f"model.{k}": v for k, v in model.items()})
    s["model.preset"] = ""


def _softcaps(r: KeyReport, model: dict[str, Any]) -> None:
    """Primus' logit soft-caps (its Megatron patches: cap x tanh(x / cap) on the output logits
    before the loss, and on the router logits before routing)."""
    for key, target in (
        ("final_logit_softcapping", "final_logit_softcap"),
        ("router_logit_softcapping", "router_logit_softcap"),
    ):
        if not r.has(key):
            continue
        value = r.get(key)
        if is_off(value) or not float(value) > 0:
            r.ignored(key, "unset: no soft-cap")
        elif target == "router_logit_softcap" and not r.get("num_experts"):
            r.ignored(key, "no experts (num_experts unset): no router")
        else:
            model[target] = float(value)
            r.mapped(key, f"model.{target}", "cap x tanh(x / cap), as Primus applies it")


def _grok_preset(r: KeyReport) -> bool:
    """Whether the model keys come from Primus' grok presets (grok_base.yaml and the files
    that extend it), which name xAI's Grok as their architecture."""
    names = (origin.replace("\\", "/").rsplit("/", 1)[-1] for origin in r.origins.values())
    return any(name.startswith("grok") and name.endswith(".yaml") for name in names)


def _family(model: dict[str, Any], grok: bool = False) -> str:
    """The zoo family the mapped settings are: Megatron names none, so its traits decide
    (Grok's soft-capped logits, or Primus' grok presets, make a mixture of experts Grok)."""
    if model.get("num_experts") and (
        grok or model.get("final_logit_softcap") or model.get("router_logit_softcap")
    ):
        return "grok"
    if model.get("num_experts") or model.get("kv_lora_rank"):
        return moe_family(model)
    return model["family"]


def _linear_bias(r: KeyReport) -> bool:
    """Whether `add_bias_linear` gives every linear layer a bias (q/k/v, output projection,
    both MLP projections), which jaxtrain builds for dense models; recorded in the report."""
    if not r.has("add_bias_linear"):
        return False
    if not r.get("add_bias_linear"):
        r.ignored("add_bias_linear", "matches jaxtrain's fixed behaviour")
        return False
    if r.get("num_experts") or r.get("multi_latent_attention"):
        r.unsupported(
            "add_bias_linear",
            "linear biases are built for dense grouped-query "
            "models only, not with experts or multi-latent attention",
        )
        return False
    r.mapped("add_bias_linear", "model.qkv_bias, model.o_bias, model.mlp_bias")
    return True


def _vocab(r: KeyReport, s: dict[str, Any], tp: int) -> int:
    kind, name = r.get("tokenizer_type"), r.get("tokenizer_model")
    divisible = int_key(r, "make_vocab_size_divisible_by", 128)
    if kind == "NullTokenizer":
        size, how = int_key(r, "vocab_size") + 1, "NullTokenizer: vocab_size + 1 (its EOD)"
    elif kind == "GPT2BPETokenizer":  # GPT-2's BPE files, whichever copy vocab_file names
        size, how = GPT2_BPE_TOKENS, "GPT2BPETokenizer: GPT-2's vocabulary"
    else:
        size, how = known.tokenizer_size(str(name or ""))
    if r.has("vocab_size") and kind != "NullTokenizer":
        r.ignored("vocab_size", "used only with NullTokenizer; the tokenizer decides")
    preset = known.preset_for_hf_name(str(name or "")) if size is None else None
    if preset and kind != "NullTokenizer":
        # The published embedding rows (a multiple of 128 already) where len(tokenizer) is not
        # known offline; Megatron pads len(tokenizer), which may give fewer rows.
        rows = model_spec(preset).vocab_size
        for key in ("tokenizer_type", "tokenizer_model", "make_vocab_size_divisible_by"):
            if r.has(key):
                r.mapped(key, "model.vocab_size", f"{preset}'s published {rows} embedding rows")
        r.note(
            f"len(tokenizer) of {name} is not known offline ({how}): model.vocab_size is "
            f"{preset}'s published {rows} rows; Megatron pads the tokenizer's own size to a "
            f"multiple of {divisible} x tensor parallel {tp}, which may be smaller"
        )
        return rows
    if size is None:
        r.unsupported(
            "tokenizer_model",
            f"vocabulary size unknown: {how}; give a local "
            "tokenizer folder or --config.model.vocab_size",
            target="model.vocab_size",
        )
        r.ignored("tokenizer_type", "see tokenizer_model")
        return 32000
    multiple = divisible * tp
    padded = math.ceil(size / multiple) * multiple
    reason = (
        f"{size} tokens ({how}) padded to a multiple of {divisible} x tensor parallel "
        f"{tp} = {padded}"
    )
    for key in ("tokenizer_type", "tokenizer_model", "make_vocab_size_divisible_by"):
        if r.has(key):
            r.mapped(key, "model.vocab_size", reason)
    if "offline table" in how:
        r.note(
            f"vocabulary of {name} from jaxtrain's offline table of published tokenizer "
            f"sizes ({size}); the tokenizer itself is not available locally"
        )
    folder = known.local_tokenizer_folder(name)
    if folder:
        s["data.tokenizer"] = folder
        r.mapped("tokenizer_model", "model.vocab_size, data.tokenizer", reason)
    return padded
