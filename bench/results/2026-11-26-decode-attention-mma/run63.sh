#!/usr/bin/env bash
# Call G (the session's final code): the GPU suite (every test binary's *Cuda* / *Gpu* tests, the decode kernel and
# model tests), the flash attention tests under the kernel switches (its 2^x helper moved to ptx.cuh) and the cache
# attention's under both of its kernels.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r63; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude=checkpoints -C /tmp r63' EXIT
tar xJf gpu/da6.tar.xz -C gpu; b=$PWD/gpu/da6; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
[[ -d /usr/share/games/fortunes ]] || { mkdir -p /usr/share/games && cp -r $b/fortunes /usr/share/games/fortunes; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for t in core losses optim distill parallel; do
  ( timeout 420 $b/tests/retort_${t}_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*:SmallMLinear.*:EmbeddingSum.*:DecodeFused.*:DecodeStep.*' > $RES/suite-$t.log 2>&1; echo "$t rc $?" > $RES/rc-$t ) &
done
wait
for t in core losses optim distill parallel; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
echo "suite done at $(( $(date +%s) - t0 )) s"
for v in RETORT_FLASH_FORWARD_KEYS=128 RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma RETORT_DECODE_ATTENTION=lanes RETORT_DECODE_ATTENTION=mma; do
  env $v timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:AttentionWithCache*' > $RES/switch-${v//=/-}.log 2>&1
  echo "flash + cache attention tests $v rc $?: $(grep -c '^\[       OK' $RES/switch-${v//=/-}.log) ok"; grep -E "FAILED|Failure" $RES/switch-${v//=/-}.log | head -5
done
