"""GPT-3 as MaxText builds it, in Hugging Face's `GPT2LMHeadModel` layout, both ways: its
`config.json` keys and where each tensor lives.

transformers has no GPT-3 class, but MaxText's gpt3 block is GPT-2's block exactly: LayerNorms
with biases before attention and MLP, a fused biased q/k/v projection, queries scaled by
head_dim^-0.5, an ungated tanh-GELU MLP (`gelu_new`) with biases, learned absolute positions,
a final LayerNorm and an output tied to the embedding (or not: `tie_word_embeddings`). So a
`gpt3` spec is written as GPT-2, and a GPT-2 checkpoint reads as a `gpt3` spec. GPT-2 names
its sizes `n_embd`, `n_layer`, `n_head`, `n_inner`, `n_positions`, and stores its projections
as `Conv1D` weights [in, out]: jaxtrain's layout, so no kernel is transposed; q, k and v are
the three contiguous thirds of `c_attn`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jaxtrain.errors import ConfigError
from jaxtrain.interop.hf_layout import require_settings
from jaxtrain.models.spec.hyperparameters import ModelSpec

GPT2_ARCHITECTURES = {"GPT2LMHeadModel": ("gpt3", "gpt2")}
# transformers' names of the tanh approximation of GELU (`jax.nn.gelu`'s default).
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh")
# (path, HF name, jaxtrain shape, HF shape, in_rank, TensorMap extras), `hf_tensor_maps`
# turns them into TensorMaps.
Row = tuple[tuple[str, ...], str, tuple[int, ...], tuple[int, ...], int | None, dict[str, Any]]


def _get(cfg: Mapping[str, Any], key: str, alias: str, where: str) -> int:
    value = cfg.get(key, cfg.get(alias))
    if value is None:
        raise ConfigError(f"{where}: config.json lacks {key} ({alias}), which GPT-2 needs.")
    return int(value)


def gpt2_fields(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Every spec field of a GPT-2 `config.json` (family `gpt3`)."""
    act = cfg.get("activation_function", "gelu_new")
    if act not in TANH_GELUS:
        raise ConfigError(
            f"{where}: activation_function={act!r} is not supported; jaxtrain's GPT-3 MLP "
            f"uses the tanh approximation of GELU ({' or '.join(map(repr, TANH_GELUS))})."
        )
    for key, needed in (
        ("scale_attn_weights", True),
        ("scale_attn_by_inverse_layer_idx", False),
        ("add_cross_attention", False),
    ):
        if bool(cfg.get(key, needed)) != needed:
            raise ConfigError(
                f"{where}: {key}={cfg[key]!r} is not supported; jaxtrain's GPT-3 has "
                f"{key}={needed}."
            )
    hidden = _get(cfg, "n_embd", "hidden_size", where)
    heads = _get(cfg, "n_head", "num_attention_heads", where)
    if hidden % heads:
        raise ConfigError(
            f"{where}: n_embd={hidden} is not divisible by n_head={heads}; GPT-2's heads "
            "split the width evenly."
        )
    positions = _get(cfg, "n_positions", "max_position_embeddings", where)
    return dict(
        family="gpt3",
        vocab_size=_get(cfg, "vocab_size", "vocab_size", where),
        hidden_size=hidden,
        num_layers=_get(cfg, "n_layer", "num_hidden_layers", where),
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=hidden // heads,
        intermediate_size=int(cfg.get("n_inner") or 4 * hidden),
        max_seq_len=positions,
        learned_positions=positions,
        norm_type="layer",
        norm_eps=float(cfg.get("layer_norm_epsilon", 1e-5)),
        mlp_activation="gelu",
        mlp_bias=True,
        qkv_bias=True,
        o_bias=True,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", True)),
        init_std=float(cfg.get("initializer_range", 0.02)),
    )


