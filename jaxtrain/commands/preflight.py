"""`python -m jaxtrain preflight --config FILE`: check every host before training on it.

Start it exactly as training is started (the same launcher, config and process options), so
that it runs on the same hosts: each process measures its host (devices, memory, a matmul,
collectives across hosts, checkpoint folder, data paths: `jaxtrain.planning.preflight`), and
process 0 prints one table and names any host that fails or is slow. Exit status 0 when every
host passes, 1 when one does not.
"""

from __future__ import annotations

import argparse

import jax

from jaxtrain.commands import train as train_command
from jaxtrain.parallel import distributed
from jaxtrain.planning import preflight


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `train`, so that a launcher starts both the same way."""
    train_command.add_arguments(parser)


def handle(args: argparse.Namespace) -> int:
    """Checks this host, gathers every host's figures and prints them on process 0."""
    cfg = train_command.join_job(args)
    checks = preflight.judge(preflight.gather(preflight.check_host(cfg)))
    if jax.process_index() == 0:
        print(f"preflight: {len(checks)} process(es), {jax.device_count()} devices")
        print(preflight.table(checks), flush=True)
        failed = [c for c in checks if c.problems]
        print(
            "preflight: every host passed"
            if not failed
            else "preflight: FAILED on "
            + ", ".join(f"process {c.process} ({c.host})" for c in failed)
        )
    distributed.stop_watching()
    return 1 if any(c.problems for c in checks) else 0
