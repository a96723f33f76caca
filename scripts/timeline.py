"""Device timeline of the sm90 kernel's phases for a few decode shapes, from a diagnostic build
(src/sm90/timeline.cuh). Build here, run on the GPU machine:

    cmake -S . -B build-timeline -DFLASHMSA_BUILD_TESTS=OFF -DFLASHMSA_TIMELINE=ON \\
        -DCMAKE_BUILD_TYPE=Release && cmake --build build-timeline -j2
    FLASHMSA_LIBRARY=build-timeline/libflashmsa.so PYTHONPATH=python python3 scripts/timeline.py

Each case runs eagerly four times (the last is the warm one); the kernel prints one `TL` line per
instrumented CTA, which this script turns into a table of phase end times in microseconds.
"""
import os
import subprocess
import sys

CASES = ((1, 1), (16, 1), (64, 1), (32, 8))  # (batch, query tokens per request), KV 32768, M3 heads
CALLS = 4


def run_cases():
    sys.path.insert(0, os.path.dirname(__file__))
    import torch
    import flashmsa
    from kernel_smoke import decode_case
    for batch, tokens in CASES:
        args = decode_case(batch, tokens, 32768)
        for call in range(CALLS):
            print(f"=== b{batch} t{tokens} call {call}", flush=True)
            flashmsa.msa_sparse_attention(**args)
            torch.cuda.synchronize()


def tabulate(lines):
    case = None
    for line in lines:
        if line.startswith("==="):
            case = line[4:].strip()
        elif line.startswith("TL ") and case and case.endswith(f"call {CALLS - 1}"):
            fields = line.split()[1:]
            values = dict(zip(fields[0::2], fields[1::2]))
            cta = values.pop("cta")
            phases = "  ".join(f"{name} {int(ns) / 1000:.1f}" for name, ns in values.items())
            print(f"{case:18s} cta {cta:>3s}: {phases}")


def main():
    if sys.argv[1:] == ["--run"]:
        run_cases()
        return
    # The kernel's printf output goes to the process's stdout: run the cases in a child.
    child = subprocess.run([sys.executable, __file__, "--run"], capture_output=True, text=True)
    sys.stderr.write(child.stderr[-2000:] if child.returncode else "")
    tabulate(child.stdout.splitlines())
    sys.exit(child.returncode)


if __name__ == "__main__":
    main()
