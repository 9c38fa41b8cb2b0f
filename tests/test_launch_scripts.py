"""tools/launch_slurm.sbatch and tools/launch_multinode.sh work as written on a first use."""

import re

from conftest import REPO

SBATCH = REPO / "tools" / "launch_slurm.sbatch"


def test_slurm_log_needs_no_folder_at_submission():
    # Slurm opens --output/--error before the script runs, so a folder in them must already
    # exist; a first `sbatch` from a fresh checkout has none.
    directives = re.findall(r"^#SBATCH\s+--(output|error)[= ](\S+)", SBATCH.read_text(), re.M)
    assert directives
    for name, path in directives:
        assert "/" not in path, f"#SBATCH --{name}={path} needs a folder that may not exist"
