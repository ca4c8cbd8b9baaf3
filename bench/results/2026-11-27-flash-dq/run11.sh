#!/usr/bin/env bash
# The toy GPT (retort train, bf16, 1000 steps, the fortunes corpus) with today's attention defaults and with
# yesterday's (lockstep forward at head size 64, row-order dQ atomics), same binary and seed (run10.sh lacked the corpus).
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r11; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude=checkpoints --exclude="*.model" -C /tmp r11' EXIT
tar xJf gpu/fv11.tar.xz -C gpu; b=$PWD/gpu/fv11; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
mkdir -p /usr/share/games && tar xJf gpu/fortunes.tar.xz -C /usr/share/games
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 150 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy-new > $RES/toy-new.log 2>&1; echo "toy new rc $?"
RETORT_FLASH_FORWARD_SCHEDULE=lockstep RETORT_FLASH_BACKWARD_DQ=rows timeout 150 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy-before > $RES/toy-before.log 2>&1; echo "toy before rc $?"
grep -hE "step 1000: validation loss|train done" $RES/toy-*.log
