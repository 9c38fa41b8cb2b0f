"""Which lm-evaluation-harness tasks to run, and their results as flat metrics.

A task is named as the harness names it (`hellaswag`, `arc_easy`: the harness's own YAMLs, whose
data come from the Hugging Face hub or its local dataset cache), or given as a folder (or one
file) of local task YAMLs. A local task's relative `data_files` are read beside its YAML, so a
folder of YAMLs and JSONL files can be copied anywhere, including to a cluster without internet.
"""

from __future__ import annotations

import copy
import functools
import math
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from jaxtrain.errors import ConfigError

# Metric keys in metrics.jsonl and TensorBoard: harness/<task>/<metric>, its stderr beside it.
PREFIX = "harness"


def parse_task_list(value: str | Sequence[str]) -> list[str]:
    """Comma-separated task names or paths (a config string, or a CLI list of them)."""
    items = [value] if isinstance(value, str) else list(value)
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def import_harness(where: str) -> Any:
    """The `lm_eval` package, or a ConfigError saying how to install it."""
    try:
        import lm_eval
    except ImportError as e:
        raise ConfigError(
            f"{where} needs lm-evaluation-harness, which is not installed: "
            "pip install 'jaxtrain[eval]' (or pip install lm-eval)."
        ) from e
    return lm_eval


def _local_task(path: Path) -> dict[str, Any]:
    """One task YAML as the harness reads it, its relative data files made absolute."""
    from lm_eval.tasks._yaml_loader import load_yaml

    try:
        config = load_yaml(path)
    except Exception as e:
        raise ConfigError(f"{path}: not a readable lm-evaluation-harness task YAML ({e}).") from e
    if "task" not in config:
        raise ConfigError(f"{path}: has no `task:` name; a local task YAML names its task.")
    files = (config.get("dataset_kwargs") or {}).get("data_files")
    if files is not None:
        config = copy.deepcopy(config)
        config["dataset_kwargs"]["data_files"] = _beside(files, path.parent)
    return config


def _beside(files: Any, folder: Path) -> Any:
    """`data_files` (a path, a list or a {split: ...} dict) with relative paths under `folder`."""
    if isinstance(files, dict):
        return {split: _beside(f, folder) for split, f in files.items()}
    if isinstance(files, list):
        return [_beside(f, folder) for f in files]
    path = Path(str(files)).expanduser()
    return str(path if path.is_absolute() or "://" in str(files) else folder / path)


def resolve_tasks(specs: Iterable[str]) -> list[str | dict[str, Any]]:
    """Harness task names as they are; each folder's (or file's) task YAMLs as task configs."""
    tasks: list[str | dict[str, Any]] = []
    for spec in specs:
        path = Path(spec).expanduser()
        if path.is_dir():
            files = sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml"))
            if not files:
                raise ConfigError(f"task folder {path} holds no .yaml task files.")
            tasks += [_local_task(f) for f in files]
        elif path.suffix in (".yaml", ".yml"):
            if not path.is_file():
                raise ConfigError(f"task file {path} does not exist.")
            tasks.append(_local_task(path))
        else:
            tasks.append(spec)
    return tasks


def task_label(task: str | dict[str, Any]) -> str:
    """The name a task's results are filed under."""
    return task if isinstance(task, str) else str(task["task"])


@functools.cache
def task_manager(with_harness_tasks: bool) -> Any:
    """The harness's task index, built once per process: indexing its own few thousand task
    YAMLs takes ~20 s, so local tasks alone skip it and named tasks pay it once."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_defaults=with_harness_tasks)


def evaluate(
    lm: Any, tasks: Sequence[str | dict[str, Any]], *, limit: int | None, fewshot: int | None
) -> dict[str, Any]:
    """`lm_eval.simple_evaluate` on these tasks: the harness's results dictionary."""
    lm_eval = import_harness("evaluation")
    return lm_eval.simple_evaluate(
        model=lm,
        tasks=list(tasks),
        limit=limit or None,
        num_fewshot=fewshot,
        log_samples=False,
        bootstrap_iters=1000,
        task_manager=task_manager(any(isinstance(t, str) for t in tasks)),
    )


def flat_metrics(results: dict[str, Any]) -> dict[str, float]:
    """{harness/<task>/<metric>: value} from a results dictionary, each `acc,none` filed as
    `acc` and its `acc_stderr,none` as `acc_stderr` (other filters keep their name after a
    dot); values that are not finite numbers are left out."""
    flat = {}
    for task, metrics in results.get("results", {}).items():
        for key, value in metrics.items():
            if "," not in key or not isinstance(value, int | float) or isinstance(value, bool):
                continue
            metric, filter_name = key.split(",", 1)
            name = metric if filter_name == "none" else f"{metric}.{filter_name}"
            if math.isfinite(value):
                flat[f"{PREFIX}/{task}/{name}"] = float(value)
    return flat


def run_tasks(
    lm: Any,
    tasks: Sequence[str | dict[str, Any]],
    *,
    limit: int | None,
    fewshot: int | None,
    report: Any = print,
) -> tuple[dict[str, Any], list[str]]:
    """Runs each task on its own, so that one that fails (its data missing offline, a bad
    YAML) is reported through `report` and the others still run; returns (the merged results
    dictionary, the labels of the tasks that failed)."""
    merged: dict[str, Any] = {}
    failed = []
    for task in tasks:
        start = time.perf_counter()
        try:
            _loads_in_every_process(task)
            results = evaluate(lm, [task], limit=limit, fewshot=fewshot)
        except Exception as e:  # any failure of one task: the harness raises many kinds
            failed.append(task_label(task))
            report(f"harness task {task_label(task)} failed and is skipped: {_one_line(e)}")
            continue
        if not merged:
            merged = results
        else:
            for section in ("results", "configs", "versions", "n-shot", "higher_is_better"):
                merged.setdefault(section, {}).update(results.get(section, {}))
        merged.setdefault("jaxtrain_seconds", {})[task_label(task)] = time.perf_counter() - start
    return merged, failed


def _loads_in_every_process(task: str | dict[str, Any]) -> None:
    """In a multi-process run, loads the task (its data included) in every process first and
    raises in all of them when any could not: a task that failed in some processes only would
    leave the others waiting for them in the first sharded call."""
    import jax

    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils
    from lm_eval.tasks import get_task_dict

    error = None
    try:
        get_task_dict([task], task_manager(isinstance(task, str)))
    except Exception as e:  # reported below, once every process has said how it went
        error = e
    loaded = np.ravel(multihost_utils.process_allgather(np.asarray(error is None)))
    if not loaded.all():
        where = [i for i, ok in enumerate(loaded) if not ok]
        raise RuntimeError(
            f"it could not be loaded in process(es) {where}"
            + (f" ({_one_line(error)})" if error is not None else "")
        )


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}"[:500]
