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
# Optional: NET_IFACE (NCCL_SOCKET_IFNAME), IB_HCA (NCCL_IB_HCA), GPU_VENDOR=amd|nvidia,
# MASTER_PORT (default 29500), JAXTRAIN_INIT_TIMEOUT (seconds to wait for every node, 300).
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: MASTER_ADDR=HOST NNODES=N NODE_RANK=I $0 CONFIG.py [--config.key=value ...]" >&2
  exit 2
fi
export NNODES=${NNODES:-1}
export NODE_RANK=${NODE_RANK:-0}
export MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
export MASTER_PORT=${MASTER_PORT:-29500}
if (( NNODES > 1 )) && [[ $MASTER_ADDR == 127.0.0.1 ]]; then
  echo "warning: NNODES=$NNODES with MASTER_ADDR=127.0.0.1 only works with every process on" \
       "this machine; on real nodes set it to node 0's address" >&2
fi

if [[ -z "${GPU_VENDOR:-}" ]]; then
  if command -v rocm-smi >/dev/null 2>&1; then GPU_VENDOR=amd; else GPU_VENDOR=nvidia; fi
fi
[[ -n "${NET_IFACE:-}" ]] && export NCCL_SOCKET_IFNAME=$NET_IFACE GLOO_SOCKET_IFNAME=$NET_IFACE
[[ -n "${IB_HCA:-}" ]] && export NCCL_IB_HCA=$IB_HCA
if [[ $GPU_VENDOR == amd ]]; then
  export HSA_FORCE_FINE_GRAIN_PCIE=1
  export HSA_NO_SCRATCH_RECLAIM=1
  export GPU_MAX_HW_QUEUES=${GPU_MAX_HW_QUEUES:-2}
  export NCCL_IB_GID_INDEX=${NCCL_IB_GID_INDEX:-3}
  export NCCL_PROTO=${NCCL_PROTO:-Simple}
fi
export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_enable_latency_hiding_scheduler=true"
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}

echo "jaxtrain: node $NODE_RANK of $NNODES, coordinator $MASTER_ADDR:$MASTER_PORT, $GPU_VENDOR"
exec python3 -u -m jaxtrain --config "$@"
