#!/usr/bin/env bash
# Multi-node jaxtrain without a scheduler: run this on every node with the same arguments.
#
#   # node 0 (the coordinator)                # node 1
#   MASTER_ADDR=10.0.0.1 NNODES=2 NODE_RANK=0 \  MASTER_ADDR=10.0.0.1 NNODES=2 NODE_RANK=1 \
#     tools/launch_multinode.sh configs/llama3_8b.py --config.data.paths=data/train
#
# These are the variables Primus' launcher exports (MASTER_ADDR, MASTER_PORT, NNODES,
# NODE_RANK, GPUS_PER_NODE), so a Primus job script can call this file unchanged. One process
# per node drives all of its GPUs (GPUS_PER_NODE, when set, limits it to the first N).
# NNODES=1 (the default) is a plain single-node run.
#
# Optional: NET_IFACE (NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME), IB_HCA (NCCL_IB_HCA),
# GPU_VENDOR=amd|nvidia|cpu (default: amd when rocm-smi, amd-smi or /dev/kfd is there, nvidia when
# nvidia-smi is, else cpu; a CPU host gets no GPU settings), MASTER_PORT (default 29500),
# JAXTRAIN_INIT_TIMEOUT (seconds to wait for every node, 300).
# JAXTRAIN_LAUNCH_DRY_RUN=1 prints the platform, the variables this script sets and the command,
# and exits without running it.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: MASTER_ADDR=HOST NNODES=N NODE_RANK=I $0 CONFIG.py [--config.key=value ...]" >&2
  exit 2
fi
set_vars=()
setenv() {  # export NAME=VALUE and remember it for the dry run
  export "$1=$2"
  set_vars+=("$1")
}

setenv NNODES "${NNODES:-1}"
setenv NODE_RANK "${NODE_RANK:-0}"
setenv MASTER_ADDR "${MASTER_ADDR:-127.0.0.1}"
setenv MASTER_PORT "${MASTER_PORT:-29500}"
if (( NNODES > 1 )) && [[ $MASTER_ADDR == 127.0.0.1 ]]; then
  echo "warning: NNODES=$NNODES with MASTER_ADDR=127.0.0.1 only works with every process on" \
       "this machine; on real nodes set it to node 0's address" >&2
fi

if [[ -z "${GPU_VENDOR:-}" ]]; then
  if command -v rocm-smi >/dev/null 2>&1 || command -v amd-smi >/dev/null 2>&1 \
      || [[ -e /dev/kfd ]]; then
    GPU_VENDOR=amd
  elif command -v nvidia-smi >/dev/null 2>&1; then
    GPU_VENDOR=nvidia
  else
    GPU_VENDOR=cpu
  fi
fi
case $GPU_VENDOR in
  amd|nvidia|cpu) ;;
  *) echo "error: GPU_VENDOR=$GPU_VENDOR is not one of amd, nvidia, cpu" >&2; exit 2 ;;
esac
[[ -n "${NET_IFACE:-}" ]] && setenv GLOO_SOCKET_IFNAME "$NET_IFACE"
if [[ $GPU_VENDOR != cpu ]]; then
  [[ -n "${NET_IFACE:-}" ]] && setenv NCCL_SOCKET_IFNAME "$NET_IFACE"
  [[ -n "${IB_HCA:-}" ]] && setenv NCCL_IB_HCA "$IB_HCA"
  if [[ $GPU_VENDOR == amd ]]; then
    setenv HSA_FORCE_FINE_GRAIN_PCIE 1
    setenv HSA_NO_SCRATCH_RECLAIM 1
    setenv GPU_MAX_HW_QUEUES "${GPU_MAX_HW_QUEUES:-2}"
    setenv NCCL_IB_GID_INDEX "${NCCL_IB_GID_INDEX:-3}"
    setenv NCCL_PROTO "${NCCL_PROTO:-Simple}"
  fi
  setenv XLA_FLAGS "${XLA_FLAGS:+$XLA_FLAGS }--xla_gpu_enable_latency_hiding_scheduler=true"
  setenv XLA_PYTHON_CLIENT_MEM_FRACTION "${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}"
fi

command=(python3 -u -m jaxtrain --config "$@")
echo "jaxtrain: node $NODE_RANK of $NNODES, coordinator $MASTER_ADDR:$MASTER_PORT, $GPU_VENDOR"
if [[ "${JAXTRAIN_LAUNCH_DRY_RUN:-0}" != 0 ]]; then
  echo "platform: $GPU_VENDOR"
  for name in "${set_vars[@]}"; do echo "env: $name=${!name}"; done
  printf 'command:'; printf ' %q' "${command[@]}"; echo
  exit 0
fi
exec "${command[@]}"
