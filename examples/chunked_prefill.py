"""Chunked prefill with FlashMSA: several requests of different query lengths in one call.

    python3 examples/chunked_prefill.py                 # CUDA on a Hopper GPU, else CPU
    python3 examples/chunked_prefill.py --device cpu

An engine that prefills long prompts in chunks (and mixes decode tokens into the same batch)
runs, per layer, one attention call over requests that each bring a chunk of new query tokens
on top of a prefix already in the paged K/V cache:

- q holds the chunks back to back (total_q, Hq, D), cu_seqlens_q marks where each starts;
- the K/V cache is paged (num_pages, Hkv, 128, D), with a page table (B, max_pages) and
  seqused_k = prefix + chunk (the chunk's own K/V are written to the cache before attention);
- q_offset (B,) gives the causal position of each chunk's first token explicitly: its prefix
  length (here the same as the default end-aligned offset seqused_k - chunk, which the example
  checks: both calls agree bit for bit);
- causal, with the log-sum-exp of each (row, head) returned (return_softmax_lse=True), as
  engines need to merge attention states;
- q2k_indices (Hkv, total_q, topk) are what an indexer chose, here flashmsa.patterns.make_q2k.

The result is checked on a sample of rows (the first and last of every chunk among them)
against the fp64 evaluation of flashmsa.reference. MiniMax-M3 heads (Hq 64, Hkv 4, D 128,
topk 16); the CPU runs shorter requests. Exits 1 on a mismatch.
"""
import argparse
import sys
import time

import torch

import flashmsa
from flashmsa.patterns import make_q2k
from flashmsa.reference import evaluate_rows

PAGE = 128
HEAD_DIM = 128
MAX_ABS_ERROR, MAX_REL_L2_ERROR, MAX_LSE_ERROR = 2.5e-2, 1e-2, 1e-2
# (prefix already in the cache, chunk of new query tokens) per request: a first chunk, later
# chunks of long prompts, and decode tokens riding along (chunk 1).
REQUESTS = {
    "cuda": [(0, 2048), (6144, 1000), (30000, 512), (1200, 37), (16000, 1), (9000, 1)],
    "cpu": [(0, 256), (700, 128), (1500, 77), (300, 1)],
}
CHECK_ROWS = {"cuda": 512, "cpu": 96}


