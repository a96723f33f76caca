"""Does the paged layout's interleaving of KV heads limit decode bandwidth? One-token decode of
256 (request, KV head) items of 16 random blocks each, KV 32768, in three layouts of the same
bytes: 4 KV heads per page row (MiniMax-M3: a head's block is 128 rows of 256 bytes at a 1 KiB
stride), 2 heads (256 of every 512 bytes) and 1 head (each block one contiguous 32 KiB). The
kernel path is the same (one split, 256 CTAs, group of 16 query heads); only the layout moves.

    FLASHMSA_LIBRARY=build-gpu/libflashmsa.so PYTHONPATH=python python3 scripts/head_layout_probe.py

--freshness instead times batch 64 fresh, warm, after idle and rotating selections, from caches
of three sizes (see freshness()).
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from kernel_smoke import kv_bytes, make_case, time_graph  # noqa: E402

CASES = ((64, 64, 4), (128, 32, 2), (256, 16, 1))  # (batch, Hq, Hkv): Hkv x batch = 256 items


def main():
    print(torch.cuda.get_device_name(), flush=True)
    for round_index in range(2):
        for batch, hq, hkv in CASES:
            args = make_case(batch, hq, hkv, 16, [1] * batch, [32768] * batch, True,
                             pattern="random", paged=True, seed=round_index)
            seconds = time_graph(args)
            seconds = time_graph(args)  # the second timing of an input set (scripts/warming.py)
            print(f"round {round_index} b{batch:3d} hq{hq:2d} hkv{hkv} "
                  f"{seconds * 1e6:8.1f} us {kv_bytes(args) / seconds / 1e12:6.3f} TB/s",
                  flush=True)
            del args
            torch.cuda.empty_cache()


def freshness():
    """--freshness: batch 64 (M3 heads) from caches of 0.25, 1 and 4 GiB (KV 2048, 8192, 32768:
    the same 16 blocks per item). Timings of 10-call graphs, in order:
      fresh   the first timing of a new case (its cache just allocated and filled);
      warm    the same graph built again;
      idle    again after 0.3 s of idle GPU (if slow again: clocks or power state);
      rotate  10 calls cycling through 2 selections of the same cache (if slow: new blocks
              from call to call cost, as in the benchmark, which rotates selections)."""
    print(torch.cuda.get_device_name(), flush=True)
    for kv_len in (2048, 8192, 32768):
        for seed in (10, 11):
            args = make_case(64, 64, 4, 16, [1] * 64, [kv_len] * 64, True, pattern="random",
                             paged=True, seed=seed)
            other = dict(args, q2k_indices=make_case(
                64, 64, 4, 16, [1] * 64, [kv_len] * 64, True, pattern="random", paged=True,
                seed=seed + 100)["q2k_indices"])
            fresh, warm = time_graph(args), time_graph(args)
            time.sleep(0.3)
            idle = time_graph(args)
            rotate = time_graph([args, other])
            print(f"kv{kv_len:6d} seed {seed} fresh {fresh * 1e6:7.1f} us warm {warm * 1e6:7.1f} us "
                  f"idle {idle * 1e6:7.1f} us rotate {rotate * 1e6:7.1f} us "
                  f"({kv_bytes(args) / warm / 1e12:5.3f} TB/s warm)", flush=True)
            del args, other
            torch.cuda.empty_cache()


if __name__ == "__main__":
    freshness() if sys.argv[1:] == ["--freshness"] else main()
