#!/usr/bin/env bash
# Two decode steps in flight the way a user runs them: `retort generate` on a toy run (trained here on the GPU for 300
# steps with configs/toy-gpt.yaml, the shards of data/fortunes carried) over 32 prompts (gpu/prompts32.txt), greedy in f32 and sampled with a stop string in
# bf16, each with two steps in flight (the default), one at a time (RETORT_DECODE_PIPELINE=0) and without graphs
# (RETORT_DECODE_GRAPHS=0): the completions must agree; the greedy f32 ones are also set against the CPU's (the same
# command with --device cpu). Then the decode benchmark again beside torch.compile, three rounds.
set -uo pipefail
cd "$(dirname "$0")/../../.."
t0=$(date +%s)
RES=/tmp/f2; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp f2' EXIT
tar xJf gpu/f2.tar.xz -C gpu; b=$PWD/gpu/f2; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
printf 'The computer\nUnix\nA man who\nThe best way to\nIf you\nLove is\nNever\nThe meaning of life\n' > $RES/prompts8.txt
mkdir -p gpu; for i in 1 2 3 4; do cat $RES/prompts8.txt; done > gpu/prompts32.txt
$b/retort train --config configs/toy-gpt.yaml --device cuda train.steps=300 run.dir=/tmp/toyrun > $RES/train.log 2>&1; echo "train rc $?"
tail -4 $RES/train.log
g=($b/retort generate --checkpoint /tmp/toyrun --prompts gpu/prompts32.txt --max-new-tokens 60 --batch-size 32 --device cuda)
for mode in in-flight one-at-a-time no-graphs; do
  env=(); [ $mode = one-at-a-time ] && env=(RETORT_DECODE_PIPELINE=0); [ $mode = no-graphs ] && env=(RETORT_DECODE_GRAPHS=0)
  env "${env[@]}" RETORT_LOG_LEVEL=debug "${g[@]}" --temperature 0 --dtype f32 --output $RES/greedy-$mode.jsonl > $RES/greedy-$mode.log 2>&1; echo "greedy $mode rc $?"
  env "${env[@]}" RETORT_LOG_LEVEL=debug "${g[@]}" --temperature 0.8 --seed 3 --stop '\n\n' --dtype bf16 --output $RES/sampled-$mode.jsonl > $RES/sampled-$mode.log 2>&1; echo "sampled $mode rc $?"
  grep -h "CUDA graph of\|tokens/s" $RES/greedy-$mode.log $RES/sampled-$mode.log | cut -c1-200
done
for kind in greedy sampled; do
  opts=(--temperature 0); [ $kind = sampled ] && opts=(--temperature 0.8 --seed 3 --stop '\n\n')
  $b/retort generate --checkpoint /tmp/toyrun --prompts gpu/prompts32.txt --max-new-tokens 60 --batch-size 32 --device cpu "${opts[@]}" --dtype f32 --output $RES/cpu-$kind.jsonl > $RES/cpu-$kind.log 2>&1; echo "cpu $kind rc $?"
done
python3 - $RES <<'PY'
import json, sys, collections
d = sys.argv[1]
def load(name): return [(r["completion"], r["finish_reason"], r["new_tokens"]) for r in map(json.loads, open(f"{d}/{name}.jsonl"))]
for kind in ("greedy", "sampled"):
    base = load(f"{kind}-no-graphs")
    print(kind, "finish reasons without graphs:", dict(collections.Counter(f for _, f, _ in base)))
    for mode in ("in-flight", "one-at-a-time"):
        other = load(f"{kind}-{mode}")
        same = sum(a == b for a, b in zip(base, other))
        print(f"  {mode}: {same} of {len(base)} completions equal to those without graphs")
    cpu = load(f"cpu-{kind}")
    same = sum(a[0] == b[0] for a, b in zip(cpu, load(f"{kind}-in-flight")))
    print(f"  in-flight against the CPU's ({'f32' if kind == 'greedy' else 'f32 on the CPU, bf16 here'}): {same} of {len(cpu)} equal")
PY
echo "at $(( $(date +%s) - t0 )) s"
gen=(--device cuda --dtype bf16 --prompt 128 --new 128 --repeats 3)
for round in 1 2 3; do
  timeout 60 $b/bench_generate "${gen[@]}" --batches 1,32 --label in-flight --json $RES/gen.jsonl > $RES/gen-in-flight-r$round.log 2>&1 || echo "in-flight rc $?"
  RETORT_DECODE_PIPELINE=0 timeout 60 $b/bench_generate "${gen[@]}" --batches 1,32 --label one-at-a-time --json $RES/gen.jsonl > $RES/gen-one-r$round.log 2>&1 || echo "one rc $?"
  timeout 150 python3 bench/generate_bench_torch.py --device cuda --dtype bf16 --batches 1,32 --prompt 128 --new 128 --repeats 3 --compile --compile-mode reduce-overhead --json $RES/torch.jsonl > $RES/torch-r$round.log 2>&1 || echo "torch rc $?"
  echo "round $round at $(( $(date +%s) - t0 )) s"
done
python3 - $RES <<'PY'
import json, sys, collections
d = collections.defaultdict(list)
for f in ("gen.jsonl", "torch.jsonl"):
    for line in open(f"{sys.argv[1]}/{f}"):
        r = json.loads(line)
        if "batch" not in r: continue
        d[(r["label"] if f == "gen.jsonl" else r["framework"], r["batch"])].append(r["ms_per_step"])
for (label, batch), v in sorted(d.items()): print("%-32s %3d  %s" % (label, batch, " / ".join("%.4f" % x for x in v)))
PY
gzip -9 $RES/*.log
echo "done at $(( $(date +%s) - t0 )) s"
