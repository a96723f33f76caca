"""A/B of the quick decode benchmark between library builds, in one run on the GPU machine: the
builds take turns (A B A B ...), each in its own process (the library is chosen at import), so
that drift of the machine over the run falls on both. Prints one table of the issue-4 rows and
the decode suite's weighted figure, one column per run, and keeps each run's log.

    PYTHONPATH=python python3 scripts/ab_decode.py --out DIR [--rounds 2] \\
        main=build-main/libflashmsa.so new=build-gpu/libflashmsa.so \\
        splits4=build-gpu/libflashmsa.so,splits=4

A build may name launch overrides after its library (`,NAME=VALUE` each, flashmsa.testing's
fields, passed to the benchmark as --launch-overrides), so that an override is compared as a
build of its own.

`--low-latency` adds the decode suite's low-latency rows (batch 1-4, 8 query tokens per request,
weight 0 in the suite's figure) to each run and to the table.

`--bench prefill` does the same with the quick prefill benchmark at S = 32768 (the three M3
patterns' useful TFLOP/s and the production-weighted aggregate), for kernel changes that move
prefill_kernel.
"""
import argparse
import os
import re
import subprocess
import sys

ROW = re.compile(r"^\s+(\S+)\s+([0-9.]+) us\s+([0-9.]+) GB/s")
SUITE = re.compile(r"^decode suite full: weighted ([0-9.]+) GB/s")
COPY = re.compile(r"^ceilings: copy ([0-9.]+) GB/s")
PREFILL_ROW = re.compile(r"^\s+(m3_\w+_S\d+)\s+\w+\s+\d+\s+\d+\s+([0-9.]+)\s+([0-9.]+)")
AGGREGATE = re.compile(r"^production-weighted aggregate msa\s*:\s*([0-9.]+)")
PREFILL_ROWS = ("m3_random_S32768", "m3_clustered_S32768", "m3_indexer_S32768", "aggregate")
ISSUE_ROWS = ("b1_kv32768", "b16_kv32768", "b64_kv32768", "b128_kv32768", "b64_kv131072",
              "mtp8_b32_kv32768")


def run_once(label, build, out_dir, index, timeout, bench, low_latency=False):
    """One quick benchmark with `build` ("library[,NAME=VALUE...]"): decode {row: (us, GB/s)}
    plus the suite and the copy, or prefill {row: (ms, useful TFLOP/s)} plus the aggregate."""
    library, *overrides = build.split(",")
    env = dict(os.environ, FLASHMSA_LIBRARY=library)
    log_path = os.path.join(out_dir, f"ab_{index}_{label}.log")
    command = [sys.executable, "-m", f"bench.{bench}", "--quick", "--out",
               os.path.join(out_dir, f"ab_{index}_{label}"),
               "--launch-overrides", ",".join(overrides)]
    if bench == "prefill":  # msa only: the baselines do not move between libraries
        command += ["--sizes", "32768", "--impls", "msa", "--production-impls", "msa"]
    elif low_latency:
        command.append("--low-latency")
    with open(log_path, "w") as log:
        subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
                       check=False)
    rows = {}
    for line in open(log_path):
        if bench == "prefill":
            if match := PREFILL_ROW.match(line):
                rows[match.group(1)] = (float(match.group(2)), float(match.group(3)))
            elif match := AGGREGATE.match(line):
                rows["aggregate"] = (None, float(match.group(1)))
        elif match := ROW.match(line):
            rows[match.group(1)] = (float(match.group(2)), float(match.group(3)))
        elif match := SUITE.match(line):
            rows["suite"] = (None, float(match.group(1)))
        elif match := COPY.match(line):
            rows["copy"] = (None, float(match.group(1)))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("builds", nargs="+", help="LABEL=path/to/libflashmsa.so[,NAME=VALUE...]")
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=int, default=90, help="seconds per benchmark run")
    parser.add_argument("--bench", choices=("decode", "prefill"), default="decode")
    parser.add_argument("--low-latency", action="store_true",
                        help="decode: also the suite's low-latency rows")
    args = parser.parse_args()
    builds = [build.split("=", 1) for build in args.builds]
    os.makedirs(args.out, exist_ok=True)
    columns = []
    for round_index in range(args.rounds):
        for label, library in builds:
            index = len(columns) + 1
            columns.append((f"{label} #{index}", run_once(label, library, args.out, index,
                                                           args.timeout, args.bench,
                                                           args.low_latency)))
    print("case".ljust(26) + "".join(name.rjust(16) for name, _ in columns))
    # Rows with a time: "<time> <rate>"; whole-run figures (suite, copy, aggregate): the rate.
    if args.bench == "prefill":
        names, timed, whole = PREFILL_ROWS, "{:.3f}ms {:.1f}", "{:.1f} TF"
    else:
        low_latency_rows = tuple(dict.fromkeys(row for _, rows in columns for row in rows
                                               if row.startswith("low-latency")))
        names = ISSUE_ROWS + low_latency_rows + ("suite", "copy")
        timed, whole = "{:.2f} us {:.0f}", "{:.0f} GB/s"
    for row in names:
        cells = []
        for _, rows in columns:
            time, rate = rows.get(row, (None, None))
            cells.append("-" if rate is None else
                         (whole.format(rate) if time is None else timed.format(time, rate)))
        print(row.ljust(26) + "".join(cell.rjust(16) for cell in cells))

if __name__ == "__main__":
    main()
