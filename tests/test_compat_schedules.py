"""Learning-rate schedules of other stacks, mapped to jaxtrain's and compared step by step.

Each reference below is written from the other stack's published semantics (Megatron's
OptimizerParamScheduler, TorchTitan v0.2.2's linear_warmup_stable_decay, MaxText's
create_learning_rate_schedule, prime-rl's torch LinearLR/CosineAnnealingLR chain), not from
jaxtrain's code; the adapters must reproduce them at every step of the run.
"""

import math

import numpy as np
import pytest
from ml_collections import ConfigDict

from jaxtrain import compat
from jaxtrain.errors import ConfigError
from jaxtrain.train.optimizer import learning_rate_schedule

MEGATRON_EXP = "Primus/examples/megatron/configs/MI300X/llama2_7B-BF16-pretrain.yaml"


def jaxtrain_rates(cfg, steps=None):
    schedule = learning_rate_schedule(cfg.optim, cfg.train.steps)
    return np.array([float(schedule(s)) for s in range(steps or cfg.train.steps)])


def megatron_lr(s, lr, min_lr, warmup, decay, style, init=0.0, wsd=0, wsd_style="linear"):
    if warmup > 0 and s <= warmup:
        return init + (lr - init) * s / warmup
    if style == "constant":
        return lr
    if s > decay:
        return min_lr
    ratio = (s - warmup) / (decay - warmup)
    if style == "linear":
        coeff = 1.0 - ratio
    elif style == "cosine":
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
    else:  # WSD
        start = decay - wsd
        if s <= start:
            coeff = 1.0
        else:
            r = (s - start) / wsd
            coeff = {
                "linear": 1 - r,
                "cosine": 0.5 * (math.cos(math.pi * r) + 1),
                "minus_sqrt": 1 - math.sqrt(r),
            }[wsd_style]
    return min_lr + coeff * (lr - min_lr)


def torchtitan_lr(s, lr, steps, warmup, decay_ratio, decay_type, min_factor):
    warmup = min(warmup, steps)
    if decay_ratio is None:
        decay = steps - warmup
    else:
        decay = min(round(steps * decay_ratio), steps - warmup)
    stable = steps + 1 - warmup - decay
    if s < warmup:
        return lr * (s + 1) / warmup
    if s < warmup + stable:
        return lr
    progress = (s + 1 - warmup - stable) / decay
    curve = {
        "linear": 1 - progress,
        "sqrt": 1 - math.sqrt(progress),
        "cosine": 0.5 * (1 + math.cos(math.pi * progress)),
    }[decay_type]
    return lr * (min_factor + (1 - min_factor) * curve)


def maxtext_lr(s, lr, steps, schedule_steps, warmup_fraction, final_fraction):
    """MaxText before learning_rate_final_fraction: the cosine reaches its end at L."""
    length = steps if schedule_steps == -1 else schedule_steps
    warmup = int(length * warmup_fraction)
    if s < warmup:
        return lr * s / warmup
    if s >= length:
        return 0.0
    pct = (s - warmup) / (length - warmup)
    a = 0.5 * (math.cos(math.pi * pct) + 1)
    return lr * a + lr * final_fraction * (1 - a)


def maxtext_2026_lr(
    s,
    lr,
    steps,
    schedule_steps,
    warmup_fraction,
    final_fraction,
    kind="cosine",
    wsd_fraction=0.1,
    wsd_style="linear",
):
    """MaxText since learning_rate_final_fraction (create_learning_rate_schedule): the cosine
    (and WSD's decay) reaches the final rate one step before L; 0 from L on."""
    length = steps if schedule_steps == -1 else schedule_steps
    warmup = int(length * warmup_fraction)
    final = lr * final_fraction
    if s < warmup:
        return lr * s / warmup
    if s >= length:
        return 0.0

    def cos(step, n):
        pct = step / (n - 1) if n > 1 else 1.0
        a = 0.5 * (math.cos(math.pi * pct) + 1)
        return lr * a + final * (1 - a)

    if kind == "cosine":
        return cos(s - warmup, length - warmup)
    decay = int(length * wsd_fraction)
    stable = length - warmup - decay
    if s < warmup + stable:
        return lr
    step = s - warmup - stable
    if wsd_style == "linear":
        return lr + (final - lr) * min(step / (decay - 1), 1.0)
    return cos(step, decay)


