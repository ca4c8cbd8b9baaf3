#!/usr/bin/env bash
# Call 10: the GPU tests of the decode paths, and the one-launch step against the per-op one (same binary).
cd "$(dirname "$0")/.."
RES=/tmp/r10; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r10' EXIT
tar xJf gpu/t8.tar.xz -C gpu; b=$PWD/gpu/t8; export LD_LIBRARY_PATH=$b/devlibs
{ nvidia-smi --query-gpu=name,driver_version --format=csv; cat gpu/commit.txt; } | tee $RES/gpu.txt
timeout 150 $b/retort_core_tests --gtest_filter='GptDecodeLayers*:SmallMLinear*:EmbeddingSum*:CudaKernels*' > $RES/core.txt 2>&1; echo "core rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" $RES/core.txt | head -20
timeout 300 $b/retort_parallel_tests --gtest_filter='DecodeFused*:GeneratorCuda*:DecodeStep*:GptKvCacheCuda*:InferenceCopy*:VocabSamplerCuda*' > $RES/par.txt 2>&1; echo "par rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|Expected|Which is" $RES/par.txt | head -20
shape=(--label gpt2-small --device cuda --dtype bf16 --prompt 128 --new 128 --vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768)
for round in 1 2; do
for L in 0 1; do
  RETORT_DECODE_LAYERS=$L timeout 100 $b/bench_generate "${shape[@]}" --batches 1,8,16,32 --repeats 3 --json $RES/bench.jsonl > $RES/bench-$L-$round.txt 2>&1; echo "layers $L round $round rc $?"; grep -v "^{" $RES/bench-$L-$round.txt | tail -4
done
done
for P in 1 0; do for B in 32 1; do
  RETORT_DECODE_LAYERS=1 RETORT_DECODE_LAYERS_PREFETCH=$P RETORT_DECODE_LAYERS_PROFILE=1 timeout 60 $b/bench_generate "${shape[@]}" --batches $B --repeats 1 --graphs false > $RES/profile-$P-$B.txt 2>&1; echo "profile prefetch $P batch $B"; tail -1 $RES/profile-$P-$B.txt | python3 -c "
import json,sys
d=json.loads(sys.stdin.read())
names=['qkv','attn','proj','fc','out']
for k in ['gpt_decode_layers_phase_us','staged_us','worked_us']:
    v=d[k]; print(k, ' '.join(f'{n} {sum(v[5*l+i] for l in range(1,12))/11:.2f}' for i,n in enumerate(names)))
print('empty barrier', d['empty_barrier_us'])"
done; done
