#!/usr/bin/env bash
# One measuring session on a single GPU, its stages in order of priority, each under a time
# limit of its own so that one slow compile cannot take the next stages' minutes. Installs
# nothing from the network: wheels the image lacks come from a folder (tools/offline_wheels.sh
# fills it on a machine with internet access).
#
#   tools/gpu_session.sh OUT_DIR [STAGE ...]
#
# Stages (default: env parity bf16 moe walkthrough fp8), with their limits in seconds:
#   env          versions, the GPU (nvidia-smi / rocm-smi) and the CPU                     30
#   parity       tools/gpu_parity.py --smoke: the GPU's kernels against float32          180
#   bf16         tools/bench_gpu.py: the dense shapes in bf16                            180
#   moe          tools/bench_gpu.py --cases mixtral,qwen3-moe: with their expert block   240
#   walkthrough  tools/bench_gpu.py --cases walkthrough: Qwen3-0.6B to step 300          360
#   fp8          tools/bench_gpu.py --fp8: dense shapes, bf16 and fp8 delayed/current    480
#                (rows are kept as measured: a stage cut at its limit keeps the first ones)
# Each stage writes OUT_DIR/<stage>.log; every measured row goes to OUT_DIR/rows.jsonl as it
# is measured, and the bf16 and moe stages trace two more steps of each shape with the JAX
# profiler, packed at the end into OUT_DIR/traces.tar.gz (XProf, TensorBoard's profile plugin,
# Perfetto).
# A stage stopped at its limit is named in its log and the session goes on.
#
# Environment:
#   JAXTRAIN_WHEELS      folder of wheels to install first (default: wheels/ in this checkout,
#                        used when it holds any), into a folder put on PYTHONPATH
#   LIMIT_<STAGE>        seconds for a stage, e.g. LIMIT_WALKTHROUGH=600
#   GPU_SESSION_BUDGET   seconds for the whole session, wheels included (default: no bound):
#                        each stage's limit is cut to what is left, less 15 s to stop a stage
#                        and pack the traces, and a stage with under 10 s left is skipped and
#                        named, so that the session ends, with its rows and traces, before the
#                        machine's own time limit stops it
#   GPU_SESSION_SMOKE=1  tiny shapes for every stage (checks the session on any machine)
#   JAXTRAIN_COMPILE_CACHE  folder of the compiled programs (bench_gpu.py --compile-cache;
#                        default .compile-cache/ in this checkout, "" for none): a stage run
#                        again on the same machine skips its compiles; rows loaded from it say
#                        compile_cached, and their compile seconds are no compile time
# Exits 1 when any stage failed or ran past its limit.
set -uo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: tools/gpu_session.sh OUT_DIR [STAGE ...]}"
shift
stages=("$@")
(( ${#stages[@]} )) || stages=(env parity bf16 moe walkthrough fp8)
declare -A limits=([env]=30 [parity]=180 [bf16]=180 [moe]=240 [walkthrough]=360 [fp8]=480)
for stage in "${stages[@]}"; do
  if [[ -z "${limits[$stage]:-}" ]]; then
    echo "gpu_session: unknown stage '$stage': the stages are ${!limits[*]}" >&2
    exit 2
  fi
done
budget="${GPU_SESSION_BUDGET:-0}"
if [[ ! "$budget" =~ ^[0-9]+$ ]]; then
  echo "gpu_session: GPU_SESSION_BUDGET=$budget: give whole seconds (0: no bound)" >&2
  exit 2
fi
reserve=15  # a stopped stage's kill-after (10 s) and packing the traces
mkdir -p "$out"
out="$(cd "$out" && pwd)"
python="${PYTHON:-python3}"
smoke=()
[[ "${GPU_SESSION_SMOKE:-0}" == 1 ]] && smoke=(--smoke)
cache=()
compile_cache="${JAXTRAIN_COMPILE_CACHE-$repo/.compile-cache}"
[[ -n "$compile_cache" ]] && cache=(--compile-cache "$compile_cache")
export PYTHONUNBUFFERED=1

wheels="${JAXTRAIN_WHEELS:-$repo/wheels}"
if compgen -G "$wheels/*.whl" >/dev/null; then
  site="${TMPDIR:-/tmp}/jaxtrain-site"
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" "$wheels"/*.whl || { echo "gpu_session: installing $wheels failed" >&2; exit 1; }
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
else
  site=""
fi

# Runs one stage; called in a child bash under `timeout` (its definition is passed on below).
run_stage() {
  local stage=$1
  local bench=("$python" "$repo/tools/bench_gpu.py" "${smoke[@]}" "${cache[@]}" --record "$out/rows.jsonl")
  local traced=(--profile "$out/traces")
  case "$stage" in
    env)
      git -C "$repo" log -1 --format='commit %H %s' 2>/dev/null
      "$python" -c 'import jax, flax, optax, orbax.checkpoint as ocp; print("jax", jax.__version__, "flax", flax.__version__, "optax", optax.__version__, "orbax-checkpoint", ocp.__version__); print(jax.devices())'
      if [[ -n "$site" ]]; then
        echo "installed from $wheels:"
        "$python" -m pip list --path "$site" --format=freeze 2>/dev/null
      fi
      nvidia-smi 2>/dev/null || rocm-smi 2>/dev/null || echo "no nvidia-smi or rocm-smi"
      lscpu | grep -E 'Model name|^CPU\(s\)'
      ;;
    parity) "$python" "$repo/tools/gpu_parity.py" --smoke ;;
    bf16) "${bench[@]}" "${traced[@]}" --cases 8b,1b ;;
    moe) "${bench[@]}" "${traced[@]}" --cases mixtral,qwen3-moe ;;
    walkthrough) "${bench[@]}" --cases walkthrough ;;
    fp8) "${bench[@]}" --fp8 --fp8-recipes delayed,current --cases 8b,1b ;;
  esac
}

status=0
for stage in "${stages[@]}"; do
  var="LIMIT_${stage^^}"
  limit="${!var:-${limits[$stage]}}"
  if (( budget > 0 )); then
    left=$(( budget - SECONDS - reserve ))
    if (( left < 10 )); then
      echo "gpu_session: stage $stage skipped: $(( budget - SECONDS )) s left of the session's budget of $budget s"
      status=1
      continue
    fi
    (( left < limit )) && limit=$left
  fi
  echo "== $stage (limit ${limit} s)"
  start=$SECONDS
  timeout --kill-after=10 "$limit" bash -c "$(declare -f run_stage); $(declare -p repo out python smoke cache site wheels); run_stage $stage" \
    >"$out/$stage.log" 2>&1
  code=$?
  if (( code == 124 || code == 137 )); then
    echo "gpu_session: stage $stage stopped at its limit of ${limit} s" | tee -a "$out/$stage.log"
    status=1
  elif (( code != 0 )); then
    echo "gpu_session: stage $stage failed (exit $code); see $out/$stage.log"
    status=1
  fi
  echo "   $stage took $(( SECONDS - start )) s"
done
if [[ -d "$out/traces" ]]; then
  # One file keeps the traces' deep folders together for copying back.
  tar -czf "$out/traces.tar.gz" -C "$out" traces && rm -rf "$out/traces"
  echo "traces: $out/traces.tar.gz ($(du -k "$out/traces.tar.gz" | cut -f1) KiB)"
fi
exit $status
