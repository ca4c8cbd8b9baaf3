#!/usr/bin/env bash
# Call U: the attention benchmark against PyTorch SDPA on the final kernels (call T's build, fa16).
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r56; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r56' EXIT
tar xJf gpu/fa16.tar.xz -C gpu; b=$PWD/gpu/fa16; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
PATHS=flash REPEATS=5 timeout 300 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $?"
cat $RES/attention/table.md
