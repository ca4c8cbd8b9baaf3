#!/usr/bin/env bash
# Call S: after the kernel entry points' shared dispatch header: every core GPU test and the decode model tests.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r24; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r24' EXIT
tar xJf gpu/c.tar.xz -C gpu; b=$PWD/gpu/c; export LD_LIBRARY_PATH=$b/devlibs
timeout 200 $b/tests/retort_core_tests --gtest_filter='*Cuda*:SmallMLinear.*:EmbeddingSum.*:StaleGradients.*:ArenaOffsets.*:CaptureArena*:OpProfiler.*' > $RES/tests-core.log 2>&1; echo "core rc $?: $(grep -c '^\[       OK' $RES/tests-core.log) ok, $(grep -c '^\[  SKIPPED' $RES/tests-core.log) skipped"
timeout 200 $b/tests/retort_parallel_tests --gtest_filter='DecodeFused.*:DecodeStep.*:InferenceCopy.*:GeneratorCuda.*:GptKvCacheCuda.*:GptCuda.*' > $RES/tests-parallel.log 2>&1; echo "parallel rc $?: $(grep -c '^\[       OK' $RES/tests-parallel.log) ok, $(grep -c '^\[  SKIPPED' $RES/tests-parallel.log) skipped"
grep -hE '^\[  FAILED  \]' $RES/tests-*.log | sort -u | head
