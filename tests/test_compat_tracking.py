"""Other stacks' Weights & Biases, profiler and straggler keys map onto metrics.wandb_*,
train.profile_* and train.straggler_*: prime-rl's [wandb] table, Primus/Megatron's wandb_*,
disable_wandb and log_straggler, MaxText's enable_wandb and profiler keys."""

from __future__ import annotations

import pytest
from test_compat_primus import experiment, fake_primus, load  # noqa: F401

from jaxtrain import compat


def test_prime_rl_wandb_table(tmp_path, compat_samples):
    text = (compat_samples / "prime-hosted" / "pretrain.toml").read_text()
    path = tmp_path / "pretrain.toml"
    path.write_text(
        text + '\n[wandb]\nproject = "tiny"\nname = "r1"\noffline = true\ntags = ["a", "b"]\n'
    )
    cfg, report = compat.load_foreign(path)
    m = cfg.metrics
    assert (m.wandb_project, m.wandb_name, m.wandb_mode, m.wandb_tags) == (
        "tiny",
        "r1",
        "offline",
        "a,b",
    )
    assert report.entries["wandb.offline"].status == "mapped"
    # Without the table nothing is logged to wandb.
    path.write_text(text)
    assert compat.load_foreign(path)[0].metrics.wandb_project == ""


@pytest.mark.parametrize("disabled", [False, True])
def test_primus_megatron_wandb_keys(fake_primus, disabled):  # noqa: F811
    path = experiment(
        fake_primus,
        f"""\
        hidden_size: 64
        wandb_project: pretrain
        wandb_exp_name: tiny-1
        wandb_save_dir: /scratch/wandb
        disable_wandb: {str(disabled).lower()}
        """,
    )
    cfg, report = compat.load_foreign(path, env={})
    m = cfg.metrics
    if disabled:
        assert m.wandb_project == "" and report.entries["wandb_project"].status == "ignored"
    else:
        assert (m.wandb_project, m.wandb_name, m.wandb_dir) == (
            "pretrain",
            "tiny-1",
            "/scratch/wandb",
        )
        assert report.entries["wandb_exp_name"].status == "mapped"


@pytest.mark.parametrize(("log_straggler", "every"), [("false", 0), ("true", 5)])
def test_primus_megatron_straggler_keys(fake_primus, log_straggler, every):  # noqa: F811
    path = experiment(
        fake_primus,
        f"""\
        hidden_size: 64
        log_interval: 5
        log_straggler: {log_straggler}
        straggler_minmax_count: 1
        """,
    )
    cfg, report = compat.load_foreign(path, env={})
    assert cfg.train.straggler_every == every
    assert report.entries["log_straggler"].status == "mapped"
    assert report.entries["straggler_minmax_count"].status == "ignored"


def test_maxtext_profiler_and_wandb_keys(compat_samples):
    cfg, report = load(
        compat_samples,
        "maxtext",
        "llama2_7B-bf16-pretrain.yaml",
        native_overrides=[
            "profiler=xplane",
            "skip_first_n_steps_for_profiler=3",
            "profiler_steps=2",
            "enable_wandb=true",
            "wandb_run_name=r7",
        ],
    )
    assert (cfg.train.profile_start, cfg.train.profile_steps) == (4, 2)  # MaxText counts from 0
    assert (cfg.metrics.wandb_project, cfg.metrics.wandb_name) == ("maxtext", "r7")
    assert report.entries["profiler"].status == "mapped"
