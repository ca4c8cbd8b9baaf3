#!/usr/bin/env bash
# Call M: the wgmma kernels with 2^x as one ex2.approx.ftz and their shared-memory pointers kept shared (the
# backward read lse and Dvec and stored dS^T through generic accesses): tests under every switch, the flash path.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r48; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r48' EXIT
tar xJf gpu/fa10.tar.xz -C gpu; b=$PWD/gpu/fa10; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in default RETORT_FLASH_FORWARD_KEYS=128 RETORT_FLASH_BACKWARD_KEYS=64 RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma RETORT_FLASH_KEYS=64; do
  env $([[ $v == default ]] || echo $v) timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*:DecoderOpsCuda.*:Ops/OpCudaVsCpu.*/causal*' > $RES/tests-${v//=/-}.log 2>&1
  echo "tests $v rc $?: $(grep -c '^\[       OK' $RES/tests-${v//=/-}.log) ok"; grep -E "FAILED|Failure|Which is" $RES/tests-${v//=/-}.log | head -8
done
shapes=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
timeout 120 $b/bench/bench_attention --device cuda --dtype bf16 --paths flash --repeats 5 --shapes $shapes --json $RES/bench.jsonl 2>&1 | grep -v '^{'
echo "done at $(( $(date +%s) - t0 )) s"
