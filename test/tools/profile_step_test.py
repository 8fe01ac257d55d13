#!/usr/bin/env python3
"""scripts/profile-step's analysis (--csv) on a CSV laid out as `ncu --csv --page raw` writes it:
a prefill, a first decode step, two replayed steps (each with a layer twice, the vocabulary
projection and sampling rounds that repeat), then a second prefill. The step must be found whole,
its time summed in the unit's scale, its kernels grouped by kind and grid, and what follows the
vocabulary projection listed. Exits 1 on the first mismatch."""
import csv
import pathlib
import subprocess
import sys
import tempfile

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "profile-step"


def kernel(kind, n):
    return f"fj_{kind}_{n:016x}"


def main():
    layer = [(kernel("normalization", 1), "(1, 1, 1)", 3000), (kernel("gemv", 2), "(384, 1, 1)", 20000),
             (kernel("attention", 3), "(24, 1, 1)", 7000), (kernel("gemv", 4), "(256, 1, 1)", 15000)]
    sampling = [(kernel("reduction", 5), "(1024, 1, 1)", 15000), (kernel("pointwise", 6), "(1, 1, 1)", 2500)] * 3
    vocabulary = [(kernel("gemv", 9), "(528, 1, 1)", 250000)]
    step = layer * 2 + vocabulary + sampling + [(kernel("pointwise", 7), "(1, 1, 1)", 2000)]
    prefill = [("nvjet_sm90_tst_128x128", "(32, 8, 1)", 90000), (kernel("pointwise", 8), "(64, 1, 1)", 5000)] * 2
    rows = prefill + step + step + step + prefill
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "step.csv"
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["==PROF== Connected to process"])
            w.writerow(["ID", "Process ID", "Kernel Name", "Grid Size", "gpu__time_duration.sum"])
            w.writerow(["", "", "", "", "ns"])
            for i, (name, grid, ns) in enumerate(rows):
                w.writerow([i, 1, name, grid, f"{ns:,}"])  # ncu writes thousands separators
        out = subprocess.run([sys.executable, str(SCRIPT), "--csv", str(path)], capture_output=True,
                             text=True)
    print(out.stdout, out.stderr)
    want_us = sum(ns for _, _, ns in step) / 1000
    expected = [
        f"{len(rows)} kernels profiled",
        f"the last decode step: {len(step)} kernels, {want_us:.1f} us of kernel time",
        "gemv grid (384, 1, 1) 2 40.0 us 20.00 us each",
        "reduction grid (1024, 1, 1) 3 45.0 us 15.00 us each",
        # What follows the vocabulary projection, all the step's other 15 kernels (fewer than
        # the 20 listed at most): the 6 sampling kernels, the step's write, then the next step's
        # two layers.
        f"the 15 kernels after the step's longest (gemv, 250.0 us: the vocabulary projection), "
        f"in order, {(45000 + 7500 + 2000 + 2 * 45000) / 1000:.1f} us:",
        "15.00 us reduction grid (1024, 1, 1) 2.50 us pointwise grid (1, 1, 1)",
    ]
    report = " ".join(out.stdout.split())  # spacing aside
    if out.returncode != 0:
        sys.exit(f"profile-step exited {out.returncode}")
    for line in expected:
        if line not in report:
            sys.exit(f"missing from the report: {line!r}")
    print("profile-step analysis: pass")


if __name__ == "__main__":
    main()
