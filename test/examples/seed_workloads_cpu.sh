#!/bin/sh
# The main example as scripts/demo runs it on a machine without a GPU (CUDA_VISIBLE_DEVICES
# hides any): per workload a checksum and the plan a GPU would run, fused and unfused, a line per
# fused region, and a `fusejit plan` command that works. No timing is printed, so none is checked.
#   seed_workloads_cpu.sh SEED_WORKLOADS
set -eu
out=$(CUDA_VISIBLE_DEVICES= FUSEJIT_LOG=error FUSEJIT_CACHE=memory "$1")

expect() {
  printf '%s\n' "$out" | grep -Eq -- "$1" && return 0
  printf 'missing a line matching: %s\n--- output ---\n%s\n' "$1" "$out"
  exit 1
}

expect '^fusejit .*: no GPU found, so eval runs the CPU reference'
# workload dtype checksum fused unfused: each memory-bound workload is one kernel fused, more
# than one unfused; GEMMs are cuBLASLt calls that absorb their bias and activation.
num='[-+][0-9.]+e[-+][0-9]+'
for w in ew_chain long_chain bias_gelu sumsq naive_softmax softmax layernorm rmsnorm \
         add_layernorm; do
  for d in f32 bf16; do
    expect "^$w +$d +$num +1\+0 +([2-9]|[1-9][0-9])\+0\$"
  done
done
expect "^gemm_bias_relu +bf16 +$num +0\+1 +2\+1\$"
expect "^gemm_bias_gelu +bf16 +$num +0\+1 +2\+1\$"
expect "^two_gemm_mul +bf16 +$num +1\+2 +1\+2\$"
expect "^gemm_layernorm +bf16 +$num +1\+1 +[0-9]+\+1\$"
expect "^mlp +bf16 +$num +0\+2 +[0-9]+\+2\$"
# The regions, one line each under their workload.
expect '^    pointwise: mul add relu$'
expect '^    normalization: .*exp.*div'
expect '^    gemm: cublasLt 128x128x128 bf16\+bias\+relu$'
# The pointer to `fusejit plan` names a tool and a trace that exist: run it.
cmd=$(printf '%s\n' "$out" | grep -E '^  [^ ]+ plan [^ ]+\.trace$' | head -n 1)
[ -n "$cmd" ] || expect '^  [^ ]+ plan [^ ]+\.trace$'
plan=$($cmd)
printf '%s\n' "$plan" | grep -q normalization || { echo "$cmd printed no normalization:"; echo "$plan"; exit 1; }
echo "seed_workloads on the CPU: plan summary lines as expected"
