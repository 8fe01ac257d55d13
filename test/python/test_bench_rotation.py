"""bench/rotation.py: the sets of inputs PyTorch's timed runs take in turn, the same count as
fusejit's own timing (rotation_sets in jit/runtime/timing.h; its C++ test has the same cases)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from rotation import rotation_sets  # noqa: E402

MB = 1000 * 1000
L2 = 50 * MB
SPARE = 5000 * MB


def test_a_run_of_twice_the_l2_evicts_itself():
    assert rotation_sets(100 * MB, L2, SPARE) == 1
    assert rotation_sets(537 * MB, L2, SPARE) == 1


def test_smaller_runs_rotate_until_twice_the_l2_moves_between_uses():
    assert rotation_sets(33_554_432 + 8192 * 2 * 2, L2, SPARE) == 4  # 8k keys of one sequence
    assert rotation_sets(99 * MB, L2, SPARE) == 3
    assert rotation_sets(4 * MB, L2, SPARE) == 26


def test_at_most_64_sets_and_what_memory_holds():
    assert rotation_sets(1000, L2, SPARE) == 64
    assert rotation_sets(4 * MB, L2, 10 * MB) == 3
    assert rotation_sets(4 * MB, L2, 0) == 1


def test_unknown_sizes_give_one_set():
    assert rotation_sets(0, L2, SPARE) == 1
    assert rotation_sets(4 * MB, 0, SPARE) == 1
    assert rotation_sets(4 * MB, L2, -1) == 1
