"""Quick kernel-development loop on the GPU machine: a few contract cases against the fp64
reference, then MiniMax-M3 prefill timings per selection pattern. The full suite is tests/gpu
and the full benchmark bench/; this is the few-seconds check run after each kernel change.

    FLASHMSA_LIBRARY=build-gpu/libflashmsa.so PYTHONPATH=python python3 scripts/kernel_smoke.py
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import flashmsa  # noqa: E402
from flashmsa.patterns import make_q2k  # noqa: E402
from torch_reference import check_close, error_stats, reference_msa  # noqa: E402

HEAD_DIM = 128


def make_case(batch, hq, hkv, topk, q_lens, k_lens, causal, pattern="random", dtype=torch.bfloat16,
              paged=False, seed=0):
    torch.manual_seed(seed)
    dev = "cuda"
    total_q, total_k = sum(q_lens), sum(k_lens)
    q = (torch.randn(total_q, hq, HEAD_DIM, device=dev) / 3).to(dtype)
    k = (torch.randn(total_k, hkv, HEAD_DIM, device=dev) / 3).to(dtype)
    v = (torch.randn(total_k, hkv, HEAD_DIM, device=dev) / 3).to(dtype)
    cu_q = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)), dtype=torch.int32, device=dev)
    cu_k = torch.tensor([0] + list(torch.tensor(k_lens).cumsum(0)), dtype=torch.int32, device=dev)
    q2k = make_q2k(pattern, q_lens, k_lens, hkv, topk, causal=causal, seed=seed, device=dev)
    args = dict(q=q, k=k, v=v, q2k_indices=q2k, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k,
                causal=causal)
    if paged:
        # Scatter each request's blocks to random pages.
        pages_per = [(n + 127) // 128 for n in k_lens]
        num_pages = sum(pages_per) + 3
        perm = torch.randperm(num_pages, device=dev)
        kp = torch.randn(num_pages, hkv, 128, HEAD_DIM, device=dev).to(dtype)
        vp = torch.randn(num_pages, hkv, 128, HEAD_DIM, device=dev).to(dtype)
        table = torch.full((batch, max(pages_per)), -1, dtype=torch.int32, device=dev)
        used = 0
        for b, n in enumerate(k_lens):
            for j in range(pages_per[b]):
                page = perm[used].item()
                used += 1
                table[b, j] = page
                lo, hi = cu_k[b].item() + 128 * j, min(cu_k[b].item() + 128 * j + 128, cu_k[b + 1].item())
                kp[page, :, : hi - lo] = k[lo:hi].transpose(0, 1)
                vp[page, :, : hi - lo] = v[lo:hi].transpose(0, 1)
        args.update(k=kp, v=vp, cu_seqlens_k=None, page_table=table,
                    seqused_k=torch.tensor(k_lens, dtype=torch.int32, device=dev))
    return args


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


def useful_flops(q2k, cu_q, cu_k, causal, group_size):
    """4 * D * sum over (token, q head) of keys read (contract section 10), single request."""
    hkv, total_q, topk = q2k.shape
    seqlen_k = (cu_k[1] - cu_k[0]).item()
    pos = torch.arange(total_q, device=q2k.device) + seqlen_k - total_q
    limit = (pos + 1).clamp(max=seqlen_k) if causal else torch.full_like(pos, seqlen_k)
    ids = q2k.long().sort(dim=-1).values
    first = torch.ones_like(ids, dtype=torch.bool)
    first[..., 1:] = ids[..., 1:] != ids[..., :-1]
    keys = (limit.view(1, -1, 1) - 128 * ids).clamp(0, 128)
    keys = torch.where(first & (ids >= 0), keys, torch.zeros_like(keys))
    return 4 * HEAD_DIM * group_size * keys.sum().item()


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


def decode_case(batch, tokens, kv_len, pattern="random", seed=0, topk=16):
    """MiniMax-M3 decode: paged cache, `tokens` query tokens per request, causal."""
    return make_case(batch, 64, 4, topk, [tokens] * batch, [kv_len] * batch, True,
                     pattern=pattern, paged=True, seed=seed)


def decode_topk_sweep():
    """Decode time against blocks per (request, KV head): slope = per-block cost, intercept =
    fixed cost (launch, planning, epilogue)."""
    for batch in (1, 64):
        for topk in (2, 4, 8, 16, 32, 64):
            args = decode_case(batch, 1, 32768, topk=topk)
            seconds = time_graph(args)
            gbytes = kv_bytes(args["q2k_indices"], args["cu_seqlens_q"], 4)
            print(f"sweep b{batch:3d} topk{topk:3d} {seconds * 1e6:9.1f} us "
                  f"{gbytes / seconds / 1e12:6.2f} TB/s", flush=True)


def kv_bytes(q2k, cu_q, num_kv_heads):
    """Distinct selected blocks' K and V bytes per (request, KV head), contract section 10."""
    total = 0
    for b in range(cu_q.numel() - 1):
        ids = q2k[:, cu_q[b]:cu_q[b + 1]].reshape(num_kv_heads, -1)
        for h in range(num_kv_heads):
            total += torch.unique(ids[h][ids[h] >= 0]).numel()
    return total * 2 * 128 * HEAD_DIM * 2


def time_graph(args, reps=50):
    flashmsa.msa_sparse_attention(**args)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(10):
            flashmsa.msa_sparse_attention(**args)
    for _ in range(3):
        graph.replay()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for i in range(reps):
        start[i].record()
        graph.replay()
        end[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(start, end))
    return times[len(times) // 2] * 1e-3 / 10


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
        gbytes = kv_bytes(args["q2k_indices"], args["cu_seqlens_q"], 4)
        print(f"decode b{batch:3d} t{tokens} kv{kv_len:6d} {seconds * 1e6:9.1f} us "
              f"{gbytes / seconds / 1e12:6.2f} TB/s", flush=True)
    for s in (8192, 32768):
        for pattern in ("random", "clustered", "indexer"):
            args = make_case(1, 64, 4, 16, [s], [s], True, pattern=pattern)
            seconds = time_call(args)
            flops = useful_flops(args["q2k_indices"], args["cu_seqlens_q"], args["cu_seqlens_k"], True, 16)
            print(f"M3 S{s} {pattern:9s} {seconds * 1e3:8.3f} ms  {flops / seconds / 1e12:7.1f} "
                  f"useful TFLOP/s", flush=True)


if __name__ == "__main__":
    decode_topk_sweep() if sys.argv[1:] == ["--sweep"] else main()
