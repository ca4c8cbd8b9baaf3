#!/usr/bin/env bash
# Call J: op profiles of one GPT-2 b16 step: the eager step, and the graphed step's work enqueued eagerly.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r15; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r15' EXIT
tar xJf gpu/t.tar.xz -C gpu; b=$PWD/gpu/t; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
g=(--device cuda --dtype bf16 --seq 1024 --vocab 50304 --layers 12 --heads 12 --embd 768 --warmup 3 --steps 5 --batch 16 --profile-ops)
timeout 60 $b/bench/bench_train_throughput --label eager "${g[@]}" > $RES/eager.jsonl 2> $RES/eager.txt; echo "eager rc $?"
timeout 60 $b/bench/bench_train_throughput --label work-eager --cuda-graphs --graphed-work-eager "${g[@]}" > $RES/work.jsonl 2> $RES/work.txt; echo "work rc $?"
head -45 $RES/eager.txt; echo ====; head -45 $RES/work.txt
