#!/usr/bin/env bash
# Training throughput and peak memory of a Llama-3.2-1B-shaped model (random init, f32 parameters, bf16 compute,
# sequence 2048): retort against transformers' LlamaForCausalLM (eager and sdpa attention; torch.compile when it
# runs), same shape, batch and device, one run, one GPU; then retort at tp 2 (two ranks under `retort launch`, one
# GPU each) when the machine has two GPUs.
#   bench/run_llama_throughput.sh BUILD_DIR [OUT_JSONL] [EXTRA ARGS...]
# SMOKE=1 runs a tiny shape (for a CPU check of the script).
set -euo pipefail
build=${1:?build dir}; out=${2:-/dev/null}; shift $(( $# >= 2 ? 2 : $# ))
py=${PYTHON:-python3}
device=${DEVICE:-cuda}
shape=(--batch 1 --seq 2048 --vocab 128256 --layers 16 --heads 32 --kv-heads 8 --embd 2048 --intermediate 8192
  --rope-theta 500000 --warmup 2 --steps 5)
[[ ${SMOKE:-0} == 1 ]] && shape=(--batch 1 --seq 64 --vocab 512 --layers 2 --heads 4 --kv-heads 2 --embd 64
  --intermediate 128 --rope-theta 500000 --warmup 1 --steps 2)
label=llama-1b-bf16
"$build/bench/bench_train_throughput" --label "$label" --device "$device" --dtype bf16 --family llama "${shape[@]}" "$@" \
  | tee -a "$out"
gpus=$( (nvidia-smi -L 2>/dev/null || true) | wc -l)
if [[ $device == cuda* ]] && ((gpus >= 2)); then
  NCCL_NVLS_ENABLE=0 "$build/apps/retort" launch --nproc 2 --exec -- "$build/bench/bench_train_throughput" \
    --label "$label" --device "$device" --dtype bf16 --family llama "${shape[@]}" "$@" | tee -a "$out"
fi
for attention in eager sdpa; do
  $py "$(dirname "$0")/train_throughput_hf.py" --label "$label" --device "$device" --dtype bf16 \
    --attention "$attention" "${shape[@]}" "$@" | tee -a "$out" || echo "transformers $attention failed" >&2
done
# torch.compile's first compilation of a 16-layer model can take minutes: COMPILE_TIMEOUT (seconds, 0 = skip) bounds it.
((${COMPILE_TIMEOUT:-300} > 0)) && timeout "${COMPILE_TIMEOUT:-300}" $py "$(dirname "$0")/train_throughput_hf.py" --label "$label" --device "$device" --dtype bf16 --attention sdpa \
  --compile "${shape[@]}" "$@" | tee -a "$out" || echo "transformers compiled: did not run" >&2
