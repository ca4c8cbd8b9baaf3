#!/usr/bin/env bash
# Call 1: the one-launch decode kernel's tests on the GPU, then its speed against the per-op step (no peers).
cd "$(dirname "$0")/.."
RES=/tmp/r4; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r4' EXIT
tar xJf gpu/t3.tar.xz -C gpu; b=$PWD/gpu/t3; export LD_LIBRARY_PATH=$b/devlibs
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat gpu/commit.txt; } | tee $RES/gpu.txt
timeout 150 $b/retort_core_tests --gtest_filter='GptDecodeLayers*:SmallMLinear*:EmbeddingSum*' > $RES/core.txt 2>&1; echo "core rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is|error" $RES/core.txt | head -30
shape=(--label gpt3-small --device cuda --dtype bf16 --prompt 128 --new 128 --vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768)
for L in 1 0; do
  RETORT_DECODE_LAYERS=$L timeout 120 $b/bench_generate "${shape[@]}" --batches 1,8,16,32 --repeats 3 --json $RES/bench.jsonl > $RES/bench-$L.txt 2>&1; echo "bench $L rc $?"; grep -v "^{" $RES/bench-$L.txt
done
for B in 32 1; do
  RETORT_DECODE_LAYERS_PROFILE=1 timeout 60 $b/bench_generate "${shape[@]}" --batches $B --repeats 1 --graphs false > $RES/profile-$B.txt 2>&1; echo "profile $B rc $?"; tail -1 $RES/profile-$B.txt
done
