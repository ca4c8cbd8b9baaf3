#!/usr/bin/env bash
# The pipelined backward's dQ from clusters of two CTAs (RETORT_FLASH_BACKWARD_DQ=pairs, this build only, not kept:
# the second's share into the first's shared memory, half the additions into the L2) against the defaults (bulk at
# head size 128, 4-float atomics at 64) and the 4-float atomics at 128: the flash tests (and memcheck), all in one
# binary at the nine shapes, two rounds. The build: cta-pairs.patch, and in core/kernels/cuda/ptx.cuh wrappers of
# %cluster_ctarank, mapa, st.shared::cluster.v4.f32, mbarrier.arrive.release.cluster, mbarrier.try_wait.acquire.cluster
# and barrier.cluster (not kept).
cd "$(dirname "$0")/.."
RES=/tmp/r6; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r6' EXIT
tar xJf gpu/fb6.tar.xz -C gpu; b=$PWD/gpu/fb6; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 200 $b/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*' > $RES/tests.log 2>&1
echo "tests rc $?: $(grep -c '^\[       OK' $RES/tests.log) ok"; grep -E "FAILED|Failure|Which is|error" $RES/tests.log | head -12
S=16x1024x32x8x128,8x2048x32x8x128,4x4096x32x8x128,16x1024x32x8x64,8x2048x32x8x64,4x4096x32x8x64,16x1024x12x12x64,8x2048x12x12x64,4x4096x12x12x64
for round in 1 2; do for v in default pairs atomics; do
  env $([[ $v == default ]] || echo RETORT_FLASH_BACKWARD_DQ=$v) timeout 120 $b/bench_attention --device cuda --dtype bf16 --shapes $S --repeats 5 --paths flash --json $RES/$v-r$round.jsonl 2>&1 | grep -v '^{' | grep -v "causal attention on\|BxTxHxKVxD" | sed "s/^/$v$round /"
done; done
timeout 240 /usr/local/cuda-13.0/bin/compute-sanitizer --tool memcheck $b/retort_core_tests --gtest_filter='CudaFlashAttention.WarpgroupAndMmaSyncKernelsAgree' > $RES/memcheck.log 2>&1
echo "memcheck rc $?"; tail -3 $RES/memcheck.log
