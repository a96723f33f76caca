"""Quick kernel-development loop on the GPU machine: a few contract cases against the fp64
reference, then MiniMax-M3 prefill timings per selection pattern. The full suite is tests/gpu
and the full benchmark bench/; this is the few-seconds check run after each kernel change.

    FLASHMSA_LIBRARY=build-gpu/libflashmsa.so PYTHONPATH=python python3 scripts/kernel_smoke.py
        [--tune splits=1,4 deep_pipeline=1 | --sweep | --kernels]
"""
import os
import sys

import torch

ROOT = os.path.join(os.path.dirname(__file__), "..")
sys.path[:0] = [os.path.join(ROOT, "tests"), ROOT]
import flashmsa  # noqa: E402
import flashmsa.testing  # noqa: E402
from bench.selection import BLOCK, distinct_blocks, select  # noqa: E402
from bench.selection import kv_bytes as bench_kv_bytes  # noqa: E402
from flashmsa.cli import build_inputs  # noqa: E402
from flashmsa.reference import keys_read  # noqa: E402
from torch_reference import check_close, error_stats, reference_msa  # noqa: E402

HEAD_DIM = 128


def make_case(batch, hq, hkv, topk, q_lens, k_lens, causal, pattern="random", dtype=torch.bfloat16,
              paged=False, seed=0, device="cuda", kv_dtype=None):
    """The call's arguments (randn / 3 data, `pattern` selections), built as the CLI builds them;
    kv_dtype: q's dtype (None), or "fp8" / "nvfp4" K/V quantized as the CLI does."""
    assert len(q_lens) == len(k_lens) == batch
    return build_inputs(list(q_lens), list(k_lens), hq, hkv, topk, pattern, causal, dtype,
                        dtype if kv_dtype is None else kv_dtype, "paged" if paged else "flat",
                        device, seed)


def check(name, args, rows=None, **extra):
    out, lse = flashmsa.msa_sparse_attention(**args, return_softmax_lse=True, **extra)
    torch.cuda.synchronize()
    ref, ref_lse, _ = reference_msa(**args, query_rows=rows, **{k: v for k, v in extra.items()})
    got, got_lse = (out, lse) if rows is None else (out[rows], lse[rows])
    max_abs, rel = error_stats(got, ref)
    try:
        check_close(got, ref, args["q"].dtype, lse=got_lse, ref_lse=ref_lse, case=name)
        status = "PASS"
    except AssertionError as error:
        status = f"FAIL {error}"
    print(f"{name:48s} max_abs {max_abs:.2e} rel_l2 {rel:.2e} {status}", flush=True)
    return out


def useful_flops(args):
    """Contract section 10: 4 * D * sum over (token, query head) of the keys it reads."""
    keys = keys_read(args["q2k_indices"], args["cu_seqlens_q"], args.get("cu_seqlens_k"),
                     args["causal"], args.get("page_table"), args.get("seqused_k"))
    group_size = args["q"].shape[1] // args["q2k_indices"].shape[0]
    return 4 * HEAD_DIM * group_size * int(keys.sum().item())


def selection_of(args):
    """The call's canonical selection (bench/selection.py) and its batch size."""
    seqlens_k = args["seqused_k"] if "seqused_k" in args else args["cu_seqlens_k"].diff()
    max_pages = args["page_table"].shape[1] if "page_table" in args else None
    selection = select(args["q2k_indices"], args["cu_seqlens_q"], seqlens_k, args["causal"],
                       max_pages=max_pages)
    return selection, seqlens_k.numel()


def kv_bytes(args):
    """Contract section 10: K and V bytes of the distinct selected blocks per (request, head)."""
    return bench_kv_bytes(*selection_of(args))


def union_sizes(args):
    """(Hkv, B) distinct selected blocks per (KV head, request): a one-tile request's union."""
    selection, batch = selection_of(args)
    return distinct_blocks(selection.request, selection, batch)


