"""The chunked Mamba scans and convolution against step-by-step recurrences, with packed
documents: the state restarts at each document's first token, wherever the chunks fall."""

from __future__ import annotations

import numpy as np
import pytest

from jaxtrain.models.mixers.ssm_scan import causal_conv, selective_scan, ssd_scan

LENGTH, CHUNK = 21, 4  # 21 tokens: five full chunks and a padded one
SEGMENTS = np.array([[0] * 7 + [1] * 8 + [2] * 6, [3] * LENGTH])


def _rng_arrays(seed, *shapes):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in shapes]


def _starts(segment):
    """[B, L] bool: token t starts a document (never the row's first token)."""
    out = np.zeros(segment.shape, bool)
    out[:, 1:] = segment[:, 1:] != segment[:, :-1]
    return out


def test_conv_taps_do_not_cross_documents():
    x, w, state = _rng_arrays(0, (2, LENGTH, 3), (3, 4), (2, 3, 3))
    out, _ = causal_conv(x, w, None, state, SEGMENTS)
    xp = np.concatenate([state, x], axis=1)
    seg = np.concatenate([np.repeat(SEGMENTS[:, :1], 3, axis=1), SEGMENTS], axis=1)
    want = np.zeros_like(x)
    for b in range(2):
        for t in range(LENGTH):
            for j in range(4):
                if seg[b, t + j] == SEGMENTS[b, t]:
                    want[b, t] += xp[b, t + j] * w[:, j]
    np.testing.assert_allclose(np.asarray(out), want, atol=1e-5)


@pytest.mark.parametrize("packed", [False, True])
def test_ssd_scan_equals_the_recurrence(packed):
    b, h, p, g, n = 2, 4, 3, 2, 5
    x, dtraw, bb, cc, d, a, state = _rng_arrays(
        1,
        (b, LENGTH, h, p),
        (b, LENGTH, h),
        (b, LENGTH, g, n),
        (b, LENGTH, g, n),
        (h,),
        (h,),
        (b, h, p, n),
    )
    dt, a = np.log1p(np.exp(dtraw)), -np.exp(a)
    segment = SEGMENTS if packed else None
    y, final = ssd_scan(x, dt, a, bb, cc, d, CHUNK, state, segment)
    starts = _starts(SEGMENTS) if packed else np.zeros((b, LENGTH), bool)
    hs, want = state.copy(), np.zeros_like(x)
    for t in range(LENGTH):
        keep = np.where(starts[:, t], 0.0, 1.0)[:, None]  # [B, 1] over heads
        decay = (np.exp(dt[:, t] * a) * keep)[..., None, None]  # [B, H, 1, 1]
        group = np.repeat(bb[:, t], h // g, axis=1)  # [B, H, N]
        hs = hs * decay + (dt[:, t, :, None] * x[:, t])[..., None] * group[:, :, None, :]
        read = np.repeat(cc[:, t], h // g, axis=1)
        want[:, t] = np.einsum("bhpn,bhn->bhp", hs, read) + x[:, t] * d[:, None]
    np.testing.assert_allclose(np.asarray(y), want, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(final), hs, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("packed", [False, True])
def test_selective_scan_equals_the_recurrence(packed):
    b, d, n = 2, 6, 3
    u, dtraw, bb, cc, dd, a, state = _rng_arrays(
        2, (b, LENGTH, d), (b, LENGTH, d), (b, LENGTH, n), (b, LENGTH, n), (d,), (d, n), (b, d, n)
    )
    dt, a = np.log1p(np.exp(dtraw)), -np.exp(a)
    segment = SEGMENTS if packed else None
    y, final = selective_scan(u, dt, a, bb, cc, dd, CHUNK, state, segment)
    starts = _starts(SEGMENTS) if packed else np.zeros((b, LENGTH), bool)
    hs, want = state.copy(), np.zeros_like(u)
    for t in range(LENGTH):
        keep = np.where(starts[:, t], 0.0, 1.0)[:, None, None]
        hs = (
            hs * np.exp(dt[:, t, :, None] * a) * keep
            + (dt[:, t] * u[:, t])[..., None] * bb[:, t, None, :]
        )
        want[:, t] = np.einsum("bdn,bn->bd", hs, cc[:, t]) + u[:, t] * dd
    np.testing.assert_allclose(np.asarray(y), want, atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(np.asarray(final), hs, atol=1e-4, rtol=1e-4)
