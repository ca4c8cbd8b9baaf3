#!/usr/bin/env bash
# Call N: the final kernels (the forward's lazy rescaling on top of call M). Flash attention tests under every
# switch; the flash path at the nine shapes; the attention benchmark against PyTorch SDPA; GPT-2 small training
# (bf16, vocabulary 50,304) at batch 16 and 8, eager and graphed, beside torch.compile; the Llama-3.2-1B shape at
# batch 4 x 2048 beside transformers with SDPA.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
RES=/tmp/r49; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r49' EXIT
tar xJf gpu/fa11.tar.xz -C gpu; b=$PWD/gpu/fa11; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for v in default RETORT_FLASH_FORWARD_KEYS=128 RETORT_FLASH_BACKWARD_KEYS=64 RETORT_FLASH_FORWARD=mma RETORT_FLASH_BACKWARD=mma; do
  env $([[ $v == default ]] || echo $v) timeout 200 $b/tests/retort_core_tests --gtest_filter='CudaFlashAttention.*:CudaAttention.*:DecoderOpsCuda.*:Ops/OpCudaVsCpu.*/causal*' > $RES/tests-${v//=/-}.log 2>&1
  echo "tests $v rc $?: $(grep -c '^\[       OK' $RES/tests-${v//=/-}.log) ok"; grep -E "FAILED|Failure|Which is" $RES/tests-${v//=/-}.log | head -8
done
PATHS=flash REPEATS=5 timeout 300 bench/run_attention_bench.sh $b $RES/attention > $RES/attention.log 2>&1; echo "attention bench rc $? at $(( $(date +%s) - t0 )) s"
cat $RES/attention/table.md
g=(--device cuda --dtype bf16 --seq 1024 --vocab 50304 --layers 12 --heads 12 --embd 768 --warmup 3 --steps 10)
for bs in 16 8; do
  timeout 60 $b/bench/bench_train_throughput --label gpt2-b$bs --batch $bs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-$bs.err; echo "retort b$bs rc $?"
  timeout 60 $b/bench/bench_train_throughput --label gpt2-b$bs-graphs --batch $bs --cuda-graphs "${g[@]}" >> $RES/train.jsonl 2> $RES/train-graphs-$bs.err; echo "graphs b$bs rc $?"
  timeout 150 python3 bench/train_throughput_torch.py --label gpt2-b$bs-compile --batch $bs --attention sdpa --compile "${g[@]}" >> $RES/train.jsonl 2> $RES/torch-$bs.err; echo "compile b$bs rc $?"
done
l=(--device cuda --dtype bf16 --batch 4 --seq 2048 --vocab 128256 --layers 16 --heads 32 --kv-heads 8 --embd 2048 --intermediate 8192 --rope-theta 500000 --warmup 2 --steps 5)
timeout 150 $b/bench/bench_train_throughput --label llama-1b-b4 --family llama "${l[@]}" >> $RES/llama.jsonl 2> $RES/llama.err; echo "retort llama rc $?"
timeout 200 python3 bench/train_throughput_hf.py --label llama-1b-b4 --attention sdpa "${l[@]}" >> $RES/llama.jsonl 2> $RES/llama-hf.err; echo "transformers sdpa rc $?"
python3 - $RES <<'PY'
import json, sys
for f in ("train.jsonl", "llama.jsonl"):
    for line in open(f"{sys.argv[1]}/{f}"):
        line = line.strip()
        if not line.startswith("{"): continue
        r = json.loads(line)
        if "tokens_per_s" in r:
            print(r.get("label"), r.get("framework"), round(r["tokens_per_s"]), round(r["ms_per_step"], 2), round(r.get("peak_memory_gib", 0), 2))
PY
echo "done at $(( $(date +%s) - t0 )) s"
