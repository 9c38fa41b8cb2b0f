"""What foreign configs name but do not spell out, resolved offline.

A Hugging Face model or tokenizer name is looked up, in order, as a local folder, in the local
Hugging Face cache, then in the tables below (published architectures and tokenizer sizes of the
models the presets cover). Nothing here touches the network. Also: the device count a launcher
would have used, from its environment variables.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Hugging Face repository names (lower case, organisation dropped) -> jaxtrain preset. A name
# matches when it starts with the key followed by nothing or a separator, so fine-tunes of a
# base model ("Qwen3-0.6B-Reverse-Text-SFT") resolve to its architecture.
HF_PRESETS: dict[str, str] = {
    "llama-2-7b": "llama2-7b",
    "llama-2-13b": "llama2-13b",
    "llama-2-70b": "llama2-70b",
    "meta-llama-3-8b": "llama3-8b",
    "meta-llama-3-70b": "llama3-70b",
    "llama-3-8b": "llama3-8b",
    "llama-3-70b": "llama3-70b",
    "llama-3.1-8b": "llama3.1-8b",
    "llama-3.1-70b": "llama3.1-70b",
    "llama-3.1-405b": "llama3.1-405b",
    "meta-llama-3.1-8b": "llama3.1-8b",
    "meta-llama-3.1-70b": "llama3.1-70b",
    "meta-llama-3.1-405b": "llama3.1-405b",
    "llama-3.2-1b": "llama3.2-1b",
    "llama-3.2-3b": "llama3.2-3b",
    "llama-3.3-70b": "llama3.3-70b",
    "qwen2.5-3b": "qwen2.5-3b",
    "qwen2.5-7b": "qwen2.5-7b",
    "qwen2.5-14b": "qwen2.5-14b",
    "qwen2.5-32b": "qwen2.5-32b",
    "qwen2.5-72b": "qwen2.5-72b",
    "qwen3-0.6b": "qwen3-0.6b",
    "qwen3-1.7b": "qwen3-1.7b",
    "qwen3-4b": "qwen3-4b",
    "qwen3-8b": "qwen3-8b",
    "qwen3-14b": "qwen3-14b",
    "qwen3-32b": "qwen3-32b",
    "mistral-7b": "mistral-7b",
    "meta-llama-3.2-1b": "llama3.2-1b",
    "meta-llama-3.2-3b": "llama3.2-3b",
    "meta-llama-3.3-70b": "llama3.3-70b",
    "mixtral-8x7b": "mixtral-8x7b",
    "mixtral-8x22b": "mixtral-8x22b",
    "qwen3-30b-a3b": "qwen3-30b-a3b",
    "qwen3-235b-a22b": "qwen3-235b-a22b",
    "qwen3-next-80b-a3b": "qwen3-next-80b-a3b",
    "qwen3.5-35b-a3b": "qwen3.5-35b-a3b",
    "qwen3.5-397b-a17b": "qwen3.5-397b-a17b",
    "deepseek-v2-lite": "deepseek-v2-lite",
    "deepseek-v2": "deepseek-v2",
    "deepseek-v3": "deepseek-v3",
    "gpt-oss-20b": "gpt-oss-20b",
    "gpt-oss-120b": "gpt-oss-120b",
    "llama-4-scout-17b-16e": "llama4-scout-17b-16e",
    "llama-4-maverick-17b-128e": "llama4-maverick-17b-128e",
}

# len(tokenizer) of published tokenizers (regular vocabulary plus added special tokens): the
# size Megatron's HuggingFaceTokenizer reports before padding the embedding.
# Every tokenizer a pretraining config of Primus, MaxText or TorchTitan names (at the commits
# of tests/fixtures/compat/SOURCES.md) for an architecture the zoo builds.
TOKENIZER_SIZES: dict[str, int] = {
    "llama-2-": 32000,
    "meta-llama-3-": 128256,
    "llama-3-": 128256,
    "llama-3.1-": 128256,
    "meta-llama-3.1-": 128256,
    "llama-3.2-": 128256,
    "llama-3.3-": 128256,
    "meta-llama-3.2-": 128256,
    "meta-llama-3.3-": 128256,
    "llama-4-": 202048,  # 200000 + 2048 special tokens, as Llama 3's 128000 + 256
    "qwen3-": 151669,  # 151643 + 26 special tokens
    "qwen2.5-": 151665,  # 151643 + 22 special tokens
    "deepseek-r1-distill-qwen-": 151665,  # Qwen 2.5's tokenizer
    "mistral-7b": 32000,
    "mixtral-8x7b": 32000,
    "mixtral-8x22b": 32768,  # Mistral's v3 tokenizer
    "deepseek-v2": 100015,  # DeepSeek LLM's: 100000 + 15 special tokens (V2-Lite too)
    "deepseek-v3": 128815,  # 128000 + 815 special tokens (ids up to 128814)
    "kimi-k2-": 163840,  # 163584 + 256 reserved special tokens
    "glm-4-9b": 151343,  # 151329 + 14 special tokens ([gMASK], <|user|>, ...)
    "gpt-neox-20b": 50277,  # 50254 + 23 added tokens (Primus' Mamba configs)
}


def _short(name: str) -> str:
    return name.strip().rstrip("/").rsplit("/", 1)[-1].lower()


def _prefix_match(name: str, table: Mapping[str, Any]) -> str | None:
    short = _short(name)
    best = None
    for key in table:
        if short == key or (
            short.startswith(key) and (key.endswith("-") or short[len(key)] in "-_.")
        ):
            best = key if best is None or len(key) > len(best) else best
    return best


def preset_for_hf_name(name: str) -> str | None:
    """The jaxtrain preset of a published model name, or None."""
    key = _prefix_match(name, HF_PRESETS)
    return HF_PRESETS[key] if key else None


def cached_file(repo: str, filename: str) -> Path | None:
    """A file of a Hugging Face repository from a local folder or the local cache, else None."""
    folder = Path(repo).expanduser()
    if folder.is_dir():
        return folder / filename if (folder / filename).is_file() else None
    if repo.count("/") != 1 or repo.startswith((".", "/")):
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo, filename)
    except Exception:  # an invalid repository id is simply not cached
        return None
    return Path(found) if isinstance(found, str) else None


def hf_config_dict(name: str) -> tuple[dict[str, Any] | None, str]:
    """A model's config.json from a local folder or the HF cache: (dict or None, where)."""
    path = cached_file(name, "config.json")
    if path is None:
        return None, ""
    with open(path) as f:
        return json.load(f), str(path)


