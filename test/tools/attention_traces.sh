#!/usr/bin/env bash
# The attention suite (test/traces/attention/) without a GPU: with FUSEJIT_ATTENTION=1 each trace
# plans its attention as one attention region (the only one, but for the [b, s, h, d] layouts,
# whose output permute back is a kernel of its own), and without it as two GEMMs; then
# `fusejit warm` compiles every kernel of the suite for sm_90 and for sm_80 with NVRTC.
# Usage: attention_traces.sh FUSEJIT_CLI TRACE_DIR
set -euo pipefail
cli=$1 traces=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
n=0
for t in "$traces"/*.trace; do
  n=$((n + 1))
  fused=$(FUSEJIT_ATTENTION=1 "$cli" plan --json "$t")
  regions=$(grep -o '"kind":"[a-z]*"' <<<"$fused" | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  grep -q '"kind":"attention"' <<<"$fused" || { echo "no attention region: $t ($regions)"; exit 1; }
  if grep -q '"kind":"gemm"' <<<"$fused"; then echo "a GEMM is left: $t ($regions)"; exit 1; fi
  plain=$("$cli" plan --json "$t")
  if grep -q '"kind":"attention"' <<<"$plain"; then echo "fused without FUSEJIT_ATTENTION: $t"; exit 1; fi
  echo "$(basename "$t" .trace): $regions"
done
[ "$n" -gt 0 ] || { echo "no traces in $traces"; exit 1; }
for arch in sm_90 sm_80; do
  out=$(FUSEJIT_ATTENTION=1 "$cli" warm --arch "$arch" --cache-dir "$dir/cache-$arch" "$traces" 2>/dev/null)
  echo "$arch: $(grep '^compiled:' <<<"$out")"
  grep -q "failed: 0" <<<"$out" || { echo "$out"; exit 1; }
  if grep -q "^compiled: 0 " <<<"$out"; then echo "$arch: nothing compiled"; exit 1; fi
done