def check_gpt2_expressible(spec: ModelSpec, arch: str) -> None:
    """ConfigError naming the first setting of a `gpt3` spec `GPT2LMHeadModel` lacks."""
    needs = {
        "norm_type": (spec.norm_type == "layer", "'layer'"),
        "mlp_activation": (spec.mlp_activation == "gelu", "'gelu'"),
        "learned_positions": (spec.learned_positions > 0, "> 0"),
        "num_kv_heads": (spec.num_kv_heads == spec.num_heads, f"num_heads = {spec.num_heads}"),
        "head_dim": (
            spec.num_heads * spec.head_dim == spec.hidden_size,
            f"hidden_size / num_heads = {spec.hidden_size / spec.num_heads:g}",
        ),
        "pre_norms": (spec.pre_norms, "True"),
        "query_pre_attn_scalar": (
            spec.query_pre_attn_scalar in (0.0, float(spec.head_dim)),
            f"0 or head_dim = {spec.head_dim}",
        ),
        "embed_multiplier": (spec.embed_multiplier == 1.0, "1.0"),
        "output_multiplier": (spec.output_multiplier == 1.0, "1.0"),
    }
    for key in ("mlp_bias", "qkv_bias", "o_bias"):
        needs[key] = (getattr(spec, key), "True (GPT-2 biases every projection)")
    for key in (
        "norm_zero_centered",
        "post_norms",
        "qk_norm",
        "qk_l2_norm",
        "sliding_window",
        "attention_chunk",
        "attention_sinks",
        "attn_logit_softcap",
        "final_logit_softcap",
        "attn_temperature_len",
        "num_experts",
    ):
        needs[key] = (not getattr(spec, key), "off")
    require_settings(spec, arch, needs)


def gpt2_config(spec: ModelSpec) -> dict[str, Any]:
    """The GPT-2 `config.json` keys of a `gpt3` spec (without architectures and dtype)."""
    return dict(
        vocab_size=spec.vocab_size,
        n_positions=spec.learned_positions,
        n_embd=spec.hidden_size,
        n_layer=spec.num_layers,
        n_head=spec.num_heads,
        n_inner=spec.intermediate_size,
        activation_function="gelu_new",
        layer_norm_epsilon=spec.norm_eps,
        initializer_range=spec.init_std,
        tie_word_embeddings=spec.tie_embeddings,
        scale_attn_weights=True,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=True,
    )


def gpt2_tensor_rows(spec: ModelSpec) -> list[Row]:
    """Where each parameter of a `gpt3` spec lives in a GPT-2 checkpoint, in its order."""
    d, v, f = spec.hidden_size, spec.vocab_size, spec.intermediate_size
    n, h, p = spec.num_heads, spec.head_dim, spec.learned_positions
    lay, nh = "transformer.h.{i}.", n * h

    def norm(ours: tuple[str, ...], theirs: str) -> list[Row]:
        return [
            ((*ours, "scale"), f"{theirs}.weight", (d,), (d,), None, {}),
            ((*ours, "bias"), f"{theirs}.bias", (d,), (d,), None, {}),
        ]

    rows: list[Row] = [
        (("embed", "embedding"), "transformer.wte.weight", (v, d), (v, d), None, {}),
        (("position_embed", "embedding"), "transformer.wpe.weight", (p, d), (p, d), None, {}),
        *norm(("layers", "input_norm"), f"{lay}ln_1"),
    ]
    for index, proj in enumerate(("q_proj", "k_proj", "v_proj")):
        part = {"part": (index, 3, False)}
        path = ("layers", "attn", proj)
        rows.append(
            ((*path, "kernel"), f"{lay}attn.c_attn.weight", (d, n, h), (d, 3 * nh), None, part)
        )
        rows.append(((*path, "bias"), f"{lay}attn.c_attn.bias", (n, h), (3 * nh,), None, part))
    rows += [
        (
            ("layers", "attn", "o_proj", "kernel"),
            f"{lay}attn.c_proj.weight",
            (n, h, d),
            (nh, d),
            None,
            {},
        ),
        (("layers", "attn", "o_proj", "bias"), f"{lay}attn.c_proj.bias", (d,), (d,), None, {}),
        *norm(("layers", "post_attn_norm"), f"{lay}ln_2"),
        (("layers", "mlp", "up_proj", "kernel"), f"{lay}mlp.c_fc.weight", (d, f), (d, f), None, {}),
        (("layers", "mlp", "up_proj", "bias"), f"{lay}mlp.c_fc.bias", (f,), (f,), None, {}),
        (
            ("layers", "mlp", "down_proj", "kernel"),
            f"{lay}mlp.c_proj.weight",
            (f, d),
            (f, d),
            None,
            {},
        ),
        (("layers", "mlp", "down_proj", "bias"), f"{lay}mlp.c_proj.bias", (d,), (d,), None, {}),
        *norm(("final_norm",), "transformer.ln_f"),
    ]
    if not spec.tie_embeddings:  # nn.Linear: [vocab, embed]
        rows.append((("lm_head", "kernel"), "lm_head.weight", (d, v), (v, d), 1, {}))
    return rows
