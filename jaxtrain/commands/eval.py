"""`python -m jaxtrain eval --run DIR [--step N] --tasks T [T ...]`: lm-evaluation-harness tasks
on a run's checkpoint (or `--hf DIR`, a Hugging Face model folder), printing the harness's table
and writing its results JSON (`--output`).

The checkpoint's parameters are read onto the devices here in the run's layout, and the
requests are scored by the same model the trainer uses for `eval.harness_tasks`, so a step
evaluated in the loop gives the same figures here. Tasks are harness names or folders (files)
of local task YAMLs; lm-eval is the `eval` extra (`pip install 'jaxtrain[eval]'`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from jaxtrain.commands.options import check_output_folder
from jaxtrain.data.tokenizer_check import check_tokenizer_folder
from jaxtrain.errors import ConfigError
from jaxtrain.evaluation import tasks as tasks_lib
from jaxtrain.hardware import compile_cache


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `eval`: the model (a run's step or an HF folder), the tasks and output."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", help="run directory")
    source.add_argument("--hf", metavar="DIR", help="a Hugging Face model folder instead")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (latest)")
    parser.add_argument(
        "--tasks",
        nargs="+",
        required=True,
        help="harness task names, or folders/files of local task YAMLs (comma or space separated)",
    )
    parser.add_argument("--limit", type=int, default=0, help="examples per task (0: all)")
    parser.add_argument(
        "--fewshot", type=int, default=None, help="few-shot examples (each task's own default)"
    )
    parser.add_argument("--output", default="", help="write the harness's results JSON here")
    parser.add_argument(
        "--tokenizer", default="", help="tokenizer folder (the run's, or the HF folder's)"
    )
    parser.add_argument("--rows", type=int, default=8, help="sequences scored per call")


def _from_run(args: argparse.Namespace) -> tuple[Any, str, dict[str, Any]]:
    """(scorer, tokenizer folder, what was evaluated) for a run's checkpoint."""
    from jaxtrain import run as run_lib
    from jaxtrain.checkpoint.saved_run import restore_params
    from jaxtrain.evaluation.scoring import Scorer

    restored = restore_params(args.run, args.step)
    tokenizer = args.tokenizer or restored.cfg.data.get("tokenizer", "")
    if not tokenizer:
        raise ConfigError(
            f"the run {args.run} names no tokenizer (data.tokenizer); pass --tokenizer DIR."
        )
    setup = run_lib.for_reading(restored.cfg)
    compile_cache.install_for_reading(restored.cfg.backend.get("compile_cache", ""))
    scorer = Scorer(
        restored.layout.graphdef, restored.params, restored.spec, setup=setup, rows=args.rows
    )
    return scorer, tokenizer, {"run": str(args.run), "step": restored.step}


def _from_hf(args: argparse.Namespace) -> tuple[Any, str, dict[str, Any]]:
    """(scorer, tokenizer folder, what was evaluated) for a Hugging Face folder."""
    from flax import nnx

    from jaxtrain.evaluation.scoring import Scorer
    from jaxtrain.interop.hf import load_hf_model

    folder = Path(args.hf)
    if not (folder / "config.json").is_file():
        raise ConfigError(f"--hf {folder}: no config.json there; pass a Hugging Face model folder.")
    model = load_hf_model(folder)
    graphdef, state = nnx.split(model)
    scorer = Scorer(graphdef, nnx.to_pure_dict(state), model.spec, rows=args.rows)
    return scorer, args.tokenizer or str(folder), {"hf": str(folder)}


def evaluate(args: argparse.Namespace) -> dict[str, Any]:
    """The harness's results dictionary for the command's model and tasks."""
    tasks_lib.import_harness("jaxtrain eval")
    fix = "Pass --tokenizer DIR: a folder holding tokenizer.json."
    check_tokenizer_folder(args.tokenizer, "--tokenizer", fix)
    tasks = tasks_lib.resolve_tasks(tasks_lib.parse_task_list(args.tasks))
    if args.output:
        check_output_folder(Path(args.output).parent, "--output")
    scorer, tokenizer, source = _from_run(args) if args.run else _from_hf(args)
    check_tokenizer_folder(tokenizer, "tokenizer", fix)

    from jaxtrain.evaluation.harness_model import JaxtrainLM
    from jaxtrain.models.generation import load_tokenizer

    lm = JaxtrainLM(scorer, load_tokenizer(tokenizer))
    results, failed = tasks_lib.run_tasks(lm, tasks, limit=args.limit, fewshot=args.fewshot)
    if not results:
        raise ConfigError(f"every task failed ({', '.join(failed)}); see the lines above.")
    results["jaxtrain"] = {**source, "failed_tasks": failed}
    return results


def handle(args: argparse.Namespace) -> int:
    """Prints the harness's table (and `[step N]` for a run); writes --output; exit status 1
    when a task failed."""
    from lm_eval.utils import handle_non_serializable, make_table

    results = evaluate(args)
    source = results["jaxtrain"]
    where = f"step {source['step']} of {source['run']}" if "run" in source else source["hf"]
    print(f"[{where}]")
    print(make_table(results))
    if args.output:
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(results, indent=2, default=handle_non_serializable)
        Path(args.output).write_text(text + "\n")
        print(f"wrote {args.output}")
    return 1 if source["failed_tasks"] else 0
