"""Sets of inputs that timed runs take in turn, as fusejit's own timing does (`rotation_sets` in
jit/runtime/timing.h): a run that reads and writes less than twice the GPU's L2 would otherwise
find part of its inputs in the L2 where the run before left them, which a real workload rarely
does. Used by bench/torch_bench.py and bench/torch_attention.py, so that PyTorch's times and
fusejit's are taken the same way."""

MAX_SETS = 64


def rotation_sets(run_bytes, l2_bytes, spare_bytes):
    """1 where a run moves at least twice the L2; else enough sets that the runs between two
    uses of one move twice the L2, as far as spare_bytes holds the copies (64 at most)."""
    if run_bytes <= 0 or l2_bytes <= 0 or run_bytes >= 2 * l2_bytes:
        return 1
    between = -(-2 * l2_bytes // run_bytes)
    return 1 + min(between, max(spare_bytes, 0) // run_bytes, MAX_SETS - 1)


def input_sets(torch, inputs, out_bytes=0, runs=None):
    """[inputs, copies of them...]: the sets for these inputs on the current GPU (tensors are
    cloned, anything else shared), no more than `runs` of them."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    run = sum(t.numel() * t.element_size() for t in tensors) + out_bytes
    n = rotation_sets(run, props.L2_cache_size, props.total_memory // 16)
    if runs is not None:
        n = max(1, min(n, runs))
    def copy(x):
        return x.clone() if isinstance(x, torch.Tensor) else x
    return [list(inputs)] + [[copy(x) for x in inputs] for _ in range(n - 1)]
