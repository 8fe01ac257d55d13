#!/usr/bin/env bash
# examples/generate without a GPU (any GPU hidden): the CPU reference runs the tiny decoder,
# greedy, for two sequences; the tokens generated with the KV cache (written in place one
# position per step) and their logits must match a teacher-forced rerun of the whole sequence
# without it, and a double-precision reference.
set -euo pipefail
out=$(CUDA_VISIBLE_DEVICES= FUSEJIT_CACHE=memory FUSEJIT_LOG=error "$1" --config tiny --batch 2 \
  --prompt 7 --new-tokens 6 --check 2>&1)
echo "$out"
grep -q "no GPU: the CPU reference runs the model" <<<"$out"
grep -q "config tiny: 2 layers, hidden 256, 4 heads (2 KV)" <<<"$out"
grep -qE "^check: logits against a rerun without the cache: largest relative error [0-9.e+-]+ over 12 steps \(bound 3e-02\); greedy tokens not its argmax: 0, and [0-9]+ near-ties \(closer than the bound\); not the argmax of their own logits: 0: pass$" <<<"$out"
# Every step's logits against the double-precision reference (examples/llama_reference.h).
grep -qE "^check: logits against a double-precision reference: largest relative error [0-9.e+-]+ over 12 steps \(bound 3e-02\); greedy tokens not its argmax: 0, and [0-9]+ near-ties \(closer than the bound\); not the argmax of their own logits: 0: pass$" <<<"$out"
# The first decode step (it plans and compiles) is timed apart from the steady state.
grep -qE "^first decode step: [0-9.]+ ms" <<<"$out"
grep -qE "^decode: [0-9.]+ ms per step over the 4 steps after the first, [0-9.]+ tokens/s" <<<"$out"
grep -q "^after the first decode step: 0 plans, 0 kernels compiled, 0 dynamic instances in 4 steps$" <<<"$out"
# The issue's spelling of the CI run: --tokens for --new-tokens.
CUDA_VISIBLE_DEVICES= FUSEJIT_CACHE=memory FUSEJIT_LOG=error "$1" --config tiny --tokens 16 --check |
  grep -qE "^check: logits against a rerun without the cache: largest relative error [0-9.e+-]+ over 16 steps \(bound 3e-02\); greedy tokens not its argmax: 0, and [0-9]+ near-ties \(closer than the bound\); not the argmax of their own logits: 0: pass$"
# Sampling runs too, and says what it drew.
CUDA_VISIBLE_DEVICES= FUSEJIT_CACHE=memory FUSEJIT_LOG=error "$1" --config tiny --temperature 0.8 |
  grep -qE "^tokens of sequence 0:( [0-9]+){6}$"
# Weights through a safetensors file: the random weights saved, then loaded instead of drawn,
# give the same greedy tokens, and the cached decode still matches the rerun with them.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
run() { CUDA_VISIBLE_DEVICES= FUSEJIT_CACHE=memory FUSEJIT_LOG=error "$1" --config tiny "${@:2}"; }
saved=$(run "$1" --save-weights "$tmp/w.safetensors")
echo "$saved"
grep -q "weights: 21 tensors saved to $tmp/w.safetensors" <<<"$saved"
# Another seed: the tokens can only match if the weights came from the file (greedy decoding
# reads the seed for nothing else), and random weights of that seed give other tokens.
loaded=$(run "$1" --weights "$tmp/w.safetensors" --seed 7 --check)
echo "$loaded"
grep -q "weights: 21 tensors from $tmp/w.safetensors" <<<"$loaded"
grep -qE "^check: logits against a rerun without the cache: largest relative error [0-9.e+-]+ over 6 steps \(bound 3e-02\); greedy tokens not its argmax: 0, and [0-9]+ near-ties \(closer than the bound\); not the argmax of their own logits: 0: pass$" <<<"$loaded"
tokens() { grep "^tokens of sequence 0:" <<<"$1"; }
[ -n "$(tokens "$saved")" ] && [ "$(tokens "$saved")" = "$(tokens "$loaded")" ] ||
  { echo "tokens differ between random and loaded weights"; exit 1; }
