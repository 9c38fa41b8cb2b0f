"""A real two-node Slurm cluster on 127.0.0.1 for tests: munged, slurmctld and two slurmd.

Debian's `slurm-wlm` and `munge` packages (.ci/run installs them when missing). Everything
lives in one folder: the munge key and socket, slurm.conf (`SLURM_CONF` points the clients at
it), state, spool and logs. The two nodes are two `slurmd -N nodeI` daemons on distinct ports of
this host, so a job of `--nodes=2` gets two tasks as a cluster would, each its own slurmd.
Job credentials expire after 10 s instead of 120 (`cred_expire`), which is also how long Slurm
holds a requeued job before it may start again, and the scheduler looks at pending jobs every
2 s instead of every 60 (main loop) and 30 (backfill), so that a requeued job starts once its
hold ends rather than up to half a minute later.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue")


def missing_programs() -> list[str]:
    """The programs a cluster needs that this host lacks."""
    return [p for p in DAEMONS if shutil.which(p) is None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _config(root: Path, socket_path: Path, cpus: int) -> str:
    ports = [_free_port() for _ in range(3)]
    nodes = "\n".join(
        f"NodeName=node{i} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ports[i]} "
        f"CPUs={cpus} State=UNKNOWN"
        for i in (1, 2)
    )
    return f"""\
ClusterName=jaxtraintest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={ports[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={socket_path},cred_expire=10
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool-%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd-%n.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MinJobAge=600
KillWait=30
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
{nodes}
PartitionName=debug Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


class Cluster:
    """A started cluster: `env` holds SLURM_CONF for the clients; `stop()` ends every daemon."""

    def __init__(self, root: Path, cpus: int = 2):
        self.root = root
        self.procs: list[subprocess.Popen] = []
        root.mkdir(parents=True, exist_ok=True)
        (root / "state").mkdir(exist_ok=True)
        socket_path = root / "munge.socket"
        key = root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self.conf = root / "slurm.conf"
        self.conf.write_text(_config(root, socket_path, cpus))
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._start(
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={socket_path}",
                f"--key-file={key}",
                f"--pid-file={root / 'munged.pid'}",
                f"--log-file={root / 'munged.log'}",
                f"--seed-file={root / 'munged.seed'}",
            ],
            "munged",
        )
        self._wait(lambda: socket_path.exists(), "munged", root / "munged.log")
        self._start(["slurmctld", "-D", "-i", "-f", str(self.conf)], "slurmctld")
        self._wait(self._controller_up, "slurmctld", root / "slurmctld.log")
        for node in ("node1", "node2"):
            self._start(["slurmd", "-D", "-N", node, "-f", str(self.conf)], f"slurmd-{node}")
        self._wait(self._nodes_idle, "slurmd", root / "slurmd-node1.log")

    def _start(self, argv: list[str], name: str) -> None:
        out = open(self.root / f"{name}.out", "w")  # noqa: SIM115 - kept open for the daemon
        self.procs.append(
            subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        )

    def _wait(self, ready, what: str, log: Path, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [p.args[0] for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                self.stop()
                text = log.read_text(errors="replace")[-3000:] if log.exists() else ""
                raise RuntimeError(f"{what} did not start ({dead or 'timeout'}):\n{text}")
            time.sleep(0.3)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        return subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, check=check, timeout=60
        )

    def _controller_up(self) -> bool:
        return self.run("scontrol", "ping", check=False).stdout.count("UP") > 0

    def _nodes_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split()
        return out.count("idle") == 2

    def job_state(self, job: str) -> str:
        """The state of a job (PENDING, RUNNING, COMPLETED, FAILED ...)."""
        out = self.run("scontrol", "show", "job", job, check=False).stdout
        for word in out.split():
            if word.startswith("JobState="):
                return word.split("=", 1)[1]
        return "UNKNOWN"

    def restarts(self, job: str) -> int:
        """How many times a job was requeued."""
        out = self.run("scontrol", "show", "job", job, check=False).stdout
        for word in out.split():
            if word.startswith("Restarts="):
                return int(word.split("=", 1)[1])
        return 0

    def stop(self) -> None:
        """Cancels every job, then ends every daemon this cluster started (slurmd first).

        Jobs first: their slurmstepd processes outlive a stopped slurmd."""
        if self.procs and all(p.poll() is None for p in self.procs):
            self.run("scancel", "--full", "--user", "root", check=False)
            deadline = time.monotonic() + 60
            while self.run("squeue", "-h", check=False).stdout.strip():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.5)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
