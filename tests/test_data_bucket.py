"""Tokenized shards in an S3 bucket (moto's server on 127.0.0.1) read as the same shards in a local
folder do: the same batches token for token, shuffled or not, with or without worker processes;
token windows come by ranged reads, and bad URLs fail with one line naming the URL and the fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import boto3
import numpy as np
import pytest
import s3_fixture
from data_fixtures import DatatroveCorpus, corpus_texts, write_raw_megatron, write_raw_shard
from ml_collections import ConfigDict
from test_cli_faults import one_line_error

from jaxtrain.config.loader import load_config
from jaxtrain.data import bucket_files
from jaxtrain.data.datatrove import find_shards
from jaxtrain.data.errors import DataError
from jaxtrain.data.megatron import megatron_files
from jaxtrain.data.pipeline import make_eval_batches, make_train_iterator

REPO = Path(__file__).resolve().parent.parent
BUCKET = s3_fixture.BUCKET


def upload(folder: Path, prefix: str) -> str:
    """Copies every file of `folder` (not deeper) to s3://BUCKET/prefix/; returns that URL."""
    client = boto3.client("s3")
    for f in sorted(folder.iterdir()):
        if f.is_file():
            client.upload_file(str(f), BUCKET, f"{prefix}/{f.name}")
    return f"s3://{BUCKET}/{prefix}"


@pytest.fixture(scope="module")
def base_cfg() -> ConfigDict:
    """configs/base.py, loaded once."""
    return load_config(str(REPO / "configs" / "base.py"))


def _cfg(base: ConfigDict, **values: object) -> ConfigDict:
    cfg = ConfigDict(base.to_dict())
    values = {"train.seq_len": 16, "train.global_batch_size": 4, "data.prefetch": 2, **values}
    for key, value in values.items():
        section, leaf = key.split(".")
        cfg[section][leaf] = value
    return cfg


def _batches(cfg: ConfigDict, n: int) -> list[dict[str, np.ndarray]]:
    it = make_train_iterator(cfg, vocab_size=400)
    try:
        return [next(it) for _ in range(n)]
    finally:
        if hasattr(it, "close"):
            it.close()


def _assert_same(a: list[dict[str, np.ndarray]], b: list[dict[str, np.ndarray]]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert sorted(x) == sorted(y)
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])