[ "$(tokens "$(run "$1" --seed 7)")" != "$(tokens "$saved")" ] ||
  { echo "seed 7 draws the same tokens: the comparison above shows nothing"; exit 1; }
# A config the file was not made for is refused, naming the tensor and both shapes.
if wrong=$(run "$1" --weights "$tmp/w.safetensors" --kv-heads 4 2>&1); then
  echo "a wrong config was accepted"; exit 1
fi
echo "$wrong"
grep -q "tensor model.layers.0.self_attn.k_proj.weight of $tmp/w.safetensors has shape \[128, 256\] where the config wants \[256, 256\]" <<<"$wrong"
# A deeper config finds a tensor missing; a shallower one says what it left unused.
if missing=$(run "$1" --weights "$tmp/w.safetensors" --layers 3 2>&1); then
  echo "a missing layer was not noticed"; exit 1
fi
echo "$missing"
grep -q "$tmp/w.safetensors has no tensor model.layers.2.input_layernorm.weight" <<<"$missing"
run "$1" --weights "$tmp/w.safetensors" --layers 1 --new-tokens 1 |
  grep -q "weights: 9 tensors of the file unused (a deeper model than --layers?)"
# The decode step replayed (the default: one recorded step, run again per token) and recorded
# anew at every step (--no-replay) draw the same tokens, sampled at batch 2: the replayed step
# advances its own position, token and random key. Only the replay records nothing per step.
replayed=$(run "$1" --batch 2 --temperature 0.8 --top-k 20 --new-tokens 8)
recorded=$(run "$1" --batch 2 --temperature 0.8 --top-k 20 --new-tokens 8 --no-replay)
echo "$replayed"
[ -n "$(tokens "$replayed")" ] && [ "$(tokens "$replayed")" = "$(tokens "$recorded")" ] ||
  { echo "replayed and recorded decode steps drew different tokens"; exit 1; }
grep -qE "^host per decode step: 0.0 us recording its ops, [0-9.]+ us in Replay::run" <<<"$replayed"
grep -qE "; 7 replayed steps, 0 of them one CUDA graph launch$" <<<"$replayed"
grep -qE "^host per decode step: [0-9.]+ us recording its ops, [0-9.]+ us in eval" <<<"$recorded"
# Top-k and top-p sampling.
CUDA_VISIBLE_DEVICES= FUSEJIT_CACHE=memory FUSEJIT_LOG=error "$1" --config tiny --temperature 0.8 \
  --top-k 20 --top-p 0.9 | grep -qE "^tokens of sequence 0:( [0-9]+){6}$"
# Weight-only int8 (--int8): the cached decode matches the rerun and the double-precision decoder
# run on the dequantized weights, at batch 2.
int8=$(run "$1" --int8 --batch 2 --prompt 7 --new-tokens 6 --check)
echo "$int8"
grep -q "^memory: weights [0-9.]* GB (projections int8)" <<<"$int8"
grep -qE "^check: logits against a double-precision reference: largest relative error [0-9.e+-]+ over 12 steps \(bound 3e-02\); greedy tokens not its argmax: 0, and [0-9]+ near-ties \(closer than the bound\); not the argmax of their own logits: 0: pass$" <<<"$int8"
# Saved as I8 with their scales, then loaded (without --int8): the same tokens, and the check.
qsaved=$(run "$1" --int8 --save-weights "$tmp/q.safetensors")
grep -q "weights: 36 tensors saved to $tmp/q.safetensors" <<<"$qsaved"
qloaded=$(run "$1" --weights "$tmp/q.safetensors" --seed 7 --check)
echo "$qloaded"
grep -q "weights: 36 tensors from $tmp/q.safetensors (projections int8, with their scales)" <<<"$qloaded"
grep -qE "^check: logits against a double-precision reference: .*: pass$" <<<"$qloaded"
[ "$(tokens "$qsaved")" = "$(tokens "$qloaded")" ] ||
  { echo "tokens differ between quantized and loaded int8 weights"; exit 1; }
