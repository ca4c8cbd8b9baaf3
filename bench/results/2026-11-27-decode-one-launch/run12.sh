#!/usr/bin/env bash
# Call 12: the one-launch kernel with its weights read past L1 and the barrier's count in shared memory.
cd "$(dirname "$0")/.."
RES=/tmp/r12; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r12' EXIT
tar xJf gpu/t10.tar.xz -C gpu; b=$PWD/gpu/t10; export LD_LIBRARY_PATH=$b/devlibs
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat gpu/commit.txt; } | tee $RES/gpu.txt
timeout 150 $b/retort_core_tests --gtest_filter='GptDecodeLayers*:SmallMLinear*:EmbeddingSum*' > $RES/core.txt 2>&1; echo "core rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" $RES/core.txt | head -20
shape=(--label gpt2-small --device cuda --dtype bf16 --prompt 128 --new 128 --vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768)
for L in 0 1; do
  RETORT_DECODE_LAYERS=$L timeout 100 $b/bench_generate "${shape[@]}" --batches 1,8,16,32 --repeats 3 --json $RES/bench.jsonl > $RES/bench-$L.txt 2>&1; echo "layers $L rc $?"; grep -v "^{" $RES/bench-$L.txt | tail -4
done
for B in 32 1; do
  RETORT_DECODE_LAYERS=1 RETORT_DECODE_LAYERS_PROFILE=1 timeout 60 $b/bench_generate "${shape[@]}" --batches $B --repeats 1 --graphs false > $RES/profile-$B.txt 2>&1; echo "profile batch $B"; tail -1 $RES/profile-$B.txt | python3 -c "
import json,sys
d=json.loads(sys.stdin.read())
names=['qkv','attn','proj','fc','out']
for k in ['gpt_decode_layers_phase_us','staged_us','worked_us']:
    v=d[k]; print(k, ' '.join(f'{n} {sum(v[5*l+i] for l in range(1,12))/11:.2f}' for i,n in enumerate(names)))
print('empty barrier', d['empty_barrier_us'])"
done