def prime_rl_lr(s, lr, steps, kind, warmup, decay, min_lr):
    start = min_lr / lr if min_lr > 0 else 1e-8
    if kind != "constant" and warmup > 0 and s < warmup:
        return lr * (start + (1 - start) * s / warmup)
    if kind == "cosine":
        e, t_max = s - warmup, steps - warmup
        return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * e / t_max)) / 2
    if kind == "linear" and decay > 0 and s >= steps - decay:
        e = s - (steps - decay)
        end = min_lr / lr if min_lr > 0 else 1e-8
        return lr * (1 + (end - 1) * min(e, decay - 1) / max(decay - 1, 1))
    return lr


def test_default_schedule_is_unchanged():
    optim = ConfigDict(dict(lr=1.0, min_lr=0.1, schedule="cosine", warmup_steps=4, decay_steps=0))
    schedule = learning_rate_schedule(optim, 20)
    for s in range(20):
        expected = (
            (s + 1) / 4 if s < 4 else 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (s - 4) / 16))
        )
        assert float(schedule(s)) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize(
    "style,extra",
    [
        ("cosine", []),
        ("linear", ["lr_decay_iters=30"]),
        ("constant", []),
        ("WSD", ["lr_wsd_decay_iters=12", "lr_wsd_decay_style=cosine"]),
        (
            "WSD",
            ["lr_wsd_decay_iters=10", "lr_wsd_decay_style=minus_sqrt", "lr_warmup_init=1.0e-6"],
        ),
    ],
)
def test_megatron_schedules_match(compat_samples, style, extra):
    native = [
        "train_iters=40",
        "lr_warmup_iters=5",
        "lr=3.0e-4",
        "min_lr=3.0e-5",
        f"lr_decay_style={style}",
        *extra,
    ]
    cfg, _ = compat.load_foreign(compat_samples / MEGATRON_EXP, env={}, native_overrides=native)
    values = dict(item.split("=") for item in native)
    decay = int(values.get("lr_decay_iters", 40))
    expected = [
        megatron_lr(
            s,
            3e-4,
            3e-5,
            5,
            decay,
            style,
            float(values.get("lr_warmup_init", 0.0)),
            int(values.get("lr_wsd_decay_iters", 0)),
            values.get("lr_wsd_decay_style", "linear"),
        )
        for s in range(40)
    ]
    np.testing.assert_allclose(jaxtrain_rates(cfg), expected, rtol=1e-5, atol=1e-12)


@pytest.mark.parametrize(
    "decay_ratio,decay_type,factor,warmup",
    [
        (None, "linear", 0.0, 5),
        (0.5, "cosine", 0.1, 5),
        (0.3, "sqrt", 0.2, 3),
        (0.9, "linear", 0.0, 4),  # warmup + decay > steps: decay shrinks to steps - warmup
    ],
)
def test_torchtitan_schedules_match(tmp_path, decay_ratio, decay_type, factor, warmup):
    ratio = "" if decay_ratio is None else f"decay_ratio = {decay_ratio}\n"
    toml = tmp_path / "job.toml"
    toml.write_text(
        '[model]\nname = "llama3"\nflavor = "debugmodel"\n[optimizer]\nlr = 0.001\n'
        f'[lr_scheduler]\nwarmup_steps = {warmup}\n{ratio}decay_type = "{decay_type}"\n'
        f"min_lr_factor = {factor}\n[training]\nsteps = 30\nseq_len = 64\n"
        'local_batch_size = 1\ndataset = "c4"\n'
    )
    cfg, report = compat.load_foreign(
        toml, {"data.kind": "synthetic"}, env={}, allow_unsupported=True
    )
    expected = [
        torchtitan_lr(s, 1e-3, 30, warmup, decay_ratio, decay_type, factor) for s in range(30)
    ]
    np.testing.assert_allclose(jaxtrain_rates(cfg), expected, rtol=1e-5, atol=1e-12)


MAXTEXT_MODEL = (
    "dataset_type: synthetic\nmax_target_length: 64\nper_device_batch_size: 1\n"
    "base_emb_dim: 64\nbase_num_query_heads: 4\nbase_num_kv_heads: 4\n"
    "base_mlp_dim: 128\nbase_num_decoder_layers: 2\nhead_dim: 16\n"
    "vocab_size: 256\n"
)