def default_device():
    if (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
            and flashmsa.has_cuda()):
        return "cuda"
    return "cpu"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="default: cuda on a Hopper GPU with a CUDA build, else cpu")
    parser.add_argument("--heads", default="64/4", help="Hq/Hkv (default 64/4, MiniMax-M3)")
    parser.add_argument("--topk", type=int, default=16, help="blocks per query (default 16)")
    parser.add_argument("--pattern", default="indexer", choices=("random", "clustered",
                                                                  "indexer"))
    parser.add_argument("--check-rows", type=int, help="rows checked against fp64 "
                        "(default 512 on CUDA, 96 on CPU)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def sample_rows(cu_seqlens_q, count, generator):
    """The first and last row of every chunk, and random others, sorted."""
    starts, ends = cu_seqlens_q[:-1], cu_seqlens_q[1:] - 1
    total_q = int(cu_seqlens_q[-1])
    random_rows = torch.randperm(total_q, generator=generator)[:count]
    return torch.unique(torch.cat([starts, ends, random_rows]).long())


def main():
    options = parse_args()
    device = torch.device(options.device or default_device())
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but torch sees no CUDA device")
    num_qo_heads, num_kv_heads = (int(x) for x in options.heads.split("/"))
    topk = options.topk
    dtype = torch.bfloat16
    torch.manual_seed(options.seed)
    generator = torch.Generator().manual_seed(options.seed)

    requests = REQUESTS[device.type]
    prefixes = torch.tensor([prefix for prefix, _ in requests])
    chunks = torch.tensor([chunk for _, chunk in requests])
    key_lens = prefixes + chunks
    batch = len(requests)
    total_q = int(chunks.sum())

    # Paged cache: each request's pages anywhere in the pool, in random order.
    pages_per_request = (key_lens + PAGE - 1) // PAGE
    max_pages = int(pages_per_request.max())
    num_pages = int(pages_per_request.sum())
    pool = torch.randperm(num_pages, generator=generator)
    page_table = torch.zeros(batch, max_pages, dtype=torch.int32)
    first = 0
    for request, count in enumerate(pages_per_request.tolist()):
        page_table[request, :count] = pool[first:first + count].to(torch.int32)
        first += count
    k_cache = torch.randn(num_pages, num_kv_heads, PAGE, HEAD_DIM, device=device,
                          dtype=dtype) / 3
    v_cache = torch.randn_like(k_cache)

    q = torch.randn(total_q, num_qo_heads, HEAD_DIM, device=device, dtype=dtype) / 3
    cu_seqlens_q = torch.zeros(batch + 1, dtype=torch.int32)
    cu_seqlens_q[1:] = torch.cumsum(chunks, 0)
    q2k = make_q2k(options.pattern, chunks.tolist(), key_lens.tolist(), num_kv_heads, topk,
                   causal=True, q_offsets=prefixes.tolist(), seed=options.seed, device=device)
    kwargs = dict(q=q, k=k_cache, v=v_cache, q2k_indices=q2k,
                  cu_seqlens_q=cu_seqlens_q.to(device), page_table=page_table.to(device),
                  seqused_k=key_lens.to(device=device, dtype=torch.int32), causal=True,
                  q_offset=prefixes.to(device=device, dtype=torch.int32))

    print(f"chunked prefill on {device}: {batch} requests, Hq {num_qo_heads}, Hkv {num_kv_heads}, "
          f"D {HEAD_DIM}, topk {topk} ({options.pattern}), bf16, causal, paged K/V "
          f"({num_pages} pages), total_q {total_q}")
    for request, (prefix, chunk) in enumerate(requests):
        print(f"  request {request}: prefix {prefix:6d} + chunk {chunk:5d} query tokens "
              f"-> {prefix + chunk} keys")

    started = time.perf_counter()
    out, lse = flashmsa.msa_sparse_attention(**kwargs, return_softmax_lse=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    print(f"  call: out {tuple(out.shape)}, lse {tuple(lse.shape)} in {elapsed * 1e3:.1f} ms "
          f"(first call{', CPU reference backend' if device.type == 'cpu' else ''})")

    failures = 0
    # The explicit q_offset is the prefix, which is also the default end-aligned offset.
    default_out, default_lse = flashmsa.msa_sparse_attention(
        **dict(kwargs, q_offset=None), return_softmax_lse=True)
    same = torch.equal(out, default_out) and torch.equal(lse, default_lse)
    print(f"  explicit q_offset == default end-aligned offset: "
          f"{'bitwise equal' if same else 'DIFFERENT'}")
    failures += not same

    count = options.check_rows if options.check_rows is not None else CHECK_ROWS[device.type]
    rows = sample_rows(cu_seqlens_q, count, generator).to(device)
    ref_out, ref_lse, _ = evaluate_rows(**kwargs, rows=rows)
    diff = out[rows].double() - ref_out
    max_abs = diff.abs().max().item()
    rel_l2 = (torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref_out)).item()
    got_lse = lse[rows].double()
    finite = torch.isfinite(ref_lse)
    lse_error = (got_lse[finite] - ref_lse[finite]).abs().max().item()
    lse_inf_ok = torch.equal(torch.isneginf(got_lse), torch.isneginf(ref_lse))
    ok = (max_abs < MAX_ABS_ERROR and rel_l2 < MAX_REL_L2_ERROR and lse_error < MAX_LSE_ERROR
          and lse_inf_ok and bool(torch.isfinite(out).all()))
    print(f"  {rows.numel()} of {total_q} rows vs fp64: max abs {max_abs:.2e} (< {MAX_ABS_ERROR}), "
          f"rel L2 {rel_l2:.2e} (< {MAX_REL_L2_ERROR}), lse max abs {lse_error:.2e} "
          f"(< {MAX_LSE_ERROR}){'' if lse_inf_ok else ', lse -inf entries disagree'}: "
          f"{'ok' if ok else 'MISMATCH'}")
    failures += not ok

    if failures:
        print(f"FAILED: {failures} mismatches")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
