"""The Dockerfiles keep their base jax, and the documented `docker run` lines fit the images.

No Docker engine needed: the Dockerfiles are parsed, and docker/jax_pins.py (the build's pin and
check steps) runs here against this interpreter's jax and fake GPU plugin installs.
"""

import os
import re
import shlex
import subprocess
import sys

import pytest
from conftest import REPO

IMAGES = {"rocm": REPO / "docker" / "Dockerfile.rocm", "cuda": REPO / "docker" / "Dockerfile.cuda"}
PINS = REPO / "docker" / "jax_pins.py"


def _instructions(path):
    """[(KEYWORD, arguments)] with continuation lines joined and comments dropped."""
    out, pending = [], ""
    for line in path.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        keyword, _, args = (pending + line).strip().partition(" ")
        out.append((keyword.upper(), " ".join(args.split())))
        pending = ""
    return out


def _index(steps, keyword, pattern):
    hits = [i for i, (k, a) in enumerate(steps) if k == keyword and re.search(pattern, a)]
    assert hits, f"no {keyword} matching {pattern!r}"
    return hits[0]


@pytest.mark.parametrize("platform", sorted(IMAGES))
def test_dockerfile_pins_base_jax_before_installing_the_project(platform):
    steps = _instructions(IMAGES[platform])
    text = " ".join(a for _, a in steps)
    assert not re.search(r"pip install[^&;]*(\s-e\s|--editable)", text), "editable install"
    if platform == "rocm":
        assert steps[_index(steps, "FROM", ".")][1] == "${BASE_IMAGE}"
        assert any(k == "ARG" and a.startswith("BASE_IMAGE=rocm/jax") for k, a in steps)
    copy_pins = _index(steps, "COPY", r"docker/jax_pins\.py")
    pin = _index(steps, "RUN", r"jax_pins\.py constraints >")
    constraints = re.search(r"jax_pins\.py constraints > (\S+)", steps[pin][1]).group(1)
    installs = [i for i, (k, a) in enumerate(steps) if k == "RUN" and "pip install" in a]
    project = [i for i in installs if "/opt/jaxtrain/src" in steps[i][1]]
    assert len(project) == 1, "one install of the project"
    assert copy_pins < pin < project[0]
    assert f"-c {constraints}" in steps[project[0]][1]
    # Every other pip install comes before the pins and installs only jax (the CUDA wheels).
    for i in set(installs) - set(project):
        assert i < pin and re.search(r'"jax\[cuda12\]==', steps[i][1]), steps[i][1]
    check = _index(
        steps,
        "RUN",
        rf"jax_pins\.py check --platform {platform} "
        rf"--constraints {re.escape(constraints)}",
    )
    assert check > project[0]
    assert steps[-1] == ("ENTRYPOINT", '["python3", "-m", "jaxtrain"]')


def _workdir(platform):
    steps = _instructions(IMAGES[platform])
    workdir = [a for k, a in steps if k == "WORKDIR"][-1]
    after = steps[[k for k, _ in steps].index("WORKDIR") :]
    copies = " ".join(a for k, a in after if k in ("RUN", "COPY"))
    return workdir, copies


@pytest.mark.parametrize("platform", sorted(IMAGES))
def test_runs_start_where_the_configs_are_without_the_source(platform):
    workdir, copies = _workdir(platform)
    assert re.search(rf"configs\S* .*{workdir}/?", copies), "configs/ copied into WORKDIR"
    # The installed package must be the one that runs: no jaxtrain/ next to `python -m`.
    assert not re.search(r"(^|[\s/])jaxtrain/?(\s|$)", copies), copies


def _docker_runs():
    """Every `docker run` command in README.md and docs/, continuation lines joined."""
    runs = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.lstrip().startswith("docker run"):
                command = line
                while command.rstrip().endswith("\\"):
                    i += 1
                    command = command.rstrip()[:-1] + " " + lines[i]
                runs.append((path.name, shlex.split(command.split(" #")[0])))
    return runs


def test_docs_have_docker_run_lines():
    assert len(_docker_runs()) >= 6


