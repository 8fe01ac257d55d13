#!/usr/bin/env bash
# examples/dynamic_batch without a GPU, recording its traces, then `fusejit warm` on them: the
# batch dim is recorded symbolically, so warming compiles one kernel for all 60 batch sizes
# (plus, without marks, the static kernel of the first size, seen before the dim was known to
# change). Usage: dynamic_batch_cpu.sh DYNAMIC_BATCH FUSEJIT_CLI
set -euo pipefail
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for mode in mark auto; do
  rec="$dir/rec-$mode" cache="$dir/cache-$mode"
  flag=$([ $mode = mark ] && echo --mark || true)
  out=$(CUDA_VISIBLE_DEVICES= FUSEJIT_CACHE=memory FUSEJIT_RECORD_DIR="$rec" "$1" $flag 2>&1)
  echo "$out"
  grep -q "largest error against the host computation" <<<"$out"
  traces=$(ls "$rec" | wc -l)
  want_traces=$([ $mode = mark ] && echo 1 || echo 2)
  [ "$traces" -eq "$want_traces" ] || { echo "$mode: $traces traces recorded, want $want_traces"; exit 1; }
  grep -q "^dynamic " "$rec"/*.trace || { echo "$mode: no trace spells a dynamic dim"; exit 1; }
  warm=$("$2" warm --arch sm_90 --cache-dir "$cache" "$rec" 2>/dev/null)
  echo "$warm"
  want=$([ $mode = mark ] && echo 1 || echo 2)
  grep -q "^compiled: $want  cached: 0  failed: 0" <<<"$warm" ||
    { echo "$mode: warm should compile $want kernel(s)"; exit 1; }
  # Every recorded size is served: the trace runs at sizes never seen, as `fusejit plan` shows.
  sym=$(grep -l "^dynamic " "$rec"/*.trace)
  plan=$("$2" plan --dim "$(sed -n 2p "$sym" | sed 's/^dynamic \([A-Za-z0-9_]*\)=.*/\1/')=1000" "$sym")
  grep -q "one kernel for every size" <<<"$plan" || { echo "$plan"; exit 1; }
done