def test_maxtext_schedule_before_2026_matches_including_the_zero_tail(tmp_path):
    # cosine_learning_rate_final_fraction: a config of MaxText before January 2026.
    yml = tmp_path / "run.yml"
    yml.write_text(
        "run_name: sched\nsteps: 40\nlearning_rate: 2.0e-4\n"
        "warmup_steps_fraction: 0.2\nlearning_rate_schedule_steps: 30\n"
        f"cosine_learning_rate_final_fraction: 0.05\n{MAXTEXT_MODEL}"
    )
    cfg, _ = compat.load_foreign(yml, env={})
    expected = [maxtext_lr(s, 2e-4, 40, 30, 0.2, 0.05) for s in range(40)]
    np.testing.assert_allclose(jaxtrain_rates(cfg), expected, rtol=1e-5, atol=1e-12)


@pytest.mark.parametrize(
    "extra",
    [
        "",
        "lr_schedule_type: wsd\nwsd_decay_steps_fraction: 0.3\n",
        "lr_schedule_type: wsd\nwsd_decay_steps_fraction: 0.25\nwsd_decay_style: cosine\n",
    ],
)
def test_maxtext_2026_schedule_reaches_the_final_rate_a_step_early(tmp_path, extra):
    # learning_rate_final_fraction (MaxText since January 2026): the last step runs at the
    # final rate (the earlier formula reached it only at step L, one step past the run).
    yml = tmp_path / "run.yml"
    yml.write_text(
        "run_name: sched\nsteps: 40\nlearning_rate: 2.0e-4\n"
        "warmup_steps_fraction: 0.2\nlearning_rate_final_fraction: 0.05\n"
        f"{extra}{MAXTEXT_MODEL}"
    )
    cfg, report = compat.load_foreign(yml, env={})
    values = dict(line.split(": ") for line in extra.splitlines())
    expected = [
        maxtext_2026_lr(
            s,
            2e-4,
            40,
            -1,
            0.2,
            0.05,
            values.get("lr_schedule_type", "cosine"),
            float(values.get("wsd_decay_steps_fraction", 0.1)),
            values.get("wsd_decay_style", "linear"),
        )
        for s in range(40)
    ]
    assert expected[39] == pytest.approx(2e-4 * 0.05)
    np.testing.assert_allclose(jaxtrain_rates(cfg), expected, rtol=1e-5, atol=1e-12)
    assert report.by_status("unsupported") == []


def test_maxtext_2026_schedule_with_a_zero_tail_is_unsupported(tmp_path):
    # learning_rate_schedule_steps < steps: MaxText trains the last steps at rate 0 after
    # reaching the final rate at L - 1; jaxtrain's schedule cannot express both.
    yml = tmp_path / "run.yml"
    yml.write_text(
        "run_name: sched\nsteps: 40\nlearning_rate: 2.0e-4\n"
        "warmup_steps_fraction: 0.2\nlearning_rate_schedule_steps: 30\n"
        f"learning_rate_final_fraction: 0.05\n{MAXTEXT_MODEL}"
    )
    with pytest.raises(ConfigError, match="learning_rate_schedule_steps=30"):
        compat.load_foreign(yml, env={})
    cfg, _ = compat.load_foreign(yml, env={}, allow_unsupported=True)
    expected = [maxtext_2026_lr(s, 2e-4, 40, 30, 0.2, 0.05) for s in range(40)]
    np.testing.assert_allclose(jaxtrain_rates(cfg)[:30], expected[:30], rtol=1e-5, atol=1e-12)


@pytest.mark.parametrize(
    "scheduler,kind,warmup,decay,min_lr",
    [
        ("", "linear", 10, 0, 0.0),  # prime-rl's pretrain default: 10 warmup steps, then constant
        ('[scheduler]\ntype = "cosine"\nwarmup_steps = 4\nmin_lr = 1.0e-5\n', "cosine", 4, 0, 1e-5),
        ('[scheduler]\ntype = "linear"\nwarmup_steps = 3\ndecay_steps = 8\n', "linear", 3, 8, 0.0),
        ('[scheduler]\ntype = "constant"\n', "constant", 0, 0, 0.0),
    ],
)
def test_prime_rl_schedules_match(tmp_path, scheduler, kind, warmup, decay, min_lr):
    toml = tmp_path / "pretrain.toml"
    toml.write_text(
        f'mode = "pretrain"\nmax_steps = 30\n[model]\nname = "Qwen/Qwen3-0.6B"\n'
        f'[data]\npaths = ["shards"]\nseq_len = 64\nbatch_size = 8\n{scheduler}'
    )
    cfg, _ = compat.load_foreign(toml, env={})
    expected = [prime_rl_lr(s, 1e-3, 30, kind, warmup, decay, min_lr) for s in range(30)]
    np.testing.assert_allclose(jaxtrain_rates(cfg), expected, rtol=1e-5, atol=1e-12)
