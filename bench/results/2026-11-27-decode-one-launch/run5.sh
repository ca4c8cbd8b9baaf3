#!/usr/bin/env bash
# Call 5: where a phase's time goes (marks), the empty barrier, and the L2 prefetches on and off.
cd "$(dirname "$0")/.."
RES=/tmp/r5; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r5' EXIT
tar xJf gpu/t4.tar.xz -C gpu; b=$PWD/gpu/t4; export LD_LIBRARY_PATH=$b/devlibs
cat gpu/commit.txt
shape=(--label gpt2-small --device cuda --dtype bf16 --prompt 128 --new 128 --vocab 50304 --context 1024 --layers 12 --heads 12 --embd 768)
for P in 1 0; do
  RETORT_DECODE_LAYERS_PREFETCH=$P timeout 60 $b/bench_generate "${shape[@]}" --batches 1,32 --repeats 3 > $RES/bench-$P.txt 2>&1; echo "prefetch $P"; grep -v "^{" $RES/bench-$P.txt | tail -2
  for B in 32 1; do
    RETORT_DECODE_LAYERS_PREFETCH=$P RETORT_DECODE_LAYERS_PROFILE=1 timeout 60 $b/bench_generate "${shape[@]}" --batches $B --repeats 1 --graphs false > $RES/profile-$P-$B.txt 2>&1; echo "profile prefetch $P batch $B"; tail -1 $RES/profile-$P-$B.txt | python3 -c "
import json,sys
d=json.loads(sys.stdin.read())
names=['qkv','attn','proj','fc','out']
for k in ['gpt_decode_layers_phase_us','staged_us','worked_us']:
    v=d[k]; print(k, ' '.join(f'{n} {sum(v[5*l+i] for l in range(1,12))/11:.2f}' for i,n in enumerate(names)))
print('empty barrier', d['empty_barrier_us'])"
  done
done
