#!/usr/bin/env bash
# The attention suite (test/traces/attention/) without a GPU: by default (and with
# FUSEJIT_ATTENTION=kernel) each trace plans its attention as one attention region (the only one,
# but for the [b, s, h, d] layouts, whose output permute back is a kernel of its own), and with
# FUSEJIT_ATTENTION=0 as two GEMMs; a trace named refused_* (a pattern the fused region does not
# compute) plans as two GEMMs either way, and its plan says why the attention is not fused; then
# `fusejit warm` compiles every kernel of the suite for sm_90 and for sm_80 with NVRTC.
# Usage: attention_traces.sh FUSEJIT_CLI TRACE_DIR
set -euo pipefail
cli=$1 traces=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
n=0
for t in "$traces"/*.trace; do
  n=$((n + 1))
  fused=$("$cli" plan --json "$t")
  [ "$(FUSEJIT_ATTENTION=kernel "$cli" plan --json "$t")" = "$fused" ] ||
    { echo "FUSEJIT_ATTENTION=kernel plans differently from the default: $t"; exit 1; }
  regions=$(grep -o '"kind":"[a-z]*"' <<<"$fused" | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  case $(basename "$t") in
    refused_*)
      if grep -q '"kind":"attention"' <<<"$fused"; then echo "fused, not refused: $t"; exit 1; fi
      grep -q '"kind":"gemm"' <<<"$fused" || { echo "refused but no GEMM: $t ($regions)"; exit 1; }
      why=$("$cli" plan "$t" | grep -o 'attention softmax.*: not fused, [^;]*') ||
        { echo "no reason for the refusal: $t"; exit 1; }
      echo "$(basename "$t" .trace): $regions ${why#*: not fused, }"
      continue
      ;;
  esac
  grep -q '"kind":"attention"' <<<"$fused" || { echo "no attention region: $t ($regions)"; exit 1; }
  if grep -q '"kind":"gemm"' <<<"$fused"; then echo "a GEMM is left: $t ($regions)"; exit 1; fi
  plain=$(FUSEJIT_ATTENTION=0 "$cli" plan --json "$t")
  if grep -q '"kind":"attention"' <<<"$plain"; then echo "fused with FUSEJIT_ATTENTION=0: $t"; exit 1; fi
  grep -q '"kind":"gemm"' <<<"$plain" || { echo "no GEMM with FUSEJIT_ATTENTION=0: $t"; exit 1; }
  echo "$(basename "$t" .trace): $regions"
done
[ "$n" -gt 0 ] || { echo "no traces in $traces"; exit 1; }
for arch in sm_90 sm_80; do
  out=$("$cli" warm --arch "$arch" --cache-dir "$dir/cache-$arch" "$traces" 2>/dev/null)
  echo "$arch: $(grep '^compiled:' <<<"$out")"
  grep -q "failed: 0" <<<"$out" || { echo "$out"; exit 1; }
  if grep -q "^compiled: 0 " <<<"$out"; then echo "$arch: nothing compiled"; exit 1; fi
done
