#!/usr/bin/env bash
# The flash test that now runs the wgmma kernels' other schedules in-process (WarpgroupAndMmaSyncKernelsAgree), with
# the rest of the flash, attention and decoder-op tests, on the default kernels.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r83; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r83' EXIT
tar xJf gpu/fvD.tar.xz -C gpu; b=$PWD/gpu/fvD; export LD_LIBRARY_PATH=$b/devlibs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*:DecoderOpsCuda.*' > $RES/tests.log 2>&1
echo "tests rc $?: $(grep -c '^\[       OK' $RES/tests.log) ok"; grep -E "WarpgroupAndMmaSync|FAILED|Failure" $RES/tests.log | head -5
