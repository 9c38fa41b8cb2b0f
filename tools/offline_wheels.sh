#!/usr/bin/env bash
# Downloads the wheels that a GPU machine without internet access needs to run jaxtrain's GPU
# tools (tools/gpu_session.sh, bench_gpu.py, gpu_parity.py) from a checkout, when its image
# already holds jax, flax, optax, orbax-checkpoint, tensorstore and transformers (NVIDIA's and
# AMD's JAX images do): grain and what it needs beyond those, ml-collections and tensorboardX,
# each at the version installed in this environment (the one the tests ran against).
#
#   tools/offline_wheels.sh [DEST] [PYTHON_VERSION]    # defaults: wheels/ in the checkout, 3.12
#
# Copy DEST (or the whole checkout: wheels/ is git-ignored) to the GPU machine; gpu_session.sh
# installs from it with pip --no-index.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
dest="${1:-$repo/wheels}"
py="${2:-3.12}"
python="${PYTHON:-python3}"
packages=(grain array-record portpicker ml-collections tensorboardX)
mkdir -p "$dest"
for package in "${packages[@]}"; do
  version="$("$python" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$package")" || {
    echo "offline_wheels: $package is not installed here: install the project first (pip install -e .)" >&2
    exit 1
  }
  "$python" -m pip download -q --no-deps --only-binary=:all: --python-version "$py" \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
    -d "$dest" "$package==$version"
done
ls -1 "$dest"