@pytest.fixture(scope="module")
def megatron_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two Megatron datasets whose names sort differently with and without extension."""
    folder = tmp_path_factory.mktemp("megatron")
    rng = np.random.default_rng(0)
    for name in ("corpus", "corpus-b"):
        docs = [rng.integers(0, 400, int(rng.integers(3, 40))).tolist() for _ in range(60)]
        write_raw_megatron(folder / name, docs)
    return folder


@pytest.mark.parametrize("shuffle", [True, False])
def test_datatrove_shards_in_a_bucket_give_the_local_batches(
    s3_server, base_cfg, datatrove_corpus: DatatroveCorpus, shuffle: bool
) -> None:
    url = upload(datatrove_corpus.folder, f"datatrove-{shuffle}")
    assert [str(s.path).rsplit("/", 1)[1] for s in find_shards([url])] == [
        s.path.name for s in find_shards([str(datatrove_corpus.folder)])
    ]
    local = _cfg(base_cfg, **{"data.kind": "datatrove", "data.shuffle": shuffle})
    local.data.paths = str(datatrove_corpus.folder)
    remote = ConfigDict(local.to_dict())
    remote.data.paths = url
    _assert_same(_batches(remote, 6), _batches(local, 6))
    local.data.val_paths, remote.data.val_paths = local.data.paths, remote.data.paths
    local.train.eval_batches = remote.train.eval_batches = 2
    _assert_same(
        list(make_eval_batches(remote, vocab_size=400)()),
        list(make_eval_batches(local, vocab_size=400)()),
    )


@pytest.mark.parametrize("shuffle", [True, False])
def test_megatron_datasets_in_a_bucket_give_the_local_batches(
    s3_server, base_cfg, megatron_folder: Path, shuffle: bool
) -> None:
    url = upload(megatron_folder, f"megatron-{shuffle}")
    assert [str(f.prefix).rsplit("/", 1)[1] for f in megatron_files(url)] == ["corpus", "corpus-b"]
    assert [f.prefix.name for f in megatron_files(str(megatron_folder))] == ["corpus", "corpus-b"]
    local = _cfg(base_cfg, **{"data.kind": "megatron", "data.shuffle": shuffle})
    local.data.paths = str(megatron_folder / "corpus") + "," + str(megatron_folder / "corpus-b")
    remote = ConfigDict(local.to_dict())
    remote.data.paths = f"{url}/corpus,{url}/corpus-b.bin"  # a prefix, or one of its files
    _assert_same(_batches(remote, 6), _batches(local, 6))
    remote.data.paths = url  # the folder of datasets
    local.data.paths = str(megatron_folder)
    _assert_same(_batches(remote, 6), _batches(local, 6))


def test_loss_masks_and_weighted_mixtures_from_buckets_match_local(
    s3_server, base_cfg, tmp_path
) -> None:
    rng = np.random.default_rng(1)
    for name in ("a", "b"):
        docs = [rng.integers(0, 400, int(rng.integers(5, 60))).tolist() for _ in range(40)]
        loss = rng.integers(0, 2, sum(len(d) for d in docs)).tolist()
        write_raw_shard(tmp_path / name, "00000.ds", docs, loss=loss)
    urls = {name: upload(tmp_path / name, f"mix-{name}") for name in ("a", "b")}
    local = _cfg(base_cfg, **{"data.kind": "datatrove"})
    local.data.paths = f"0.7:{tmp_path / 'a'},0.3:{tmp_path / 'b'}"
    local.data.reset_attention_mask = local.data.eod_mask_loss = True
    remote = ConfigDict(local.to_dict())
    remote.data.paths = f"0.7:{urls['a']},0.3:{urls['b']}"
    got, want = _batches(remote, 6), _batches(local, 6)
    assert any(np.any(b["loss_mask"] == 0) for b in want)  # the .ds.loss masks were read
    _assert_same(got, want)


def test_token_windows_are_ranged_reads(s3_server, tmp_path, monkeypatch) -> None:
    folder = tmp_path / "big"
    write_raw_shard(folder, "00000.ds", [list(range(i, i + 1000)) for i in range(50)], width=4)
    url = upload(folder, "ranged")
    reads: list[tuple[str, int, int]] = []
    real = bucket_files.read_range

    def counted(path, start, stop):
        reads.append((str(path), start, stop))
        return real(path, start, stop)

    monkeypatch.setattr(bucket_files, "read_range", counted)
    shard = find_shards([url])[0]
    reads.clear()  # opening reads the index's last entry and the index, never tokens
    window = np.asarray(shard.tokens[20_000:20_017])
    np.testing.assert_array_equal(window, np.arange(20, 37))
    assert reads == [(f"{url}/00000.ds", 80_000, 80_068)]


def test_a_bucket_pool_is_never_downloaded_whole(s3_server, base_cfg, tmp_path, monkeypatch):
    folder = tmp_path / "pool"
    docs = [[(i * 7 + j) % 399 for j in range(1000)] for i in range(300)]  # 300K uint16 tokens
    write_raw_shard(folder, "00000.ds", docs)
    url = upload(folder, "whole-pool")
    fetched: list[int] = []
    real = bucket_files.read_range

    def counted(path, start, stop):
        if str(path).endswith(".ds"):
            fetched.append(stop - start)
        return real(path, start, stop)

    monkeypatch.setattr(bucket_files, "read_range", counted)
    cfg = _cfg(base_cfg, **{"data.kind": "datatrove", "data.paths": url})
    _batches(cfg, 2)
    # The start-up checks read the shard's head (EOS and vocabulary), then one read per window.
    assert sum(fetched) < 300_000 * 2 // 2
    assert len(fetched) <= 3 + 2 * 4


@pytest.mark.slow  # worker processes start by importing jax: ~10 s on two cores
def test_worker_processes_read_the_bucket(s3_server, base_cfg, datatrove_corpus) -> None:
    url = upload(datatrove_corpus.folder, "datatrove-workers")
    local = _cfg(base_cfg, **{"data.kind": "datatrove"})
    local.data.paths = str(datatrove_corpus.folder)
    remote = ConfigDict(local.to_dict())
    remote.data.paths = url
    remote.data.worker_count = 1
    _assert_same(_batches(remote, 4), _batches(local, 4))


def test_bad_urls_are_one_line_naming_the_url(s3_server, tmp_path) -> None:
    with pytest.raises(DataError, match=r"s3://no-such-bucket/x.*does not exist") as e:
        find_shards(["s3://no-such-bucket/x"])
    assert "\n" not in str(e.value)
    with pytest.raises(DataError, match=r"s3://jaxtrain-test/nothing-here: no \*\.ds shards"):
        find_shards([f"s3://{BUCKET}/nothing-here"])
    with pytest.raises(DataError, match=r"no Megatron dataset"):
        megatron_files(f"s3://{BUCKET}/nothing-here")
    write_raw_shard(tmp_path / "noindex", "00000.ds", [[1, 2, 3]])
    (tmp_path / "noindex" / "00000.ds.index").unlink()
    url = upload(tmp_path / "noindex", "noindex")
    with pytest.raises(DataError, match=r"00000.ds: its companion file 00000.ds.index is missing"):
        find_shards([url])


def test_refused_credentials_are_one_line_naming_the_url() -> None:
    # moto's server accepts any key unless IAM checks are on for the whole run, so the refusal
    # s3fs raises (PermissionError) is given to the translation directly.
    error = bucket_files._fail("s3://b/tokens", PermissionError("InvalidAccessKeyId"))
    assert isinstance(error, DataError) and "\n" not in str(error)
    assert str(error).startswith("s3://b/tokens: the store refused the credentials")
    assert "AWS_ACCESS_KEY_ID" in str(error)


@pytest.mark.slow  # compiles the debug model's train step twice (12 s with a warm cache)
def test_training_on_a_bucket_gives_the_losses_of_the_local_shards(
    s3_server, tmp_path, datatrove_corpus: DatatroveCorpus
) -> None:
    import jax
    from checkpoint_fixtures import losses, small_config

    from jaxtrain.trainer import Trainer

    url = upload(datatrove_corpus.folder, "datatrove-train")
    found = {}
    for where, paths in (("local", str(datatrove_corpus.folder)), ("bucket", url)):
        cfg = small_config(
            tmp_path / where,
            **{
                "data.kind": "datatrove",
                "data.paths": paths,
                "data.tokenizer": str(datatrove_corpus.tokenizer),
                "checkpoint.every": 0,
            },
        )
        trainer = Trainer(cfg, devices=jax.devices()[:1], console=False)
        try:
            trainer.run(3)
        finally:
            trainer.close()
        found[where] = losses(tmp_path / where)
    assert sorted(found["local"]) == [1, 2, 3]
    assert found["bucket"] == found["local"]


@pytest.fixture(scope="module")
def text_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Raw text as JSONL, gzipped JSONL and Parquet (two row groups of 16)."""
    import gzip
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path_factory.mktemp("text")
    texts = corpus_texts(120, seed=5)
    (folder / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:40]))
    with gzip.open(folder / "b.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts[40:80])
    pq.write_table(pa.table({"text": texts[80:]}), folder / "c.parquet", row_group_size=16)
    return folder


@pytest.mark.parametrize("shuffle", [True, False])
def test_raw_text_in_a_bucket_gives_the_local_batches(
    s3_server, base_cfg, text_corpus: Path, tiny_tokenizer: Path, tmp_path, monkeypatch, shuffle
) -> None:
    monkeypatch.setenv("JAXTRAIN_TEXT_CACHE", str(tmp_path / "cache"))
    url = upload(text_corpus, f"text-{shuffle}")
    local = _cfg(base_cfg, **{"data.kind": "text", "data.shuffle": shuffle})
    local.data.paths, local.data.tokenizer = str(text_corpus), str(tiny_tokenizer)
    remote = ConfigDict(local.to_dict())
    remote.data.paths = url
    _assert_same(_batches(remote, 6), _batches(local, 6))
    remote.data.paths = f"{url}/c.parquet"  # one object
    local.data.paths = str(text_corpus / "c.parquet")
    _assert_same(_batches(remote, 3), _batches(local, 3))


def test_a_text_folder_in_a_bucket_is_searched_in_the_local_order(s3_server, tmp_path) -> None:
    from jaxtrain.data.text_files import text_files

    folder = tmp_path / "nested"
    for name in ("a/b.jsonl", "a-c.jsonl", "a/z/d.parquet", "b.txt", "notes.csv"):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("{}")
    client = boto3.client("s3")
    for f in folder.rglob("*"):
        if f.is_file():
            client.upload_file(str(f), BUCKET, f"nested/{f.relative_to(folder)}")
    local = [str(f.relative_to(folder)) for f in text_files(str(folder))]
    assert local == ["a/b.jsonl", "a/z/d.parquet", "a-c.jsonl", "b.txt"]
    remote = text_files(f"s3://{BUCKET}/nested")
    assert [u.split("/nested/", 1)[1] for u in remote] == local


def test_array_records_in_a_bucket_are_refused_naming_the_fix(s3_server, tmp_path) -> None:
    from jaxtrain.data.text_files import text_files

    (tmp_path / "ar").mkdir()
    (tmp_path / "ar" / "x.array_record-00000-of-00001").write_bytes(b"")
    url = upload(tmp_path / "ar", "arrayrecord")
    with pytest.raises(DataError, match=r"ArrayRecord files are read from local disk only"):
        text_files(url)
    with pytest.raises(DataError, match=r"no \.jsonl.*under it"):
        text_files(f"s3://{BUCKET}/nothing-here")


def test_the_cli_prints_one_line_and_exits_2_for_a_missing_bucket(
    s3_server, tmp_path, datatrove_corpus: DatatroveCorpus
) -> None:
    url = "s3://no-such-bucket/tokens"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "jaxtrain",
            "--config",
            "configs/llama_debug.py",
            f"--config.run.dir={tmp_path / 'run'}",
            "--config.data.kind=datatrove",
            f"--config.data.paths={url}",
            f"--config.data.tokenizer={datatrove_corpus.tokenizer}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"},
    )
    line = one_line_error(out)
    assert url in line and "does not exist" in line


