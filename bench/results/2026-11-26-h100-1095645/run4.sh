#!/usr/bin/env bash
# Call 4: the staged gemm (misaligned rows) on the GPU: its test and the gemm tests, then GPT-2 small at vocabulary
# 50,257 and 50,304 (batch 16) with torch.compile at 50,257 in the same run, and a profiled step at 50,257.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r4; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r4' EXIT
tar xJf gpu/s.tar.xz -C gpu; b=$PWD/gpu/s; export LD_LIBRARY_PATH=$b/devlibs RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
timeout 120 $b/tests/retort_core_tests --gtest_filter='CudaGemm.*:Ops/OpCudaVsCpu.*/linear*:FusedLinear*' > $RES/tests.log 2>&1; echo "tests rc $?"
grep -E "padded|^\[  (PASSED|FAILED)|Failure" $RES/tests.log | head -30
J=$RES/train.jsonl
for v in 50257 50304; do
  g="--device cuda --dtype bf16 --batch 16 --seq 1024 --vocab $v --layers 12 --heads 12 --embd 768"
  timeout 60 $b/bench/bench_train_throughput --label gpt2-b16-v$v $g --warmup 3 --steps 10 >> $J 2>>$RES/err.log
done
g="--device cuda --dtype bf16 --batch 8 --seq 1024 --vocab 50257 --layers 12 --heads 12 --embd 768"
timeout 60 $b/bench/bench_train_throughput --label gpt2-b8-v50257 $g --warmup 3 --steps 10 >> $J 2>>$RES/err.log
g="--device cuda --dtype bf16 --batch 16 --seq 1024 --vocab 50257 --layers 12 --heads 12 --embd 768"
timeout 60 $b/bench/bench_train_throughput --label gpt2-b16-v50257-profile $g --warmup 3 --steps 8 --profile-ops > $RES/profile.jsonl 2> $RES/profile.txt
timeout 150 python3 bench/train_throughput_torch.py --label gpt2-b16-v50257 $g --attention sdpa --compile >> $J 2>>$RES/err.log
g="--device cuda --dtype bf16 --batch 8 --seq 1024 --vocab 50257 --layers 12 --heads 12 --embd 768"
timeout 150 python3 bench/train_throughput_torch.py --label gpt2-b8-v50257 $g --attention sdpa --compile >> $J 2>>$RES/err.log
python3 - $J <<'PY'
import json,sys
for l in open(sys.argv[1]):
    if not l.startswith('{'): continue
    r=json.loads(l)
    if 'tokens_per_s' in r: print(f"{r['label']:16} {r['framework']:18} {r['tokens_per_s']:10.0f} tok/s {r['ms_per_step']:7.2f} ms {r.get('peak_memory_gib') or 0:6.2f} GiB")
PY
head -12 $RES/profile.txt
echo "all done at $(( $(date +%s) - t0 )) s"
