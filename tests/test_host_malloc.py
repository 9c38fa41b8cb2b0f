"""`python -m jaxtrain` restarts itself with CPU malloc settings only where they apply."""

import os
import platform
import subprocess
import sys

import pytest

from jaxtrain.hardware import host_malloc

linux_glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="the settings are glibc environment variables; other platforms keep their malloc",
)


@linux_glibc
def test_worthwhile_on_a_cpu_host_unless_opted_out_or_already_applied():
    assert host_malloc.worthwhile({"JAX_PLATFORMS": "cpu"})
    assert not host_malloc.worthwhile({"JAX_PLATFORMS": "cpu", "JAXTRAIN_MALLOC": "off"})
    applied = host_malloc.tuned_environment({"JAX_PLATFORMS": "cpu"})
    assert not host_malloc.worthwhile(applied)
    assert host_malloc.worthwhile({"JAX_PLATFORMS": "cpu", **host_malloc.SETTINGS})
    # An accelerator platform allocates device memory: nothing to gain.
    assert not host_malloc.worthwhile({"JAX_PLATFORMS": "cuda"})


def _arena_setting_after_restart(extra_env):
    code = (
        "from jaxtrain import host_malloc; host_malloc.reexec_with_tuned_malloc(); "
        "import os; print(os.environ.get('MALLOC_ARENA_MAX'), os.getpid(), "
        "os.environ.get('GLIBC_TUNABLES'))"
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in host_malloc.SETTINGS and k != "GLIBC_TUNABLES"
    }
    env.update(extra_env)
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    value, pid, tunables = stdout.split()
    return value, int(pid) == process.pid, tunables


def test_huge_pages_join_the_users_glibc_tunables_without_overriding_them():
    tuned = host_malloc.tuned_environment({"GLIBC_TUNABLES": "glibc.malloc.tcache_count=0"})
    assert tuned["GLIBC_TUNABLES"] == "glibc.malloc.tcache_count=0:glibc.malloc.hugetlb=1"
    assert tuned["MALLOC_ARENA_MAX"] == host_malloc.SETTINGS["MALLOC_ARENA_MAX"]
    kept = host_malloc.tuned_environment({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"})
    assert kept["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=0"  # the user's choice stands


@linux_glibc
def test_the_process_restarts_in_place_with_the_settings():
    value, same_process, tunables = _arena_setting_after_restart({"JAX_PLATFORMS": "cpu"})
    assert value == host_malloc.SETTINGS["MALLOC_ARENA_MAX"]
    assert tunables == host_malloc.HUGE_PAGES
    assert same_process  # exec, not a child: launchers and signals see one pid
    value, _, tunables = _arena_setting_after_restart(
        {"JAX_PLATFORMS": "cpu", "JAXTRAIN_MALLOC": "off"}
    )
    assert (value, tunables) == ("None", "None")