def time_call(args, reps=20):
    for _ in range(3):
        flashmsa.msa_sparse_attention(**args)
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        start[i].record()
        flashmsa.msa_sparse_attention(**args)
        end[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(start, end))
    return times[len(times) // 2] * 1e-3


def cases_from_env(name, default):
    """The decode cases an environment variable names, "BxT[xKV],..." (batch x query tokens per
    request x KV length, 32768 when left out), as (batch, tokens, kv_len); `default` if unset."""
    if not os.environ.get(name):
        return default
    return tuple((*(int(n) for n in case.split("x")), 32768)[:3]
                 for case in os.environ[name].split(","))


def decode_case(batch, tokens, kv_len, pattern="random", seed=0, topk=16, kv_dtype=None):
    """MiniMax-M3 decode: paged cache, `tokens` query tokens per request, causal."""
    return make_case(batch, 64, 4, topk, [tokens] * batch, [kv_len] * batch, True,
                     pattern=pattern, paged=True, seed=seed, kv_dtype=kv_dtype)


def decode_topk_sweep():
    """Decode time against blocks per (request, KV head): slope = per-block cost, intercept =
    fixed cost (launch, planning, epilogue)."""
    for batch in (1, 64):
        for topk in (2, 4, 8, 16, 32, 64):
            args = decode_case(batch, 1, 32768, topk=topk)
            seconds = time_graph(args)
            gbytes = kv_bytes(args)
            print(f"sweep b{batch:3d} topk{topk:3d} {seconds * 1e6:9.1f} us "
                  f"{gbytes / seconds / 1e12:6.2f} TB/s", flush=True)


def decode_kernel_times():
    """Per-kernel device times (torch.profiler) of a few decode calls: the split kernel and the
    merge kernel apart, to see where a small batch's time goes. KERNEL_CASES="8x8x100000,1x1"
    times those instead (batch x tokens [x KV length, 32768 when left out])."""
    from torch.profiler import ProfilerActivity, profile
    cases = cases_from_env("KERNEL_CASES", ((1, 1, 32768), (16, 1, 32768), (64, 1, 32768)))
    for batch, tokens, kv_len in cases:
        args = decode_case(batch, tokens, kv_len)
        for _ in range(3):
            flashmsa.msa_sparse_attention(**args)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                flashmsa.msa_sparse_attention(**args)
            torch.cuda.synchronize()
        for event in prof.key_averages():
            if event.device_type.name == "CUDA" and event.count >= 20:
                print(f"kernels b{batch:3d} t{tokens} kv{kv_len:6d} {event.key[:60]:60s} "
                      f"x{event.count} {event.device_time:8.1f} us avg", flush=True)


def decode_tuning_sweep(settings=None):
    """Graph-replay times of the M3 decode cases under launch overrides (flashmsa.testing.FIELDS:
    splits, tiles_outer, evict_first, speculate, deep_pipeline, stages, throttle, pace, ...),
    each setting "name=value". The settings swept by default are the open questions;
    the commit history records the earlier sweeps."""
    cases = ((1, 1, 32768), (8, 1, 32768), (16, 1, 32768), (64, 1, 32768), (128, 1, 32768),
             (64, 1, 131072), (32, 8, 32768))
    # TUNE_CASES="1x1,16x1,128x8x1000" sweeps only those (cases_from_env).
    cases = cases_from_env("TUNE_CASES", cases)
    settings = list(settings or ["stages=2", "splits=1", "splits=4", "deep_pipeline=1"])
    # Default again at the end: the first timing of an input set runs about 5% slow at batch 64
    # and 128, so compare the settings with this last one.
    settings = ["default"] + settings + ["default"]
    # TUNE_SETS=n times calls that cycle through n input sets (seeds), as the benchmark's
    # rotation does, so that small batches' K/V is not read from L2 (one set: it is).
    sets = int(os.environ.get("TUNE_SETS", "1"))
    for batch, tokens, kv_len in cases:
        args = [decode_case(batch, tokens, kv_len, seed=seed) for seed in range(sets)]
        gbytes = kv_bytes(args[0])
        for setting in settings:
            fields = {}
            if setting != "default":
                name, value = setting.split("=", 1)
                fields[name] = int(value)
            with flashmsa.testing.launch_overrides(**fields):
                seconds = time_graph(args)
            print(f"tune b{batch:3d} t{tokens} kv{kv_len:6d} {setting:20s} "
                  f"{seconds * 1e6:9.1f} us {gbytes / seconds / 1e12:6.2f} TB/s", flush=True)


def time_graph(args, reps=50):
    """Seconds per call: median replay of a graph of 10 calls of `args`, or of calls cycling
    through a list of argument sets."""
    arg_sets = args if isinstance(args, list) else [args]
    for call_args in arg_sets:
        flashmsa.msa_sparse_attention(**call_args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(10):
            flashmsa.msa_sparse_attention(**arg_sets[i % len(arg_sets)])
    for _ in range(3):
        graph.replay()
    return median_replay_seconds(graph, reps) / 10


def median_replay_seconds(graph, reps):
    """Median seconds of one replay of a captured `graph`, over `reps` CUDA-event timings."""
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        start[i].record()
        graph.replay()
        end[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(start, end))
    return times[len(times) // 2] * 1e-3


def main():
    print(torch.cuda.get_device_name(), flush=True)
    check("b2 hq8 hkv2 topk16 flat noncausal", make_case(2, 8, 2, 16, [100, 37], [2048, 700], False))
    check("b2 hq2 hkv2 topk16 flat causal", make_case(2, 2, 2, 16, [130, 64], [1024, 512], True))
    check("b1 hq1 hkv1 topk4", make_case(1, 1, 1, 4, [70], [1000], False))
    check("b2 hq2 hkv2 topk16 paged causal",
          make_case(2, 2, 2, 16, [130, 64], [1024, 512], True, paged=True))
    check("b1 hq12 hkv4 topk16 fp16 causal",
          make_case(1, 12, 4, 16, [300], [3000], True, dtype=torch.float16))
    check("b1 hq64 hkv4 topk64 causal", make_case(1, 64, 4, 64, [200], [9000], True))
    check("b2 hq16 hkv1 topk1", make_case(2, 16, 1, 1, [50, 60], [500, 700], True))
    for pattern in ("random", "clustered", "indexer"):
        check(f"M3 S4096 {pattern}",
              make_case(1, 64, 4, 16, [4096], [4096], True, pattern=pattern),
              rows=torch.randperm(4096, device="cuda")[:256])
    for batch, tokens, kv_len in ((1, 1, 32768), (3, 2, 1000), (64, 1, 5000), (128, 8, 300),
                                  (1, 8, 32768), (16, 1, 32768)):
        args = decode_case(batch, tokens, kv_len)
        rows = None if batch * tokens <= 256 else torch.randperm(batch * tokens, device="cuda")[:256]
        check(f"decode b{batch} t{tokens} kv{kv_len}", args, rows=rows)
    for batch, tokens, kv_len in ((1, 1, 32768), (16, 1, 32768), (64, 1, 32768), (128, 1, 32768),
                                  (64, 1, 131072), (32, 8, 32768)):
        args = decode_case(batch, tokens, kv_len)
        seconds = time_graph(args)
        gbytes = kv_bytes(args)
        print(f"decode b{batch:3d} t{tokens} kv{kv_len:6d} {seconds * 1e6:9.1f} us "
              f"{gbytes / seconds / 1e12:6.2f} TB/s", flush=True)
    for s in (8192, 32768):
        for pattern in ("random", "clustered", "indexer"):
            args = make_case(1, 64, 4, 16, [s], [s], True, pattern=pattern)
            seconds = time_call(args)
            flops = useful_flops(args)
            print(f"M3 S{s} {pattern:9s} {seconds * 1e3:8.3f} ms  {flops / seconds / 1e12:7.1f} "
                  f"useful TFLOP/s", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--sweep"]:
        decode_topk_sweep()
    elif sys.argv[1:2] == ["--tune"]:
        # --tune [NAME=v1,v2,... ...]: sweep these overrides (each value alone, in turn)
        # instead of the default list.
        swept = [f"{name}={value}" for arg in sys.argv[2:]
                 for name, values in [arg.split("=")] for value in values.split(",")]
        decode_tuning_sweep(swept or None)
    elif sys.argv[1:] == ["--kernels"]:
        decode_kernel_times()
    else:
        main()
