#!/usr/bin/env bash
# The decode step with the layers' weights read toward L2 on a side stream: leads 0 (off), 1 and 2 at batches 1 to 32,
# two rounds; then the generation and decode tests (graph capture of the fork and join).
# The bundle p2 carried code not kept in the tree: kernels::L2Prefetcher (a side stream forked from the compute stream,
# a kernel of cp.async.bulk.prefetch.L2 over each layer's parameters) and RETORT_DECODE_PREFETCH=0|1|2 in
# GptModel::decode_step. Measured slower at every batch (docs/benchmarks.md) and removed.
set -uo pipefail
cd "$(dirname "$0")/.."
RES=/tmp/r72; mkdir -p $RES; trap 'tar czf $OUT/results.tgz -C /tmp r72' EXIT
tar xJf gpu/p2.tar.xz -C gpu; b=$PWD/gpu/p2; export LD_LIBRARY_PATH=$b/devlibs
export RETORT_COMMIT=$(cat gpu/commit.txt)
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $RES/gpu.txt
for round in 1 2; do
for lead in 0 1 2; do
  RETORT_DECODE_PREFETCH=$lead $b/bench/bench_generate --label lead$lead --batches 1,8,16,32 --prompt 128 --new 128 --repeats 3 --json $RES/gen.jsonl > $RES/lead$lead-$round.log 2>&1; echo "lead $lead rc $?"
done
done
python3 -c "
import json
for r in map(json.loads, open('$RES/gen.jsonl')): print(r['label'], r['batch'], round(r['ms_per_step'],4), r.get('graph_nodes'))"
$b/tests/retort_parallel_tests --gtest_filter='*Generat*:*Decode*:*KvCache*:*Cached*' > $RES/tests.log 2>&1; echo "tests rc $?"; tail -3 $RES/tests.log
