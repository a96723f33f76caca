"""Does the paged layout's interleaving of KV heads limit decode bandwidth? One-token decode of
256 (request, KV head) items of 16 random blocks each, KV 32768, in three layouts of the same
bytes: 4 KV heads per page row (MiniMax-M3: a head's block is 128 rows of 256 bytes at a 1 KiB
stride), 2 heads (256 of every 512 bytes) and 1 head (each block one contiguous 32 KiB). The
kernel path is the same (one split, 256 CTAs, group of 16 query heads); only the layout moves.

    FLASHMSA_LIBRARY=build-gpu/libflashmsa.so PYTHONPATH=python python3 scripts/head_layout_probe.py

--freshness instead times batch 64 fresh, warm, after idle and rotating selections, from caches
of three sizes (see freshness()); --cause separates what a fresh input set changes (cause()).
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from kernel_smoke import kv_bytes, make_case, median_replay_seconds, time_graph  # noqa: E402

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


def copy_tbps(source, destination, reps=20):
    """TB/s (bytes read + written) of one copy of `source` into `destination`, as the median of
    graph replays. The captured copy runs as the graph's memcpy node: about 2.7 TB/s on the H200
    where the benchmark's eager copy reads 4.2, so compare it only with itself."""
    destination.copy_(source)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        destination.copy_(source)
    graph.replay()
    bytes_moved = 2 * source.numel() * source.element_size()
    return bytes_moved / median_replay_seconds(graph, reps) / 1e12


def report_first_second(label, args):
    """The first and second timing of one input set (scripts/warming.py: the first can be slow)."""
    first, second = time_graph(args), time_graph(args)
    print(f"{label:10s} first {first * 1e6:7.1f} us  second {second * 1e6:7.1f} us  "
          f"({kv_bytes(args) / first / 1e12:5.3f} / {kv_bytes(args) / second / 1e12:5.3f} "
          f"TB/s)", flush=True)


def cause():
    """--cause: batch 64, KV 32768 (a 4 GiB cache), what makes a fresh input set slow. After
    the first (fresh) and second (warm) timing of one set, each step changes one thing and times
    twice (first, second):
      rewritten  new random K/V written in place: same addresses, new data;
      moved      the same data copied to new allocations: new addresses, data just written;
      repaged    the same cache, the requests' page-table rows permuted: new blocks per unit;
      idle       after 3 s of idle GPU;
    and a plain 2 GiB copy out of a freshly written buffer, first and second timing (if that is
    slow first too, it is the memory, not the kernel). Slow `rewritten` means freshly written
    data; slow `moved` with fast `rewritten` means new addresses (translation)."""
    print(torch.cuda.get_device_name(), flush=True)
    for seed in (30, 31):
        print(f"seed {seed}", flush=True)
        args = make_case(64, 64, 4, 16, [1] * 64, [32768] * 64, True, pattern="random",
                         paged=True, seed=seed)
        report_first_second("fresh", args)
        generator = torch.Generator(device="cuda").manual_seed(seed + 1000)
        for name in ("k", "v"):
            args[name].copy_(torch.randn(args[name].shape, generator=generator, device="cuda"))
        torch.cuda.synchronize()
        report_first_second("rewritten", args)
        moved = dict(args, k=args["k"].clone(), v=args["v"].clone())
        torch.cuda.synchronize()
        report_first_second("moved", moved)
        del moved
        permutation = torch.randperm(64, generator=generator, device="cuda")
        repaged = dict(args, page_table=args["page_table"][permutation].contiguous())
        report_first_second("repaged", repaged)
        time.sleep(3.0)
        report_first_second("idle", args)
        del args
        torch.cuda.empty_cache()
        source = torch.randn(1 << 30, generator=generator, device="cuda", dtype=torch.float32)
        source = source.to(torch.bfloat16)
        destination = torch.empty_like(source)
        torch.cuda.synchronize()
        first, second = copy_tbps(source, destination), copy_tbps(source, destination)
        print(f"copy 2 GiB first {first:5.3f} TB/s second {second:5.3f} TB/s", flush=True)
        del source, destination
        torch.cuda.empty_cache()


def after_free():
    """--after-free: is the slow first timing of a fresh input set the driver's work on memory
    freed or allocated just before (cause() found it is neither the data nor the addresses)?
    One batch-64 case, timed first and second after each step:
      fresh      just built;
      slept      after 2 s idle;
      allocated  after a new, untouched 24 GiB allocation (cudaMalloc);
      filled     after writing it;
      freed      after freeing it to the driver (empty_cache: cudaFree);
      settled    after 2 s more;
      fresh+2s   a second case built, then 2 s idle before its first timing;
    and a 2 GiB copy timed right after freeing 24 GiB, then after 2 s."""
    print(torch.cuda.get_device_name(), flush=True)
    args = make_case(64, 64, 4, 16, [1] * 64, [32768] * 64, True, pattern="random", paged=True,
                     seed=40)
    report_first_second("fresh", args)
    time.sleep(2.0)
    report_first_second("slept", args)
    big = torch.empty(24 << 30, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    report_first_second("allocated", args)
    big.fill_(1)
    torch.cuda.synchronize()
    report_first_second("filled", args)
    del big
    torch.cuda.empty_cache()
    report_first_second("freed", args)
    time.sleep(2.0)
    report_first_second("settled", args)
    del args
    args = make_case(64, 64, 4, 16, [1] * 64, [32768] * 64, True, pattern="random", paged=True,
                     seed=41)
    torch.cuda.synchronize()
    time.sleep(2.0)
    report_first_second("fresh+2s", args)
    del args
    source = torch.randn(1 << 30, device="cuda").to(torch.bfloat16)
    destination = torch.empty_like(source)
    big = torch.empty(24 << 30, dtype=torch.uint8, device="cuda")
    big.fill_(1)
    del big
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    first, second = copy_tbps(source, destination), copy_tbps(source, destination)
    time.sleep(2.0)
    settled = copy_tbps(source, destination)
    print(f"copy 2 GiB after freeing 24 GiB: {first:5.3f} then {second:5.3f} TB/s; after 2 s "
          f"{settled:5.3f} TB/s", flush=True)


if __name__ == "__main__":
    modes = {"--freshness": freshness, "--cause": cause, "--after-free": after_free}
    modes.get(sys.argv[1] if len(sys.argv) > 1 else "", main)()
