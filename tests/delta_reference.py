"""Step-by-step NumPy references of the delta-rule mixers, written from the published
definitions (Gated DeltaNet: Yang et al. 2024; Kimi delta attention: Kimi Linear technical
report 2025), and helpers that copy torch weights into the jaxtrain modules."""

from __future__ import annotations

import numpy as np
from flax import nnx


def naive_delta_rule(q, k, v, g, beta, segment=None, state=None):
    """o [B, L, H, V] and final state [B, H, K, V], one token at a time, float64.

    q, k [B, L, H, K] (already normalized and scaled); v [B, L, H, V]; g [B, L, H] or
    [B, L, H, K] log decays; beta [B, L, H]; a new segment id resets the state to zero."""
    q, k, v, g, beta = (np.asarray(x, np.float64) for x in (q, k, v, g, beta))
    b, length, h, kd = k.shape
    s = np.zeros((b, h, kd, v.shape[-1])) if state is None else np.array(state, np.float64)
    out = np.zeros(v.shape)
    for t in range(length):
        if segment is not None and t > 0:
            new_doc = np.asarray(segment)[:, t] != np.asarray(segment)[:, t - 1]
            s[new_doc] = 0.0
        decay = np.exp(g[:, t])
        s = s * (decay[..., None] if g.ndim == 4 else decay[..., None, None])
        predicted = np.einsum("bhk,bhkv->bhv", k[:, t], s)
        delta = beta[:, t, :, None] * (v[:, t] - predicted)
        s = s + k[:, t, :, :, None] * delta[:, :, None, :]
        out[:, t] = np.einsum("bhk,bhkv->bhv", q[:, t], s)
    return out, s


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.logaddexp(0.0, x)


def l2norm(x, eps=1e-6):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + eps)


def rmsnorm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def causal_conv(x_BLC, w_WC):
    """Depthwise causal conv with zero history, silu after: y_t = silu(sum_w c_w x_{t-W+1+w})."""
    taps = w_WC.shape[0]
    xp = np.concatenate([np.zeros((x_BLC.shape[0], taps - 1, x_BLC.shape[2])), x_BLC], 1)
    y = sum(xp[:, i : i + x_BLC.shape[1]] * w_WC[i] for i in range(taps))
    return silu(y)


def params_of(module: nnx.Module) -> dict:
    """The module's parameters as a nested dict of float64 numpy arrays."""

    def convert(tree):
        return {
            k: (convert(v) if isinstance(v, dict) else np.asarray(v, np.float64))
            for k, v in tree.items()
        }

    return convert(nnx.to_pure_dict(nnx.state(module, nnx.Param)))


def load(module: nnx.Module, values: dict) -> None:
    """Writes the nested dict `values` (numpy arrays) into the module's parameters."""
    state = nnx.state(module, nnx.Param)
    pure = nnx.to_pure_dict(state)

    def merge(into, new):
        for key, value in new.items():
            if isinstance(value, dict):
                merge(into[key], value)
            else:
                assert into[key].shape == value.shape, (key, into[key].shape, value.shape)
                into[key] = np.asarray(value, np.float32)

    merge(pure, values)
    nnx.replace_by_pure_dict(state, pure)
    nnx.update(module, state)


def randomize(module: nnx.Module, seed: int = 0, std: float = 0.2) -> dict:
    """Draws every parameter of the module at a scale where each matters (norm weights
    U(0.5, 1.5), projections N(0, std), the rest kept from their init), loads them and returns
    them as float64."""
    rng = np.random.default_rng(seed)
    params = params_of(module)

    def draw(tree, name=""):
        out = {}
        for key, value in tree.items():
            if isinstance(value, dict):
                out[key] = draw(value, key)
            elif name.endswith("norm"):
                out[key] = rng.uniform(0.5, 1.5, value.shape)
            elif name.endswith("conv"):
                out[key] = rng.normal(0.0, 0.4, value.shape)
            elif key in ("kernel", "bias"):
                out[key] = rng.normal(0.0, std, value.shape)
            else:
                out[key] = value
        return out

    params = draw(params)
    load(module, params)
    return params_of(module)