@pytest.mark.slow  # trains the debug model twice (a few seconds each with a warm cache)
def test_init_from_a_checkpoint_or_hugging_face_folder_in_a_bucket(
    s3_server, tmp_path, capsys, monkeypatch
) -> None:
    import jax
    from checkpoint_fixtures import small_config

    from jaxtrain.trainer import Trainer

    url = f"s3://{BUCKET}/init-source"
    source = Trainer(
        small_config(tmp_path / "source", **{"checkpoint.dir": url}),
        devices=jax.devices()[:1],
        console=False,
    )
    source.run(2)  # a checkpoint at step 2
    want = [np.asarray(x) for x in jax.tree.leaves(jax.device_get(source.state["params"]))]
    source.close()
    capsys.readouterr()
    for init_from in (f"{url}/2", url):
        run = Trainer(
            small_config(tmp_path / init_from[-1], **{"checkpoint.init_from": init_from}),
            devices=jax.devices()[:1],
            console=False,
        )
        got = [np.asarray(x) for x in jax.tree.leaves(jax.device_get(run.state["params"]))]
        run.close()
        assert run.step == 0
        assert f"from {url} (jaxtrain checkpoint, step 2)" in capsys.readouterr().out
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)

    from jaxtrain.checkpoint import init_from as init_from_lib
    from jaxtrain.commands.export import export_hf

    monkeypatch.setattr(init_from_lib, "HF_COPIES", tmp_path / "copies")
    hf_url = upload(export_hf(tmp_path / "source", tmp_path / "hf"), "init-hf")
    run = Trainer(
        small_config(tmp_path / "from-hf", **{"checkpoint.init_from": hf_url}),
        devices=jax.devices()[:1],
        console=False,
    )
    got = [np.asarray(x) for x in jax.tree.leaves(jax.device_get(run.state["params"]))]
    run.close()
    assert "(Hugging Face checkpoint); optimizer state initialised" in capsys.readouterr().out
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_init_from_a_missing_bucket_is_one_line(s3_server) -> None:
    from jaxtrain.checkpoint.init_from import find_source
    from jaxtrain.checkpoint.manager import CheckpointError

    with pytest.raises(CheckpointError, match=r"s3://no-such-bucket/ckpt/2: bucket .* not exist"):
        find_source("s3://no-such-bucket/ckpt/2")