# int8 weights without their scales are refused, naming the tensor missing.
python3 - "$tmp/q.safetensors" "$tmp/noscale.safetensors" <<'PY'
import json, struct, sys
src, dst = sys.argv[1], sys.argv[2]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
header.pop("model.layers.0.mlp.down_proj.scales")
text = json.dumps(header).encode()
open(dst, "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
if noscale=$(run "$1" --weights "$tmp/noscale.safetensors" 2>&1); then
  echo "int8 weights without scales were accepted"; exit 1
fi
echo "$noscale"
grep -q "tensor model.layers.0.mlp.down_proj.weight of $tmp/noscale.safetensors is int8 but the file has no model.layers.0.mlp.down_proj.scales" <<<"$noscale"
# The flags: --help lists them; a bad value or an unknown flag is refused, naming it (exit 2);
# --config applies before the shape flags wherever it stands.
help=$("$1" --help)
grep -q "^usage: generate \[flags\]" <<<"$help"
for flag in --config --layers --weights --save-weights --int8 --batch --prompt --new-tokens \
    --temperature --top-k --top-p --seed --check --no-replay; do
  grep -q -- "  $flag" <<<"$help" || { echo "--help does not list $flag"; exit 1; }
done
refused() {  # MESSAGE FLAGS...: the run must exit 2 and print MESSAGE
  local out rc=0
  out=$(run "$1" "${@:3}" 2>&1) || rc=$?
  [ "$rc" -eq 2 ] && grep -qF -- "$2" <<<"$out" ||
    { echo "generate ${*:3}: exit $rc, wanted 2 and \"$2\"; it printed: $out"; exit 1; }
}
refused "$1" "generate: --batch takes a whole number of at least 1, not 'abc'" --batch abc
refused "$1" "generate: --batch takes a whole number of at least 1, not '0'" --batch 0
refused "$1" "generate: --top-p takes a finite number, not '0.5x'" --temperature 1 --top-p 0.5x
refused "$1" "generate: --temperature takes a finite number, not 'nan'" --temperature nan
refused "$1" "generate: --new-tokens needs a value" --new-tokens
refused "$1" "generate: unknown flag --bogus (generate --help lists them)" --bogus
refused "$1" "generate: --config takes tiny or llama3-8b, not 'big'" --config big
refused "$1" "generate: --top-p must be in (0, 1]" --temperature 1 --top-p 1.5
refused "$1" "and --heads into groups of --kv-heads (hidden 256, heads 4, KV heads 3)" --kv-heads 3
run "$1" --layers 1 --config tiny --new-tokens 3 | grep -q "config tiny: 1 layers, hidden 256"
# The prefill's attention is causal over the step's own keys (tiles above the diagonal skipped),
# the decode step's a boolean mask over the whole cache: the plans of the traces it evaluates
# (saved by FUSEJIT_RECORD_DIR, planned by the fusejit tool, $2).
cli=${2:?"generate_cpu.sh: the fusejit tool's path is the second argument"}
mkdir "$tmp/traces"
FUSEJIT_RECORD_DIR="$tmp/traces" run "$1" --prompt 64 --new-tokens 3 >/dev/null
plans=$(for t in "$tmp"/traces/*.trace; do "$cli" plan "$t"; done)
grep -qE "attention: softmax\(.* \* 0\.125, causal \(fill -inf\)\)" <<<"$plans" ||
  { echo "no causal attention among the recorded traces' plans"; exit 1; }
grep -qE "attention: softmax\(.* \* 0\.125, boolean mask %[0-9]+ \(fill -inf\)\)" <<<"$plans" ||
  { echo "no decode attention over the cache among the recorded traces' plans"; exit 1; }
