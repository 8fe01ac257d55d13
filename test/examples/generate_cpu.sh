#!/usr/bin/env bash
# examples/generate without a GPU (any GPU hidden): the CPU reference runs the tiny decoder,
# greedy, for two sequences; the tokens generated with the KV cache (written in place one
# position per step) must equal those of a teacher-forced rerun of the whole sequence without it.
set -euo pipefail
out=$(CUDA_VISIBLE_DEVICES= FUSEJIT_CACHE=memory FUSEJIT_LOG=error "$1" --config tiny --batch 2 \
  --prompt 7 --new-tokens 6 --check 2>&1)
echo "$out"
grep -q "no GPU: the CPU reference runs the model" <<<"$out"
grep -q "config tiny: 2 layers, hidden 256, 4 heads (2 KV)" <<<"$out"
grep -q "check: 0 of 12 tokens differ from a rerun without the cache: pass" <<<"$out"
# Sampling runs too, and says what it drew.
CUDA_VISIBLE_DEVICES= FUSEJIT_CACHE=memory FUSEJIT_LOG=error "$1" --config tiny --temperature 0.8 |
  grep -qE "^tokens of sequence 0:( [0-9]+){6}$"