def test_foreign_configs_map_bucket_urls_onto_data_paths(compat_samples, tmp_path) -> None:
    from test_compat_train import LLAMA2, SHRINK

    from jaxtrain import compat
    from jaxtrain.data.sources import SourceSpec, parse_sources

    blend = "0.7 s3://corpus/a_text_document 0.3 s3://corpus/b_text_document"
    cfg, _ = compat.load_foreign(
        compat_samples / LLAMA2,
        {"run.dir": str(tmp_path / "run")},
        env={},
        native_overrides=[*SHRINK, "mock_data=false", f"data_path={blend}"],
    )
    assert (cfg.data.kind, cfg.data.paths) == ("megatron", blend)
    assert parse_sources(cfg.data.paths, cfg.data.kind) == [
        SourceSpec("s3://corpus/a_text_document", 0.7),
        SourceSpec("s3://corpus/b_text_document", 0.3),
    ]
    toml = (compat_samples / "prime-hosted" / "pretrain.toml").read_text()
    toml = toml.replace('"datasets/tinystories/train"', '"s3://corpus/train", "s3://corpus/more"')
    (tmp_path / "pretrain.toml").write_text(toml.replace("datasets/tinystories", "s3://corpus"))
    cfg, _ = compat.load_foreign(tmp_path / "pretrain.toml", env={})
    assert (cfg.data.kind, cfg.data.paths, cfg.data.val_paths) == (
        "datatrove",
        "s3://corpus/train,s3://corpus/more",
        "s3://corpus/val",
    )
