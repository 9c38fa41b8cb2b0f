"""Every stack's file resumes when run again, and its resume and retention keys keep their meaning:
no source key makes a rerun start over by accident or delete a checkpoint the source would keep."""

import pytest

from jaxtrain import compat
from jaxtrain.errors import ConfigError

PRETRAIN = "prime-hosted/pretrain.toml"
TITAN = "torchtitan/torchtitan/models/llama3/train_configs/llama3_8b.toml"
MEGATRON = "Primus/examples/megatron/configs/MI300X/llama2_7B-BF16-pretrain.yaml"


def prime(samples, *native, allow=False):
    return compat.load_foreign(
        samples / PRETRAIN, env={}, native_overrides=list(native), allow_unsupported=allow
    )


def test_prime_rl_sample_resumes_and_keeps_every_checkpoint(compat_samples):
    cfg, report = prime(compat_samples)
    c = cfg.checkpoint
    assert (c.resume, c.resume_step, c.keep, c.keep_every, c.every) == (True, -1, 0, 0, 50)
    keep = report.entries["ckpt.keep_last"]
    assert (keep.status, keep.target, keep.origin) == (
        "mapped",
        "checkpoint.keep",
        "prime-rl default",
    )
    assert "default None keeps every checkpoint (checkpoint.keep=0)" in keep.reason
    resume = report.entries["resume"]
    assert (resume.status, resume.target) == ("mapped", "checkpoint.resume")
    assert "jaxtrain resumes the run's latest complete checkpoint" in resume.reason
    assert report.by_status("unsupported") == []


def test_prime_rl_checkpoint_keys_map_with_their_meaning(compat_samples):
    cfg, report = prime(
        compat_samples,
        "ckpt.resume_step=-1",
        "ckpt.keep_last=2",
        "ckpt.keep_interval=100",
        "ckpt.save_async=false",
        "ckpt.weights.save_format=safetensors",
        "ckpt.skip_optimizer=false",
    )
    c = cfg.checkpoint
    assert (c.resume, c.resume_step, c.keep, c.keep_every) == (True, -1, 2, 100)
    e = report.entries
    assert e["ckpt.resume_step"].target == "checkpoint.resume_step"
    assert e["ckpt.keep_interval"].target == "checkpoint.keep_every"
    assert e["ckpt.save_async"].status == "mapped"
    assert "always saves asynchronously" in e["ckpt.save_async"].reason
    weights = e["ckpt.weights.save_format"]
    assert weights.status == "ignored" and "prime-rl 559b447 writes none" in weights.reason
    assert "python -m jaxtrain export" in weights.reason
    assert e["ckpt.skip_optimizer"].status == "ignored"
    assert report.by_status("unsupported") == []  # trains without --allow-unsupported

    cfg, report = prime(compat_samples, "ckpt.resume_step=50")
    assert (cfg.checkpoint.resume, cfg.checkpoint.resume_step) == (True, 50)
    cfg, report = prime(compat_samples, "resume.step=40")
    assert cfg.checkpoint.resume_step == 40
    assert report.entries["resume.step"].target == "checkpoint.resume_step"


def test_prime_rl_clean_starts_over_and_resume_wins_over_it(compat_samples):
    cfg, report = prime(compat_samples, "clean=true")
    assert not cfg.checkpoint.resume
    assert "jaxtrain deletes nothing" in report.entries["clean"].reason
    cfg, report = prime(compat_samples, "clean=true", "resume.step=40")
    assert cfg.checkpoint.resume and report.entries["clean"].status == "ignored"


def test_prime_rl_keys_jaxtrain_cannot_honour(compat_samples):
    _, report = prime(
        compat_samples, "ckpt.skip_optimizer=true", "resume.dir=/other/step_50", allow=True
    )
    assert {e.key for e in report.by_status("unsupported")} == {"ckpt.skip_optimizer", "resume.dir"}
    with pytest.raises(
        ConfigError, match="ckpt.resume_step=50 and \\[resume\\] step=40 name different steps"
    ):
        prime(compat_samples, "ckpt.resume_step=50", "resume.step=40")


def test_torchtitan_resumes_keeps_its_default_ten_and_reads_load_step(compat_samples):
    cfg, report = compat.load_foreign(compat_samples / TITAN, env={}, allow_unsupported=True)
    # enable = false: TorchTitan loads nothing, but a rerun resumes jaxtrain's final checkpoint.
    assert (cfg.checkpoint.resume, cfg.checkpoint.keep) == (True, 10)
    assert "a rerun resumes from it" in report.entries["checkpoint.enable"].reason
    cfg, report = compat.load_foreign(
        compat_samples / TITAN,
        env={},
        allow_unsupported=True,
        native_overrides=[
            "checkpoint.enable=true",
            "checkpoint.load_step=200",
            "checkpoint.keep_latest_k=0",
        ],
    )
    assert (cfg.checkpoint.resume_step, cfg.checkpoint.keep) == (200, 0)
    assert report.entries["checkpoint.load_step"].status == "mapped"


def test_maxtext_resumes_and_keeps_all_by_default(compat_samples, tmp_path):
    path = tmp_path / "run.yml"
    path.write_text(
        "base_config: base.yml\nmodel_name: llama2-7b\ndataset_type: synthetic\n"
        "enable_checkpointing: false\n"
    )
    root = str(compat_samples / "maxtext")
    cfg, report = compat.load_foreign(path, env={}, maxtext_root=root)
    assert (cfg.checkpoint.resume, cfg.checkpoint.keep) == (True, 0)  # base.yml: None
    assert report.entries["max_num_checkpoints_to_keep"].reason.startswith("None: keep all")
    _, report = compat.load_foreign(
        path,
        env={},
        maxtext_root=root,
        allow_unsupported=True,
        native_overrides=["load_parameters_path=gs://b/params"],
    )
    assert report.entries["load_parameters_path"].target == "checkpoint.init_from"
    _, report = compat.load_foreign(
        path,
        {"checkpoint.init_from": "hf/llama2"},
        env={},
        maxtext_root=root,
        native_overrides=["load_parameters_path=gs://b/params"],
    )
    assert report.entries["load_parameters_path"].status == "ignored"  # replaced


def test_megatron_resumes_and_deletes_nothing(compat_samples):
    cfg, report = compat.load_foreign(compat_samples / MEGATRON, env={})
    assert (cfg.checkpoint.resume, cfg.checkpoint.keep) == (True, 0)
    assert (
        "jaxtrain resumes the run's own checkpoints" in report.entries["auto_continue_train"].reason
    )
    cfg, report = compat.load_foreign(
        compat_samples / MEGATRON,
        env={},
        native_overrides=["save=/ckpt", "load=/ckpt", "ckpt_step=300", "save_retain_interval=1000"],
    )
    c = cfg.checkpoint
    assert (c.dir, c.resume_step, c.keep, c.keep_every) == ("/ckpt", 300, 1, 1000)
