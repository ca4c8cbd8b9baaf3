#!/usr/bin/env bash
# Call P: after the decode step moved onto cuda::CudaGraph and the multi-tensor kernels' shared chunk lookup: the
# decode check without torch peers (tests, retort fused / unfused / no-PDL at batch 1 and 32), the optimizer's and the
# graphed training step's GPU tests.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r21; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r21' EXIT
tar xJf gpu/q.tar.xz -C gpu; b=$PWD/gpu/q; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 100 $b/tests/retort_optim_tests --gtest_filter='*Cuda*:AdamW*:GradNorm*' > $RES/tests-optim.log 2>&1; echo "optim rc $?: $(grep -c '^\[       OK' $RES/tests-optim.log) ok"
timeout 100 $b/tests/retort_distill_tests --gtest_filter='Graphed*' > $RES/tests-distill.log 2>&1; echo "distill rc $?: $(grep -c '^\[       OK' $RES/tests-distill.log) ok"
timeout 100 $b/tests/retort_parallel_tests --gtest_filter='DecodeStep*:GraphedDecode*:*DecodeGraph*' > $RES/tests-graph.log 2>&1; echo "decode graph tests rc $?: $(grep -c '^\[       OK' $RES/tests-graph.log) ok"
grep -hE '^\[  FAILED  \]' $RES/tests-*.log | sort -u | head
PEERS=0 BATCHES=1,32 timeout 300 bash gpu-checks/decode-fused.sh $b $RES/decode 2>&1 | tee $RES/decode.log | grep -E "PASS|FAIL|^\| |bench rc" | head -20
