#!/usr/bin/env bash
# Call I: the GPU suite on the sm_90a build (every test binary's *Cuda* / *Gpu* tests), the flash attention tests
# under each kernel switch (gpu-checks/flash.sh's list), the forward's 64- and 128-key tiles at head size 64, and the
# attention benchmark against PyTorch SDPA on the final tree.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r44; mkdir -p $RES; trap 'tar czf $OUT/results.tgz --exclude="*.bin" --exclude=checkpoints -C /tmp r44' EXIT
tar xJf gpu/fa6.tar.xz -C gpu; b=$PWD/gpu/fa6; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
[[ -d /usr/share/games/fortunes ]] || { mkdir -p /usr/share/games && cp -r $b/fortunes /usr/share/games/fortunes; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for t in core losses optim distill parallel; do
  ( timeout 420 $b/tests/retort_${t}_tests --gtest_filter='*Cuda*:*Gpu*:*GPU*' > $RES/suite-$t.log 2>&1; echo "$t rc $?" > $RES/rc-$t ) &
done
wait
for t in core losses optim distill parallel; do
  echo "$(cat $RES/rc-$t): $(grep -c '^\[       OK' $RES/suite-$t.log) ok, $(grep -c '^\[  SKIPPED' $RES/suite-$t.log) skipped, $(grep -c '^\[  FAILED' $RES/suite-$t.log) failed lines"
  grep -E '^\[  FAILED  \]|Failure' $RES/suite-$t.log | sort -u | head -10
done
echo "suite done at $(( $(date +%s) - t0 )) s"
for v in RETORT_FLASH_FORWARD_KEYS=128 RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma RETORT_FLASH_ROWS=16 RETORT_FLASH_KEYS=64 RETORT_FLASH_KEYS=128; do
  env $v timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*' > $RES/flash-${v//=/-}.log 2>&1
  echo "flash tests $v rc $?: $(grep -c '^\[       OK' $RES/flash-${v//=/-}.log) ok"; grep -E "FAILED|Failure" $RES/flash-${v//=/-}.log | head -5
done
hd64=16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for v in default RETORT_FLASH_FORWARD_KEYS=128; do
  env $([[ $v == default ]] || echo $v) timeout 120 $b/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 5 --shapes $hd64 --json $RES/bench-hd64-${v//=/-}.jsonl 2>&1 | grep -v '^{' | sed "s/^/$v /"
done
PATHS=flash REPEATS=5 timeout 300 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $? at $(( $(date +%s) - t0 )) s"
cat $RES/attention/table.md