@pytest.mark.parametrize("where,argv", _docker_runs())
def test_docker_run_lines_work_as_written(where, argv):
    image = next(a for a in argv if a.startswith("jaxtrain:") or "/jaxtrain:" in a)
    platform = image.rsplit(":", 1)[1]
    workdir, _ = _workdir(platform)
    mounts = {v.split(":")[1]: v.split(":")[0] for f, v in zip(argv, argv[1:]) if f == "-v"}
    for target in mounts:
        assert target.startswith(f"{workdir}/"), f"{where}: {target} is outside {workdir}"
        assert mounts[target] == "$PWD/" + target.removeprefix(f"{workdir}/"), where
    rest = argv[argv.index(image) + 1 :]
    gpu_check = "jax.devices()" in " ".join(rest)
    if "--entrypoint" in argv and not gpu_check:  # a tool: its folder arguments are mounted
        folders = [a.split("/")[0] for a in rest[1:] if not a.startswith("-")]
        assert all(f"{workdir}/{f}" in mounts for f in folders), (where, folders)
        return
    if not gpu_check:  # a training run
        assert f"{workdir}/data" in mounts and f"{workdir}/runs" in mounts, where
        paths = [a.split("=", 1)[1] for a in rest if a.startswith("--config.data.paths=")]
        config = rest[rest.index("--config") + 1]
        assert (REPO / config).is_file(), f"{where}: {config} is not in configs/"
        assert paths or config == "configs/demo.py", f"{where}: no --config.data.paths"
        assert all(p.startswith("data/") for p in paths), f"{where}: {paths} not under data/"
    if platform == "rocm":
        assert {"--device=/dev/kfd", "--device=/dev/dri"} <= set(argv), where
        assert "video" in argv[argv.index("--group-add") + 1], where
    else:
        assert argv[argv.index("--gpus") + 1] == "all", where


# ---------------------------------------------------------------- docker/jax_pins.py


def _pins(*args, extra_path=None):
    env = dict(os.environ)
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join([str(extra_path), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, str(PINS), *args], capture_output=True, text=True, env=env, timeout=120
    )


def _fake_dist(site, name, version):
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def _installed():
    import jax
    import jaxlib

    return jax.__version__, jaxlib.__version__


def test_constraints_pin_this_interpreters_jax(tmp_path):
    jax_version, jaxlib_version = _installed()
    done = _pins("constraints")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"jax=={jax_version}" in lines and f"jaxlib=={jaxlib_version}" in lines
    assert all(
        re.fullmatch(r"jax(lib)?|jax-(cuda|rocm)\d*-(plugin|pjrt)", line.split("==")[0])
        for line in lines
    ), lines


def test_check_refuses_an_image_without_a_gpu_plugin(tmp_path):
    (tmp_path / "c.txt").write_text(_pins("constraints").stdout)
    done = _pins("check", "--platform", "rocm", "--constraints", str(tmp_path / "c.txt"))
    assert done.returncode == 1
    assert "would not run on ROCm GPUs: no ROCm PJRT plugin" in done.stderr


def test_check_passes_with_a_matching_plugin_and_names_what_it_kept(tmp_path):
    _, jaxlib_version = _installed()
    site = tmp_path / "site"
    _fake_dist(site, "jax_rocm7_pjrt", jaxlib_version)
    _fake_dist(site, "jax_rocm7_plugin", jaxlib_version)
    (site / "jax_plugins" / "xla_rocm7").mkdir(parents=True)
    (site / "jax_plugins" / "xla_rocm7" / "__init__.py").write_text("")
    pins = _pins("constraints", extra_path=site).stdout
    assert f"jax-rocm7-pjrt=={jaxlib_version}" in pins.splitlines()
    (tmp_path / "c.txt").write_text(pins)
    done = _pins(
        "check", "--platform", "rocm", "--constraints", str(tmp_path / "c.txt"), extra_path=site
    )
    assert done.returncode == 0, done.stderr
    assert "jax for ROCm kept" in done.stdout and "xla_rocm7" in done.stdout


def test_check_names_a_replaced_jax_and_a_mismatched_plugin(tmp_path):
    jax_version, _ = _installed()
    site = tmp_path / "site"
    _fake_dist(site, "jax_cuda12_plugin", "0.4.30")
    (tmp_path / "c.txt").write_text("jax==0.4.30\njaxlib==0.4.30\n")
    done = _pins(
        "check", "--platform", "cuda", "--constraints", str(tmp_path / "c.txt"), extra_path=site
    )
    assert done.returncode == 1
    assert f"jax is {jax_version}, the base image had 0.4.30" in done.stderr
    assert "jax-cuda12-plugin 0.4.30 does not match jaxlib" in done.stderr
    assert "pip replaced the base image's jax" in done.stderr
