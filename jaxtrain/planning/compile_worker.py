"""Compiles the planner's candidates in a process with as many fake CPU devices as planned.

    python -m jaxtrain.planning.compile_worker JOB.json

XLA reads the device count once, when jax starts, so the planner (`planning/planner.py`) runs
this module in a child process with `--xla_force_host_platform_device_count=N` in XLA_FLAGS.
The LLVM back end's optimisation is turned off there: it takes a third of a compile and
changes neither the buffer assignment (the memory figures) nor the collectives.

The job names the config, its overrides and, per candidate, the overrides to compile with;
each candidate's figures (memory per device, collectives by kind and mesh axes, the FLOPs of
its matrix products) are written as a JSON file at the path the job gives, which is the
planner's cache.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

FAST_COMPILE_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"


def environment(devices: int, fast_compile: bool = True) -> dict[str, str]:
    """This process's environment with XLA asked for `devices` CPU devices (and, with
    `fast_compile`, for programs that are compiled to be read, not run)."""
    env = dict(os.environ)
    flags = re.sub(r"--xla_force_host_platform_device_count=\S+", "", env.get("XLA_FLAGS", ""))
    fast = FAST_COMPILE_FLAGS if fast_compile else ""
    env["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={devices} {fast}".strip()
    env["JAX_PLATFORMS"] = "cpu"
    return env


def launch_env(devices: int, hosts: int) -> dict[str, str]:
    """This process's environment as the planned launch would set it for a foreign config
    (Primus, TorchTitan, MaxText): their per-device batch sizes are read from NNODES and
    GPUS_PER_NODE, which must describe the planned devices, not this machine's."""
    env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
    env.update(NNODES=str(hosts), GPUS_PER_NODE=str(devices // hosts))
    return env


def _compile_one(job: dict, task: dict) -> dict:
    from jaxtrain import compat
    from jaxtrain.planning import compile as compile_plan
    from jaxtrain.planning import hlo_collectives, hlo_flops

    overrides = [*job["overrides"], *task["overrides"]]
    cfg = compat.load_config_file(
        job["config"],
        overrides,
        native_overrides=job.get("native", []),
        allow_unsupported=True,
        env=launch_env(job["devices"], job["hosts"]),
    )
    start = time.perf_counter()
    plan, compiled = compile_plan.compile_step(cfg, hosts=job["hosts"])
    text = compiled.as_text()
    found = hlo_collectives.collectives(text)
    return {
        "memory": plan.memory,
        "peak_bytes": plan.peak_bytes,
        "collectives": hlo_collectives.summarise(found, plan.mesh),
        "dot_flops": hlo_flops.dot_flops(text),
        "compile_s": time.perf_counter() - start,
    }


def main(path: str) -> int:
    """Compiles every task of the job whose result file is missing."""
    with open(path) as f:
        job = json.load(f)
    import jax

    if jax.device_count() != job["devices"]:
        print(f"compile_worker: jax has {jax.device_count()} devices", file=sys.stderr)
        return 2
    tasks = job["tasks"]
    for i, task in enumerate(tasks, 1):
        print(
            f"plan: compiling {i}/{len(tasks)}: {task['label']}",
            file=sys.stderr,
            flush=True,
        )
        try:
            result = _compile_one(job, task)
        except Exception as e:  # a candidate that fails to compile is reported, not fatal
            result = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        os.makedirs(os.path.dirname(task["out"]), exist_ok=True)
        with open(task["out"] + ".tmp", "w") as f:
            json.dump(result, f)
        os.replace(task["out"] + ".tmp", task["out"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
