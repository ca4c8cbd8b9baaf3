#!/usr/bin/env bash
# Call 16: the one-launch profile with 17 layers (two launches): one phase list of 85 entries.
cd "$(dirname "$0")/.."
RES=/tmp/r16; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r16' EXIT
tar xJf gpu/t13.tar.xz -C gpu; b=$PWD/gpu/t13; export LD_LIBRARY_PATH=$b/devlibs
cat gpu/commit.txt | tee $RES/gpu.txt
shape=(--label gpt2-17 --device cuda --dtype bf16 --prompt 64 --new 16 --vocab 50304 --context 1024 --layers 17 --heads 12 --embd 768)
RETORT_DECODE_LAYERS=1 RETORT_DECODE_LAYERS_PROFILE=1 timeout 60 $b/bench_generate "${shape[@]}" --batches 8 --repeats 1 --graphs false > $RES/profile.txt 2>&1; echo "rc $?"
tail -1 $RES/profile.txt | python3 -c "
import json,sys
d=json.loads(sys.stdin.read()); v=d['gpt_decode_layers_phase_us']
print('phases', len(v), 'steps', d['steps'], 'empty', d['empty_barrier_us']); print('layer 0', v[:5]); print('layer 16', v[80:85])"
