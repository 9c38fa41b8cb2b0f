"""Grok-1 and Grok-2 logits against step-by-step NumPy references, fp32, at 1e-4.

Transformers has no Grok, so the references are written here from the published code:
Grok-1 from xai-org/grok-1's model.py (`DecoderLayer`, `MultiHeadAttention`, `MoELayer`,
`Router`, `LanguageModel`), with its weights in that file's layout (haiku names, [in, out]
kernels, experts stacked [E, in, out]); Grok-2 from SGLang's grok.py, which serves both (the
dense GeGLU beside the experts, the router and output soft-caps, the log2 query temperature).
Each reference runs its own loops and reads its own weight layout; `to_jaxtrain` is the only
bridge. The parameter counts of the full-size presets are checked against the count of the
weights the reference layout creates at full size.
"""

import math

import numpy as np
import pytest
from flax import nnx

from jaxtrain.models import Decoder
from jaxtrain.models.presets.registry import PUBLISHED_PARAMS, model_spec
from tests.parity_helpers import max_diff, tokens


def _rms_norm(x, scale, eps):
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * scale


def _gelu_tanh(x):  # jax.nn.gelu(approximate=True), model.py's activation
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def _softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def _rope(x_TNH, theta):
    """model.py's RotaryEmbedding: rotate_half over the whole head, positions 0.. T-1."""
    t, _, h = x_TNH.shape
    inv_freq = 1.0 / theta ** (np.arange(0, h, 2) / h)
    phase = np.arange(t)[:, None] * inv_freq[None]
    phase = np.concatenate([phase, phase], axis=-1)[:, None, :]
    x1, x2 = x_TNH[..., : h // 2], x_TNH[..., h // 2 :]
    rotated = np.concatenate([-x2, x1], axis=-1)
    return x_TNH * np.cos(phase) + rotated * np.sin(phase)


def reference_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """Every weight the reference creates, in model.py's names (Grok-2's dense MLP and untied
    output under SGLang-like names), by the reference's own size rules."""
    d, n, k, h, e = cfg["d"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["experts"]
    f = cfg["expert_ffn"]
    shapes = {"in_out_embed/embeddings": (cfg["vocab"], d), "rms_norm/scale": (d,)}
    for i in range(cfg["layers"]):
        p = f"decoder_layer_{i}/"
        shapes.update(
            {
                p + "multi_head_attention/query/w": (d, n * h),
                p + "multi_head_attention/key/w": (d, k * h),
                p + "multi_head_attention/value/w": (d, k * h),
                p + "multi_head_attention/linear/w": (n * h, d),
                p + "router/w": (d, e),
                p + "moe/linear/w": (e, d, f),
                p + "moe/linear_v/w": (e, d, f),
                p + "moe/linear_1/w": (e, f, d),
            }
        )
        for norm in ("rms_norm", "rms_norm_1", "rms_norm_2", "rms_norm_3"):
            shapes[p + norm + "/scale"] = (d,)
        if cfg.get("residual_ffn"):
            r = cfg["residual_ffn"]
            shapes.update(
                {p + "mlp/gate/w": (d, r), p + "mlp/up/w": (d, r), p + "mlp/down/w": (r, d)}
            )
    if not cfg["tied"]:
        shapes["lm_head/w"] = (d, cfg["vocab"])
    return shapes


def ffn_size(emb_size: int, widening_factor: float) -> int:
    """model.py's expert width: 2/3 of widening x emb, rounded up to a multiple of 8."""
    size = int(widening_factor * emb_size) * 2 // 3
    return size + (8 - size) % 8


# Full sizes: Grok-1 from run.py (emb 48 x 128, widening 8), Grok-2 from its config.json.
GROK1 = dict(
    vocab=128 * 1024,
    d=48 * 128,
    heads=48,
    kv_heads=8,
    head_dim=128,
    layers=64,
    experts=8,
    expert_ffn=ffn_size(48 * 128, 8),
    tied=True,
)
GROK2 = dict(
    vocab=131072,
    d=8192,
    heads=64,
    kv_heads=8,
    head_dim=128,
    layers=64,
    experts=8,
    expert_ffn=16384,
    residual_ffn=32768,
    tied=False,
)


def _count(cfg):
    return sum(math.prod(s) for s in reference_shapes(cfg).values())


def test_full_size_counts_are_the_references_and_the_published_ones():
    assert _count(GROK1) == model_spec("grok-1").num_params() == PUBLISHED_PARAMS["grok-1"]
    assert _count(GROK2) == model_spec("grok-2").num_params() == PUBLISHED_PARAMS["grok-2"]
    # xAI publishes 314B for Grok-1 and 270B for Grok-2 (rounded).
    assert _count(GROK1) == pytest.approx(314e9, rel=0.01)
    assert _count(GROK2) == pytest.approx(270e9, rel=0.01)
    # Active: two of eight experts (the embedding counted once).
    assert model_spec("grok-1").num_active_params() == pytest.approx(
        _count(GROK1) - 64 * 6 * 3 * 6144 * 32768, rel=1e-9
    )


def reference_logits(w: dict, tokens_BL: np.ndarray, cfg: dict) -> np.ndarray:
    """The reference forward, one row and one layer at a time, float64."""
    out = []
    for row in tokens_BL:
        out.append(_reference_row(w, row, cfg))
    return np.stack(out)


def _reference_row(w, row, c):
    eps, n, k, h = c["eps"], c["heads"], c["kv_heads"], c["head_dim"]
    t = len(row)
    x = w["in_out_embed/embeddings"][row].astype(np.float64) * c["embed_mult"]
    causal = np.tril(np.ones((t, t), bool))
    temp = np.ones(t)
    if c.get("temperature_len"):  # SGLang's xai_temperature_reg, by absolute slot
        i = np.arange(t)
        length = c["temperature_len"]
        temp = np.where(i > length, np.log2(np.maximum(i, 1)) / np.log2(length), 1.0)
    for layer in range(c["layers"]):
        p = f"decoder_layer_{layer}/"
        a = p + "multi_head_attention/"
        hin = _rms_norm(x, w[p + "rms_norm/scale"], eps)
        q = _rope((hin @ w[a + "query/w"]).reshape(t, n, h), c["theta"])
        kk = _rope((hin @ w[a + "key/w"]).reshape(t, k, h), c["theta"])
        v = (hin @ w[a + "value/w"]).reshape(t, k, h)
        att = np.zeros((t, n, h))
        for head in range(n):
            g = head // (n // k)  # query head -> its kv head, as model.py's [kv, G] reshape
            logits = (q[:, head] @ kk[:, g].T) * c["attn_mult"] * temp[:, None]
            logits = c["attn_cap"] * np.tanh(logits / c["attn_cap"])
            logits = np.where(causal, logits, -1e30)
            att[:, head] = _softmax(logits) @ v[:, g]
        attn = att.reshape(t, n * h) @ w[a + "linear/w"]
        x = x + _rms_norm(attn, w[p + "rms_norm_1/scale"], eps)
        hin = _rms_norm(x, w[p + "rms_norm_2/scale"], eps)
        router = hin @ w[p + "router/w"]
        if c.get("router_cap"):
            router = c["router_cap"] * np.tanh(router / c["router_cap"])
        probs = _softmax(router)
        moe = np.zeros_like(x)
        for tok in range(t):
            for expert in np.argsort(-probs[tok], kind="stable")[:2]:  # top-2, not renormalised
                gate = hin[tok] @ w[p + "moe/linear/w"][expert]
                up = hin[tok] @ w[p + "moe/linear_v/w"][expert]
                moe[tok] += probs[tok, expert] * (
                    (_gelu_tanh(gate) * up) @ w[p + "moe/linear_1/w"][expert]
                )
        if c.get("residual_ffn"):  # Grok-2: (mlp + moe) / sqrt(2)
            mlp = (_gelu_tanh(hin @ w[p + "mlp/gate/w"]) * (hin @ w[p + "mlp/up/w"])) @ w[
                p + "mlp/down/w"
            ]
            moe = (mlp + moe) / math.sqrt(2.0)
        x = x + _rms_norm(moe, w[p + "rms_norm_3/scale"], eps)
    x = _rms_norm(x, w["rms_norm/scale"], eps)
    head = w["in_out_embed/embeddings"].T if c["tied"] else w["lm_head/w"]
    logits = x @ head * c["out_mult"]
    if c.get("final_cap"):
        logits = c["final_cap"] * np.tanh(logits / c["final_cap"])
    return logits


def random_reference_weights(cfg: dict, seed: int = 0) -> dict:
    """Weights of realistic scale in the reference layout: kernels N(0, 1 / fan_in) so
    activations stay O(1), norm scales U(0.5, 1.5), unit-variance embeddings."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in reference_shapes(cfg).items():
        if name.endswith("/scale"):
            out[name] = rng.uniform(0.5, 1.5, shape)
        elif name == "in_out_embed/embeddings":
            out[name] = rng.normal(0.0, 1.0, shape)
        else:
            fan_in = shape[-2]
            std = 3.0 / math.sqrt(fan_in) if name.endswith("router/w") else 1 / math.sqrt(fan_in)
            out[name] = rng.normal(0.0, std, shape)
    return {k: v.astype(np.float32) for k, v in out.items()}


def to_jaxtrain(w: dict, cfg: dict) -> dict:
    """The reference weights as jaxtrain's parameter tree (blocks stacked over `layers`)."""
    d, n, k, h = cfg["d"], cfg["heads"], cfg["kv_heads"], cfg["head_dim"]

    def stack(name, shape=None):
        arrays = [w[f"decoder_layer_{i}/{name}"] for i in range(cfg["layers"])]
        return np.stack([a.reshape(shape) if shape else a for a in arrays])

    a = "multi_head_attention/"
    mlp = {
        "gate_proj": stack("moe/linear/w"),
        "up_proj": stack("moe/linear_v/w"),
        "down_proj": stack("moe/linear_1/w"),
        "router": {"kernel": stack("router/w")},
    }
    if cfg.get("residual_ffn"):
        mlp["residual"] = {
            name: {"kernel": stack(f"mlp/{src}/w")}
            for name, src in (("gate_proj", "gate"), ("up_proj", "up"), ("down_proj", "down"))
        }
    layers = {
        "attn": {
            "q_proj": {"kernel": stack(a + "query/w", (d, n, h))},
            "k_proj": {"kernel": stack(a + "key/w", (d, k, h))},
            "v_proj": {"kernel": stack(a + "value/w", (d, k, h))},
            "o_proj": {"kernel": stack(a + "linear/w", (n, h, d))},
        },
        "input_norm": {"scale": stack("rms_norm/scale")},
        "attn_out_norm": {"scale": stack("rms_norm_1/scale")},
        "post_attn_norm": {"scale": stack("rms_norm_2/scale")},
        "mlp_out_norm": {"scale": stack("rms_norm_3/scale")},
        "mlp": mlp,
    }
    params = {
        "embed": {"embedding": w["in_out_embed/embeddings"]},
        "final_norm": {"scale": w["rms_norm/scale"]},
        "layers": layers,
    }
    if not cfg["tied"]:
        params["lm_head"] = {"kernel": w["lm_head/w"]}
    return params


def _tiny(spec, **extra):
    return dict(
        vocab=spec.vocab_size,
        d=spec.hidden_size,
        heads=spec.num_heads,
        kv_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        layers=spec.num_layers,
        experts=spec.num_experts,
        expert_ffn=spec.moe_intermediate_size,
        tied=spec.tie_embeddings,
        eps=spec.norm_eps,
        theta=spec.rope_theta,
        attn_mult=spec.head_dim**-0.5,
        attn_cap=spec.attn_logit_softcap,
        embed_mult=spec.embed_multiplier,
        out_mult=spec.output_multiplier,
        residual_ffn=spec.intermediate_size if spec.moe_residual_mlp else 0,
        router_cap=spec.router_logit_softcap,
        final_cap=spec.final_logit_softcap,
        temperature_len=spec.attn_temperature_len,
        **extra,
    )


# (preset, overrides): the presets' own caps, and caps small enough that tanh bends every
# score, router logit and output logit (a missing or misplaced cap then shows at 1e-1).
CASES = [
    ("grok-debug", {}),
    ("grok-debug", dict(attn_logit_softcap=2.0, embed_multiplier=3.0)),
    ("grok2-debug", {}),
    (
        "grok2-debug",
        dict(
            attn_logit_softcap=2.0,
            router_logit_softcap=1.5,
            final_logit_softcap=3.0,
            attn_temperature_len=4,
        ),
    ),
]


# Training attention (blockwise, hand-written backward) on every case; plain softmax under
# autodiff on the stressed Grok-2 one.
RUNS = [(*case, "blockwise") for case in CASES] + [(*CASES[-1], "dot")]


@pytest.mark.parametrize(
    "preset,overrides,impl", RUNS, ids=[f"{p}{'-stressed' if o else ''}-{i}" for p, o, i in RUNS]
)
def test_logits_match_the_reference(preset, overrides, impl):
    spec = model_spec(preset, attention_impl=impl, attention_block=8, **overrides)
    cfg = _tiny(spec)
    weights = random_reference_weights(cfg)
    model = Decoder(spec, rngs=nnx.Rngs(params=0))
    nnx.update(model, nnx.State(to_jaxtrain(weights, cfg)))
    toks = tokens(spec.vocab_size, 24)
    expected = reference_logits(weights, toks, cfg)
    got = np.asarray(model(toks))
    assert np.std(expected) > 0.3  # logits of realistic spread, not near zero
    assert max_diff(got, expected) < 1e-4


def test_decoding_with_the_cache_matches_the_full_forward():
    spec = model_spec("grok2-debug", attn_logit_softcap=2.0, attn_temperature_len=4)
    cfg = _tiny(spec)
    model = Decoder(spec, rngs=nnx.Rngs(params=0))
    nnx.update(model, nnx.State(to_jaxtrain(random_reference_weights(cfg), cfg)))
    toks = tokens(spec.vocab_size, 12)
    full = np.asarray(model(toks))
    cache = model.init_cache(2, 12)
    h, cache = model.hidden_states(toks[:, :10], cache=cache, cache_index=0)
    steps = [np.asarray(model.logits(h))]
    for i in range(10, 12):  # past the temperature length: the query scale applies
        h, cache = model.hidden_states(toks[:, i : i + 1], cache=cache, cache_index=i)
        steps.append(np.asarray(model.logits(h)))
    assert max_diff(np.concatenate(steps, axis=1), full) < 1e-4
