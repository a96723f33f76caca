"""Does a decode call get faster over a process's life, and what warms? (docs/performance.md,
ninth session: batch 64 timed 72.7 us first and 69.3 us some 2500 calls later, on the same
inputs.) For each case, graph-replay timings (kernel_smoke.time_graph, 530 calls each):

  same     the same inputs, timed again and again: the curve over calls;
  fresh    new inputs of the same shapes each time (new allocations, new pages and indices);
  reused   the first inputs again, after the fresh ones.

If `fresh` starts slow every time while `same` and `reused` stay fast, what warms belongs to
the inputs (address translation of the KV allocation, say); if `fresh` is as fast as `same`
by then, it is the machine (clocks, power). Run with nvidia-smi sampling clocks alongside:

    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \\
        --format=csv -lms 250 > smi.log &
    PYTHONPATH=python:scripts python3 scripts/warming.py
"""
import time

import torch

from kernel_smoke import decode_case, kv_bytes, time_graph


def timed(label, args, start):
    seconds = time_graph(args)
    print(f"  {label:8s} t={time.perf_counter() - start:6.2f} s  {seconds * 1e6:8.1f} us "
          f"{kv_bytes(args) / seconds / 1e12:5.2f} TB/s", flush=True)


def main():
    print(torch.cuda.get_device_name(), flush=True)
    for batch, kv_len in ((64, 32768), (128, 32768)):
        print(f"b{batch} kv{kv_len}", flush=True)
        start = time.perf_counter()
        first = decode_case(batch, 1, kv_len, seed=100)
        for _ in range(10):
            timed("same", first, start)
        for i in range(4):
            fresh = decode_case(batch, 1, kv_len, seed=200 + i)
            timed("fresh", fresh, start)
            timed("fresh", fresh, start)
            del fresh
        for _ in range(3):
            timed("reused", first, start)
        del first
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
