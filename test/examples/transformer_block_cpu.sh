#!/usr/bin/env bash
# examples/transformer_block without a GPU (any GPU hidden): the CPU reference computes a tiny
# block on the program's own host buffers; the output names the plan a GPU would run and a
# finite checksum of the result written into the program's buffer.
set -euo pipefail
out=$(CUDA_VISIBLE_DEVICES= FUSEJIT_CACHE=memory "$1" 2>&1)
echo "$out"
grep -q "no GPU: the CPU reference computes a tiny block" <<<"$out"
grep -qE "plan: [0-9]+ generated kernels \+ 9 cuBLASLt calls" <<<"$out"
grep -q "pointwise: neg mul mul add neg mul mul add" <<<"$out"   # both rotary embeddings, one kernel
grep -q "normalization: gt where max sub exp sum div" <<<"$out"  # the causal mask inside softmax
grep -qE "^checksum: -?[0-9]" <<<"$out"
