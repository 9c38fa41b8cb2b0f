"""Keeps a base image's GPU build of jax while jaxtrain is installed on top of it.

  python3 docker/jax_pins.py constraints > /tmp/constraints.txt
  python3 -m pip install -c /tmp/constraints.txt .
  python3 docker/jax_pins.py check --platform rocm --constraints /tmp/constraints.txt

`constraints` writes `name==version` for jax, jaxlib and the jax GPU plugins installed in this
interpreter. With it as a pip constraints file, pip either keeps them (choosing flax, optax and
orbax releases that work with that jax) or stops with a resolution error; it can no longer swap
the image's ROCm/CUDA jaxlib for a CPU wheel from the index. `check` runs after the install and
fails the build unless jax, jaxlib and the plugins are still at the pinned versions and a PJRT
plugin for the platform is installed at jaxlib's version (jax skips a plugin whose version does
not match jaxlib and silently falls back to the CPU). A build has no GPU, so `jax.devices()`
itself is checked at run time (docs/docker.md).

Standard library only: it runs in the base image before anything is installed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as metadata
import pkgutil
import re
import sys

# jax, jaxlib, and the GPU plugins: jax-cuda12-plugin / jax-cuda12-pjrt, jax-rocm7-plugin /
# jax-rocm7-pjrt, jax-rocm60-plugin ... (names normalised as in PEP 503).
_PINNED = re.compile(r"jax|jaxlib|jax-(cuda|rocm)\d*-(plugin|pjrt)")


class PinError(RuntimeError):
    """The image's jax is missing, was replaced, or cannot drive the GPU platform."""


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_jax() -> dict[str, str]:
    """{normalised name: version} of jax, jaxlib and jax's GPU plugins in this interpreter."""
    found = {}
    for dist in metadata.distributions():
        name = _normalise(dist.metadata["Name"] or "")
        if _PINNED.fullmatch(name):
            found[name] = dist.version
    return dict(sorted(found.items()))


def constraints_text(packages: dict[str, str]) -> str:
    """A pip constraints file pinning each package to its installed version."""
    if "jax" not in packages or "jaxlib" not in packages:
        raise PinError(f"this interpreter ({sys.executable}) has no jax/jaxlib installed "
                       f"(found {packages or 'none'}); build on an image that ships jax, or "
                       "install jax for the platform before generating the constraints.")
    return "".join(f"{name}=={version}\n" for name, version in packages.items())


def read_constraints(text: str) -> dict[str, str]:
    """{normalised name: version} of a constraints file written by `constraints_text`."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[_normalise(name)] = version.strip()
    return pins


def _release(version: str) -> tuple[int, ...]:
    """The first three numbers of a version: 0.6.0 for 0.6.0+rocm640 or 0.6.0.post1."""
    return tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0])[:3])


def _plugin_modules(platform: str) -> list[str]:
    """The `jax_plugins.xla_<platform>*` modules jax would discover (found, not imported)."""
    try:
        plugins = importlib.import_module("jax_plugins")
    except ImportError:
        return []
    return sorted(m.name for m in pkgutil.iter_modules(plugins.__path__)
                  if m.name.startswith(f"xla_{platform}"))


def check(platform: str, pins: dict[str, str], installed: dict[str, str]) -> str:
    """A one-line summary when the image still has its jax and a plugin for `platform`.

    Raises PinError naming every difference from the pins and what is missing.
    """
    shown = {"rocm": "ROCm", "cuda": "CUDA"}.get(platform, platform)
    problems = []
    for name, version in pins.items():
        now = installed.get(name)
        if now != version:
            problems.append(f"{name} is {now or 'not installed'}, the base image had {version}")
    import jax  # after the metadata checks, so a broken jax still gets them reported

    if jax.__version__ != installed.get("jax"):
        problems.append(f"`import jax` loads {jax.__version__} from {jax.__file__}, "
                        f"not the installed {installed.get('jax')}")
    jaxlib = installed.get("jaxlib", "")
    plugins = {n: v for n, v in installed.items() if n.startswith(f"jax-{platform}")}
    built_in = platform in jaxlib.partition("+")[2]  # older images: jaxlib 0.4.x+rocm6xx
    if not plugins and not built_in:
        problems.append(f"no {shown} PJRT plugin (jax-{platform}*-pjrt / "
                        f"-plugin) is installed and jaxlib {jaxlib or '(none)'} is not a "
                        f"{platform} build, so jax.devices() would list only the CPU")
    for name, version in plugins.items():
        if _release(version) != _release(jaxlib):
            problems.append(f"{name} {version} does not match jaxlib {jaxlib}; jax skips a "
                            "plugin of another version and runs on the CPU")
    modules = _plugin_modules(platform)
    if any(n.endswith("-pjrt") for n in plugins) and not modules:
        problems.append(f"the jax_plugins.xla_{platform}* module of the PJRT plugin cannot be "
                        "found on sys.path")
    if problems:
        replaced = any(installed.get(n) != v for n, v in pins.items())
        fix = ("pip replaced the base image's jax: pin flax/optax/orbax-checkpoint to releases "
               "that support it, or use a newer base image" if replaced else
               f"build on an image whose jax drives {shown} GPUs, or install jax's {shown} "
               "wheels before jaxtrain")
        raise PinError(f"this image's jax would not run on {shown} GPUs: " + "; ".join(problems)
                       + f". Fix: {fix}.")
    found = ", ".join(f"{n} {v}" for n, v in installed.items())
    return (f"jax for {shown} kept: {found}"
            + (f" (plugin modules: {', '.join(modules)})" if modules else ""))


def main(argv: list[str] | None = None) -> int:
    """Command line: `constraints` or `check --platform P --constraints FILE`."""
    parser = argparse.ArgumentParser(prog="jax_pins.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("constraints", help="print pins of the installed jax packages")
    chk = sub.add_parser("check", help="fail unless the pinned jax and a GPU plugin remain")
    chk.add_argument("--platform", choices=("rocm", "cuda"), required=True)
    chk.add_argument("--constraints", required=True, help="the file `constraints` wrote")
    args = parser.parse_args(argv)
    try:
        if args.command == "constraints":
            sys.stdout.write(constraints_text(installed_jax()))
        else:
            with open(args.constraints, encoding="utf-8") as f:
                pins = read_constraints(f.read())
            print(check(args.platform, pins, installed_jax()))
    except PinError as e:
        print(f"jax_pins.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
