"""`python -m jaxtrain train --config FILE` (or without `train`: it is the default command).

Trains from a config, resuming from the run's latest checkpoint. With several processes, each is
started with the same command line; the job comes from the options below or from a launcher's
environment (`jaxtrain.parallel.distributed`).
"""

from __future__ import annotations

import argparse
import os
import sys

from absl import flags

from jaxtrain.commands.options import add_config_argument, add_foreign_options, load_run_config
from jaxtrain.config import loader as config_lib
from jaxtrain.errors import ConfigError
from jaxtrain.parallel import distributed
from jaxtrain.rundir.step_folders import latest_committed_step
from jaxtrain.trainer import train

# A job script sets this to tell a run stopped early (requeue it) from a finished one (done);
# 75 is EX_TEMPFAIL, "try again later". Unset, a stopped run exits 0 like a finished one.
STOPPED_EXIT_ENV = "JAXTRAIN_STOPPED_EXIT_CODE"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `train`: the config, a foreign file's options and the process layout."""
    add_config_argument(parser, required=True)
    add_foreign_options(parser)
    group = parser.add_argument_group(
        "several processes (without these, a launcher's environment is read: Slurm, torchrun, "
        "NNODES/NODE_RANK, OpenMPI; docs/parallelism.md)"
    )
    group.add_argument(
        "--coordinator",
        default=None,
        metavar="HOST:PORT",
        help="process 0's address (env JAXTRAIN_COORDINATOR)",
    )
    group.add_argument(
        "--num-processes",
        type=int,
        default=None,
        help="processes in the job (env JAXTRAIN_NUM_PROCESSES)",
    )
    group.add_argument(
        "--process-id",
        type=int,
        default=None,
        help="this process, 0..N-1 (env JAXTRAIN_PROCESS_ID)",
    )
    group.add_argument(
        "--init-timeout",
        type=int,
        default=None,
        metavar="SECONDS",
        help="how long to wait for every process (env JAXTRAIN_INIT_TIMEOUT)",
    )


def handle(args: argparse.Namespace) -> int:
    """Reads the config, joins the job's processes and trains; returns the exit status."""
    cfg = load_run_config(args.config, args)
    # grain's multiprocessing prefetch reads absl flags; mark them parsed.
    flags.FLAGS(sys.argv[:1], known_only=True)
    distributed.initialize_from_env(
        args.init_timeout,
        coordinator=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
    )
    stopped_status = _stopped_exit_code()
    train(cfg)
    distributed.stop_watching()  # the work is done: the peers may see this process leave
    latest = latest_committed_step(config_lib.checkpoint_dir(cfg))
    # Every run that reaches train.steps saves it; anything less was stopped by a signal.
    return stopped_status if latest is None or latest < cfg.train.steps else 0


def _stopped_exit_code() -> int:
    """The exit status of a run stopped before train.steps (`JAXTRAIN_STOPPED_EXIT_CODE`)."""
    value = os.environ.get(STOPPED_EXIT_ENV, "").strip() or "0"
    if not value.isdigit() or not 0 <= int(value) <= 255:
        raise ConfigError(
            f"JAXTRAIN_STOPPED_EXIT_CODE={value!r} is not an exit status: set it to 0..255 (75, "
            "EX_TEMPFAIL, is what tools/launch_slurm.sbatch uses), or unset it."
        )
    return int(value)