def tokenizer_size(name: str) -> tuple[int | None, str]:
    """len(tokenizer) for a tokenizer name or folder, and how it was found.

    A local folder or cached tokenizer is loaded (offline); otherwise the published size from
    TOKENIZER_SIZES is used. (None, reason) when neither knows it.
    """
    if not name:
        return None, "no tokenizer named"
    if cached_file(name, "tokenizer.json") or cached_file(name, "tokenizer_config.json"):
        try:
            from transformers import AutoTokenizer

            folder = Path(name)
            tok = AutoTokenizer.from_pretrained(
                str(folder) if folder.is_dir() else name, local_files_only=True
            )
            return len(tok), f"counted from the tokenizer files of {name}"
        except Exception as e:  # a broken cache entry falls back to the table
            reason = f"tokenizer files of {name} could not be loaded ({type(e).__name__})"
    else:
        reason = f"{name} is neither a local folder nor in the Hugging Face cache"
    key = _prefix_match(name, TOKENIZER_SIZES)
    if key:
        return TOKENIZER_SIZES[key], (
            f"{reason}; used the published size from jaxtrain's offline table"
        )
    return None, reason


def local_tokenizer_folder(name: str | None) -> str:
    """`name` when it is a local folder holding tokenizer files, else ""."""
    if not name:
        return ""
    folder = Path(str(name)).expanduser()
    has_files = (folder / "tokenizer.json").is_file() or (
        folder / "tokenizer_config.json"
    ).is_file()
    return str(folder) if folder.is_dir() and has_files else ""


def named_in_env(env: Mapping[str, str], *keys: str) -> str:
    """`KEY=value, ...` for those of `keys` (and WORLD_SIZE) the environment sets to a count."""
    return ", ".join(
        f"{k}={env[k]}"
        for k in (*keys, "WORLD_SIZE")
        if k and str(env.get(k, "")).strip().isdigit()
    )


def world_size(
    env: Mapping[str, str] | None = None,
    nodes_key: str = "NNODES",
    gpus_key: str = "GPUS_PER_NODE",
    nodes_default: int = 1,
    gpus_default: int = 8,
) -> tuple[int, int, str]:
    """(nodes, devices per node, how they were found) of the launch a config was written for.

    WORLD_SIZE, when set, wins (with one node unless the node count is set too).
    """
    env = os.environ if env is None else env

    def read(key: str | None, default: int) -> tuple[int, bool]:
        value = env.get(key or "", "")
        return (int(value), True) if value.strip().isdigit() else (default, False)

    nodes, nodes_set = read(nodes_key, nodes_default)
    gpus, gpus_set = read(gpus_key, gpus_default)
    total, total_set = read("WORLD_SIZE", 0)
    if total_set and total > 0:
        nodes = nodes if nodes_set and total % nodes == 0 else 1
        return nodes, total // nodes, f"WORLD_SIZE={total}"
    how = ", ".join(
        [
            f"{nodes_key}={nodes}" + ("" if nodes_set else " (default)"),
            f"{gpus_key}={gpus}" + ("" if gpus_set else " (default)"),
        ]
    )
    return nodes, gpus, how
