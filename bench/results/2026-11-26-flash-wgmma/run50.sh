#!/usr/bin/env bash
# Call O: the training results on the final kernels: the toy GPT (retort train, bf16, 1000 steps) on the wgmma
# kernels and on the mma.sync ones (RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma), same binary and seed.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r50; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude=checkpoints --exclude="*.model" -C /tmp r50' EXIT
tar xJf gpu/fa12.tar.xz -C gpu; b=$PWD/gpu/fa12; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
[[ -d /usr/share/games/fortunes ]] || { mkdir -p /usr/share/games && cp -r $b/fortunes /usr/share/games/fortunes; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 150 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy-wgmma > $RES/toy-wgmma.log 2>&1; echo "toy wgmma rc $?"
RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma timeout 150 $b/retort train --device cuda model.dtype=bf16 run.dir=$RES/toy-mma-sync > $RES/toy-mma-sync.log 2>&1; echo "toy mma.sync rc $?"
grep -hE "step 1000: validation loss|done:" $RES/toy-*.log
