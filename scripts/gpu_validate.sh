#!/usr/bin/env bash
# Runs the GPU validation on a machine with a GPU, from a bundle built elsewhere (see docs/gpu-validation.md):
#   scripts/gpu_validate.sh BUNDLE_DIR OUT_DIR
# BUNDLE_DIR holds retort, tests/, bench/, devlibs/ (scripts/make_gpu_bundle.sh) and fortunes/ (the corpus).
set -uo pipefail
bundle=$(realpath "${1:?bundle dir}"); out=$(realpath -m "${2:?out dir}"); mkdir -p "$out"
export LD_LIBRARY_PATH=$bundle/devlibs:${LD_LIBRARY_PATH:-}
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
# The corpus the tests and the toy config read.
if [[ ! -d /usr/share/games/fortunes ]]; then mkdir -p /usr/share/games && cp -r "$bundle/fortunes" /usr/share/games/fortunes; fi
cd "$out"
status=0
for t in "$bundle"/tests/retort_*_tests; do
  name=$(basename "$t")
  "$t" >"$out/$name.log" 2>&1 || status=1
  echo "$name: $(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran|SKIPPED \]' "$out/$name.log" | tr '\n' ' ')"
done
grep -h "FAILED  \]" "$out"/*.log | sort -u
"$bundle/retort" train --device cuda run.dir="$out/toy-gpu" data.dir="$out/data" train.log_every=100 \
  >"$out/train-gpu.log" 2>&1 || status=1
tail -6 "$out/train-gpu.log"
"$bundle/retort" train --device cuda run.dir="$out/toy-gpu-bf16" data.dir="$out/data" model.dtype=bf16 \
  train.log_every=100 >"$out/train-gpu-bf16.log" 2>&1 || status=1
tail -6 "$out/train-gpu-bf16.log"
exit $status
