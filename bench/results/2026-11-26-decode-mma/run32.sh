#!/usr/bin/env bash
# Call G (final, commit in gpu/commit.txt; after the cache attention changes of calls F and G): the core GPU tests (every CUDA kernel test, the flash attention's among
# them after its PTX wrappers moved to ptx.cuh), the decode check (kernel, model and generation tests), and the
# generation benchmark at batches 1, 8, 16 and 32 with both torch peers (eager, torch.compile reduce-overhead).
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r32; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r32' EXIT
tar xJf gpu/g2.tar.xz -C gpu; b=$PWD/gpu/g2; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 200 $b/tests/retort_core_tests --gtest_filter='*Cuda*:SmallMLinear.*:EmbeddingSum.*:AttentionWithCache*' > $RES/tests-core.log 2>&1; echo "core rc $?: $(grep -c '^\[       OK' $RES/tests-core.log) ok, $(grep -c '^\[  SKIPPED' $RES/tests-core.log) skipped"
grep -hE '^\[  FAILED  \]' $RES/tests-core.log | sort -u | head
PEERS=0 BATCHES=8,16 timeout 200 bash gpu-checks/decode-fused.sh $b $RES/decode 2>&1 | tee $RES/decode.log | grep -E "PASS|FAIL|^\| |bench rc" | head -20
env NEW=128 REPEATS=3 BATCHES=1,8,16,32 UNFUSED=1 NO_PDL=0 NO_GRAPHS=0 EAGER=1 COMPILE=1 COMPILE_TIMEOUT=260 \
  timeout 440 bash bench/run_generate_bench.sh $b $RES/bench > $RES/bench.log 2>&1; echo "bench rc $?"
cat $RES/bench/table.md 2>/dev/null || tail -20 $RES/bench.log
