"""flashmsa.integrations.vllm against an independent evaluation of vLLM's MiniMax-M3 ops.

The evaluation (vllm_prefill_reference, vllm_decode_reference) is written from vLLM's
vllm/models/minimax_m3/common/ops/sparse_attn.py (the Triton kernels _gqa_sparse_fwd_kernel and
_gqa_sparse_decode_kernel with its merge), in plain torch, fp64, one query row and KV head at a
time, and never calls flashmsa:

- prefill: row i of request b sits at p = prefix_lens[b] + i and reads the first
  min(topk, (p + 128) // 128) entries of topk_idx[h, row], in order (a repeated entry would be
  read twice), keys c of each block with c < seq_lens[b] and c <= p;
- decode: request r of query length n (decode_query_len, or from query_start_loc with the
  request from token_to_req_indices); row i sits at p = seq_lens[r] - n + i, kv_len =
  max(p + 1, 0) (0 for rows past query_start_loc[-1]); it reads the first
  min(topk, ceil(kv_len / 128)) entries, keys c < kv_len;
- K / V: the cache's halves, fp8 converted exactly and times the scalar k_scale / v_scale, or
  times the per-(KV head, token slot) scale k_scale[h, block * 128 + t] of its slot;
  scores q . k * sm_scale, softmax, times V.

Rows for which vLLM's result is undefined (outside every request in prefill, which its kernel
leaves unwritten; decode rows that read nothing, NaN from its merge) are marked so: the
integration documents 0 for them and the tests check exactly that.

The case builders and the evaluation are shared with tests/gpu/test_gpu_vllm_integration.py,
which runs the same comparisons on CUDA tensors.
"""
import math

import pytest
import torch

import flashmsa
import flashmsa.integrations.vllm as vllm_ops
from torch_reference import MAX_ABS_ERROR, MAX_REL_L2_ERROR, error_stats

BLOCK = 128
HEAD_DIM = 128
NUM_HEADS = 16
NUM_KV_HEADS = 2
TOPK = 8
SPARE_PAGES = 3          # cache blocks no request owns, filled with noise
FP8_K_SCALE = 0.75       # not powers of two: a scale applied twice or not at all shows
FP8_V_SCALE = 1.25


# ---------------------------------------------------------------------------------------------
# Inputs as vLLM's engine lays them out.
# ---------------------------------------------------------------------------------------------

def _packed_cache(num_pages, num_kv_heads, cache_dtype, generator):
    """(num_pages, Hkv, 128, 2 * D): K in [..., :D], V in [..., D:], randn / 3."""
    values = torch.randn(num_pages, num_kv_heads, BLOCK, 2 * HEAD_DIM, generator=generator) / 3
    return values.to(cache_dtype)


def _block_table(seq_lens, generator, extra_columns=2):
    """Each request's blocks on distinct random cache blocks; unused entries -1. Returns
    (block_table, number of cache blocks)."""
    blocks_per_request = [max(1, -(-length // BLOCK)) for length in seq_lens]
    num_pages = sum(blocks_per_request) + SPARE_PAGES
    pages = torch.randperm(num_pages, generator=generator).tolist()
    width = max(blocks_per_request) + extra_columns
    table = torch.full((len(seq_lens), width), -1, dtype=torch.int32)
    taken = 0
    for request, count in enumerate(blocks_per_request):
        table[request, :count] = torch.tensor(pages[taken:taken + count], dtype=torch.int32)
        taken += count
    return table, num_pages


def _indexer_rows(positions, tail, generator, num_kv_heads, topk):
    """topk_idx (Hkv, rows, topk) as vLLM's indexer writes it, for queries at `positions`.

    A row at position p sees blocks 0..p // 128; its first min(topk, p // 128 + 1) entries are
    distinct visible blocks, its own block among them, the rest -1 (tail="minus_one"). With
    tail="visible_blocks" the entries vLLM does not read hold visible blocks that the read ones
    miss (the last read entry is moved past vLLM's count and replaced by a block past the
    query), so a front end reading past vLLM's count reads keys vLLM does not. Rows at negative
    positions read nothing: they hold random ids.
    """
    rows = len(positions)
    idx = torch.full((num_kv_heads, rows, topk), -1, dtype=torch.int32)
    for row, position in enumerate(positions):
        for head in range(num_kv_heads):
            if position < 0:
                idx[head, row] = torch.randint(0, 50, (topk,), generator=generator,
                                               dtype=torch.int32)
                continue
            own = position // BLOCK
            count = min(topk, own + 1)
            others = torch.randperm(own, generator=generator)[:count - 1].tolist()
            if tail == "visible_blocks" and count < topk:
                # Own block first: vLLM's kernel needs a visible key in the first block it
                # reads. The block past the query stays within the block table, so vLLM's
                # lookup of it stays in bounds.
                row_ids = [own] + others + [-1] * (topk - count)
                if count >= 2:
                    row_ids[topk - 1] = row_ids[count - 1]
                    row_ids[count - 1] = own + 1 + int(torch.randint(0, 2, (1,),
                                                                     generator=generator))
                for column in range(count, topk - 1):
                    row_ids[column] = int(torch.randint(0, own + 1, (1,), generator=generator))
            else:
                entries = [own] + others
                order = torch.randperm(count, generator=generator).tolist()
                row_ids = [entries[i] for i in order] + [-1] * (topk - count)
            idx[head, row] = torch.tensor(row_ids, dtype=torch.int32)
    return idx


def _topk_view(idx, view, generator):
    """topk_idx as given to the op: contiguous; 'transposed' (a token-major buffer seen as
    (Hkv, total_q, topk)); 'longer' (the first total_q rows of a larger buffer: vLLM reads only
    those)."""
    if view == "contiguous":
        return idx
    if view == "transposed":
        return idx.permute(1, 0, 2).contiguous().permute(1, 0, 2)
    if view == "longer":
        heads, _, topk = idx.shape
        extra = torch.randint(0, 4, (heads, 5, topk), generator=generator, dtype=torch.int32)
        return torch.cat([idx, extra], dim=1)
    raise ValueError(f"unknown topk_idx view {view!r}")


def _scales(cache_dtype, scale, num_pages=0, num_kv_heads=NUM_KV_HEADS, generator=None):
    """k_scale / v_scale as vLLM passes them: None, one-element float32 tensors, or
    (num_kv_heads, num_pages * 128) float32 per-(KV head, token slot) scales, drawn in
    [0.25, 2) so that a scale taken from the wrong slot shows."""
    if scale == "none" or cache_dtype != torch.float8_e4m3fn:
        return None, None
    if scale == "scalar":
        return torch.tensor([FP8_K_SCALE]), torch.tensor([FP8_V_SCALE])
    if scale == "scalar_0d":
        return torch.tensor(FP8_K_SCALE), torch.tensor(FP8_V_SCALE)
    if scale == "per_token":
        shape = (num_kv_heads, num_pages * BLOCK)
        return tuple(0.25 + 1.75 * torch.rand(shape, generator=generator) for _ in range(2))
    raise ValueError(f"unknown scale form {scale!r}")


def args_on(args, device):
    """Every tensor of a case's arguments on `device`; views (topk_idx) keep their strides."""
    moved = {}
    for key, value in args.items():
        if isinstance(value, torch.Tensor):
            if value.is_contiguous() or value.dim() < 3:
                moved[key] = value.to(device)
            else:     # the transposed topk_idx: move its storage, view it the same way
                moved[key] = value.permute(1, 0, 2).contiguous().to(device).permute(1, 0, 2)
        else:
            moved[key] = value
    return moved


def prefill_args(q_lens, prefix_lens, *, dtype=torch.bfloat16, cache_dtype=None, scale="none",
                 padded_rows=0, tail="minus_one", topk_view="contiguous", keys_past_chunk=None,
                 num_heads=NUM_HEADS, num_kv_heads=NUM_KV_HEADS, topk=TOPK, seed=0,
                 device="cpu"):
    """Keyword arguments of minimax_m3_sparse_attn (output excluded) for a chunked-prefill
    batch: request b has q_lens[b] new tokens after prefix_lens[b] cached ones. padded_rows:
    rows of q past cu_seqlens_q[-1]. keys_past_chunk[b]: keys in the cache after request b's
    chunk (seq_lens[b] = prefix + query + these), which positions from prefix_lens never see
    but positions aligned to the end of the keys would."""
    generator = torch.Generator().manual_seed(seed)
    cache_dtype = dtype if cache_dtype is None else cache_dtype
    extra = [0] * len(q_lens) if keys_past_chunk is None else keys_past_chunk
    seq_lens = [p + n + e for p, n, e in zip(prefix_lens, q_lens, extra)]
    block_table, num_pages = _block_table(seq_lens, generator)
    cu = [0]
    for n in q_lens:
        cu.append(cu[-1] + n)
    total_q = cu[-1] + padded_rows
    positions = []
    for request, n in enumerate(q_lens):
        positions += [prefix_lens[request] + i for i in range(n)]
    positions += [0] * padded_rows
    topk_idx = _topk_view(_indexer_rows(positions, tail, generator, num_kv_heads, topk),
                          topk_view, generator)
    k_scale, v_scale = _scales(cache_dtype, scale, num_pages, num_kv_heads, generator)
    args = dict(
        q=(torch.randn(total_q, num_heads, HEAD_DIM, generator=generator) / 3).to(dtype),
        kv_cache=_packed_cache(num_pages, num_kv_heads, cache_dtype, generator),
        topk_idx=topk_idx, block_table=block_table,
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32),
        prefix_lens=torch.tensor(prefix_lens, dtype=torch.int32),
        max_query_len=max(q_lens), num_kv_heads=num_kv_heads, sm_scale=HEAD_DIM ** -0.5,
        k_scale=k_scale, v_scale=v_scale)
    return args_on(args, device)


def decode_args(seq_lens, *, decode_query_len=1, query_lens=None, padded_rows=0,
                dtype=torch.bfloat16, cache_dtype=None, scale="none", tail="minus_one",
                topk_view="contiguous", num_heads=NUM_HEADS, num_kv_heads=NUM_KV_HEADS,
                topk=TOPK, seed=0, device="cpu"):
    """Keyword arguments of minimax_m3_sparse_attn_decode (output excluded). Uniform form
    (decode_query_len tokens per request) unless query_lens is given: then the ragged form,
    with query_start_loc, token_to_req_indices (longer than total_q, as vLLM allows) and
    padded_rows rows past query_start_loc[-1]."""
    generator = torch.Generator().manual_seed(seed)
    cache_dtype = dtype if cache_dtype is None else cache_dtype
    block_table, num_pages = _block_table(seq_lens, generator)
    ragged = query_lens is not None
    lengths = query_lens if ragged else [decode_query_len] * len(seq_lens)
    positions, owners = [], []
    for request, n in enumerate(lengths):
        positions += [seq_lens[request] - n + i for i in range(n)]
        owners += [request] * n
    positions += [-1] * padded_rows
    owners += [len(seq_lens) - 1] * padded_rows
    total_q = len(positions)
    topk_idx = _topk_view(_indexer_rows(positions, tail, generator, num_kv_heads, topk),
                          topk_view, generator)
    k_scale, v_scale = _scales(cache_dtype, scale, num_pages, num_kv_heads, generator)
    args = dict(
        q=(torch.randn(total_q, num_heads, HEAD_DIM, generator=generator) / 3).to(dtype),
        kv_cache=_packed_cache(num_pages, num_kv_heads, cache_dtype, generator),
        topk_idx=topk_idx, block_table=block_table,
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32), num_kv_heads=num_kv_heads,
        sm_scale=HEAD_DIM ** -0.5, decode_query_len=decode_query_len,
        k_scale=k_scale, v_scale=v_scale)
    if ragged:
        starts = [0]
        for n in query_lens:
            starts.append(starts[-1] + n)
        args["query_start_loc"] = torch.tensor(starts, dtype=torch.int32)
        args["token_to_req_indices"] = torch.tensor(owners + [0] * 3, dtype=torch.int32)
    return args_on(args, device)


# ---------------------------------------------------------------------------------------------
# vLLM's semantics, evaluated independently (fp64, one row and KV head at a time).
# ---------------------------------------------------------------------------------------------

def _cache_block(kv_cache, page, head, half, scale):
    """One cache block's K (half 0) or V (half 1) for one KV head, in fp64: fp8 converts
    exactly, then times the scalar scale (vLLM's KV_SCALE_MODE 1) or each token's scale at its
    slot page * 128 + t (per-token scales, (num_kv_heads, slots)); bf16 / fp16 caches take no
    scale, as in vLLM."""
    block = kv_cache[page, head, :, half * HEAD_DIM:(half + 1) * HEAD_DIM].to(torch.float64)
    if kv_cache.dtype == torch.float8_e4m3fn and scale is not None:
        if scale.numel() == 1:
            block = block * float(scale.reshape(()))
        else:
            slots = scale[head, page * BLOCK:(page + 1) * BLOCK].to(torch.float64)
            block = block * slots[:, None]
    return block


def _attend_one(q_heads, kv_cache, head, scales, table_row, blocks, key_limit, sm_scale):
    """vLLM's loop over `blocks` for one query row and KV head: keys c < key_limit of each block
    (a block read twice counts twice). None when no key is read (vLLM's result is NaN)."""
    gathered_k, gathered_v = [], []
    offsets = torch.arange(BLOCK)
    for block in blocks:
        visible = block * BLOCK + offsets < key_limit
        if not bool(visible.any()):
            continue                    # a block past the query adds nothing
        page = table_row[block]
        gathered_k.append(_cache_block(kv_cache, page, head, 0, scales[0])[visible])
        gathered_v.append(_cache_block(kv_cache, page, head, 1, scales[1])[visible])
    if not gathered_k:
        return None
    k = torch.cat(gathered_k)
    v = torch.cat(gathered_v)
    scores = (q_heads @ k.T) * sm_scale
    return torch.softmax(scores, dim=-1) @ v


def _evaluate(args, rows):
    """rows: (row, request, entries read, key limit) for every row vLLM computes. Returns
    (out fp64 (total_q, Hq, D), defined (total_q,) bool)."""
    q = args["q"].cpu().to(torch.float64)
    kv_cache = args["kv_cache"].cpu()
    scales = tuple(None if args[name] is None else args[name].cpu()
                   for name in ("k_scale", "v_scale"))
    idx = args["topk_idx"].cpu().tolist()
    table = args["block_table"].cpu().tolist()
    num_kv_heads = kv_cache.shape[1]
    group = q.shape[1] // num_kv_heads
    out = torch.zeros(q.shape, dtype=torch.float64)
    defined = torch.zeros(q.shape[0], dtype=torch.bool)
    for row, request, entries, key_limit in rows:
        results = []
        for head in range(num_kv_heads):
            heads = slice(head * group, (head + 1) * group)
            results.append(_attend_one(q[row, heads], kv_cache, head, scales, table[request],
                                       idx[head][row][:entries], key_limit, args["sm_scale"]))
        if all(r is not None for r in results):
            out[row] = torch.cat(results)
            defined[row] = True
    return out, defined


def vllm_prefill_reference(args):
    """_gqa_sparse_fwd_kernel: rows outside every request are not computed."""
    cu = args["cu_seqlens_q"].cpu().tolist()
    seq_lens = args["seq_lens"].cpu().tolist()
    prefix_lens = args["prefix_lens"].cpu().tolist()
    topk = args["topk_idx"].shape[-1]
    rows = []
    for b in range(len(cu) - 1):
        for i in range(cu[b + 1] - cu[b]):
            q_abs = prefix_lens[b] + i
            entries = min(topk, (q_abs + BLOCK) // BLOCK)    # valid_blocks, no sentinel
            rows.append((cu[b] + i, b, entries, min(seq_lens[b], q_abs + 1)))
    return _evaluate(args, rows)


def vllm_decode_reference(args):
    """_gqa_sparse_decode_kernel and its merge. Where a read block has no visible key the
    kernel's split-K chunk starting on it would make NaN; such blocks add nothing here (what
    the kernel computes when they do not start a chunk)."""
    total_q = args["q"].shape[0]
    seq_lens = args["seq_lens"].cpu().tolist()
    topk = args["topk_idx"].shape[-1]
    ragged = args.get("query_start_loc") is not None
    if ragged:
        starts = args["query_start_loc"].cpu().tolist()
        owner = args["token_to_req_indices"].cpu().tolist()
    rows = []
    for row in range(total_q):
        if ragged:
            request = owner[row]
            q_start, q_len = starts[request], starts[request + 1] - starts[request]
            valid = row < starts[len(seq_lens)]
        else:
            dql = args["decode_query_len"]
            request, q_start, q_len, valid = row // dql, (row // dql) * dql, dql, True
        query_pos = seq_lens[request] - q_len + (row - q_start)
        kv_len = max(query_pos + 1, 0) if valid else 0
        entries = min(topk, -(-kv_len // BLOCK))
        rows.append((row, request, entries, kv_len))
    return _evaluate(args, rows)


# ---------------------------------------------------------------------------------------------
# Running the integration and comparing.
# ---------------------------------------------------------------------------------------------

def run_integration(op, args, name, call=None):
    """op(**args, output=a NaN-filled buffer): checks the buffer is what comes back and that
    every element of it was written. call(op, args, output), when given, makes the call (the
    GPU suite's wraps it in a no-synchronisation check)."""
    q = args["q"]
    output = torch.full(q.shape, math.nan, dtype=q.dtype, device=q.device)
    result = op(**args, output=output) if call is None else call(op, args, output)
    assert result is output, f"[{name}] the op did not return its output tensor"
    finite = torch.isfinite(output.float())
    assert bool(finite.all()), (f"[{name}] output has {int((~finite).sum())} unwritten (NaN) or "
                                f"non-finite elements of {output.numel()}")
    return output


def check_against_vllm(name, output, reference):
    """Contract section 7's bounds on the rows vLLM defines; exactly 0 on the others."""
    want, defined = reference
    got = output.cpu().to(torch.float64)
    assert bool(defined.any()), f"[{name}] the case has no row vLLM defines"
    max_abs, rel_l2 = error_stats(got[defined], want[defined])
    assert max_abs < MAX_ABS_ERROR, (f"[{name}] max |out - vLLM reference| = {max_abs:.3e} >= "
                                     f"{MAX_ABS_ERROR} (rel L2 {rel_l2:.3e})")
    assert rel_l2 < MAX_REL_L2_ERROR, (f"[{name}] relative L2 error vs vLLM reference "
                                       f"{rel_l2:.3e} >= {MAX_REL_L2_ERROR} "
                                       f"(max abs {max_abs:.3e})")
    padded = got[~defined]
    assert bool((padded == 0).all()), (
        f"[{name}] {int((padded != 0).sum())} values of rows vLLM leaves undefined (padding) are "
        "not exactly 0")


def check_prefill(name, args):
    output = run_integration(vllm_ops.minimax_m3_sparse_attn, args, name)
    check_against_vllm(name, output, vllm_prefill_reference(args))
    return output


def check_decode(name, args):
    output = run_integration(vllm_ops.minimax_m3_sparse_attn_decode, args, name)
    check_against_vllm(name, output, vllm_decode_reference(args))
    return output


# Cases shared with the GPU suite: (name, builder keyword arguments).
PREFILL_CASES = [
    # three requests: a first chunk, a middle chunk across block edges, a late short chunk
    ("three-requests-bf16", dict(q_lens=[37, 130, 5], prefix_lens=[0, 300, 1500])),
    ("three-requests-fp16", dict(q_lens=[37, 130, 5], prefix_lens=[0, 300, 1500],
                                 dtype=torch.float16, seed=1)),
    ("one-long-chunk-after-prefix", dict(q_lens=[260], prefix_lens=[1100], seed=2)),
    ("fp8-cache-no-scale", dict(q_lens=[40, 70], prefix_lens=[0, 1200],
                                cache_dtype=torch.float8_e4m3fn, seed=3)),
    ("fp8-cache-scalar-scales-bf16", dict(q_lens=[40, 70], prefix_lens=[0, 1200],
                                          cache_dtype=torch.float8_e4m3fn, scale="scalar",
                                          seed=4)),
    ("fp8-cache-0d-scales-fp16", dict(q_lens=[40, 70], prefix_lens=[130, 900],
                                      dtype=torch.float16, cache_dtype=torch.float8_e4m3fn,
                                      scale="scalar_0d", seed=5)),
    ("tail-past-vllm-count-holds-visible-blocks", dict(q_lens=[90, 60], prefix_lens=[0, 200],
                                                       tail="visible_blocks", seed=6)),
    ("rows-past-cu-seqlens-q", dict(q_lens=[30, 20], prefix_lens=[0, 700], padded_rows=6,
                                    seed=7)),
    ("topk-idx-transposed-view", dict(q_lens=[50, 33], prefix_lens=[64, 1000],
                                      topk_view="transposed", seed=8)),
    ("topk-idx-longer-buffer", dict(q_lens=[50, 33], prefix_lens=[64, 1000],
                                    topk_view="longer", seed=9)),
    ("empty-request-in-batch", dict(q_lens=[20, 0, 25], prefix_lens=[0, 500, 300], seed=10)),
    ("seq-lens-past-the-chunk", dict(q_lens=[45, 30], prefix_lens=[100, 600],
                                     keys_past_chunk=[200, 300], seed=11)),
]

DECODE_CASES = [
    ("one-token-each-bf16", dict(seq_lens=[1, 127, 128, 129, 1500, 2049])),
    ("one-token-each-fp16", dict(seq_lens=[1, 127, 128, 129, 1500, 2049], dtype=torch.float16,
                                 seed=1)),
    ("mtp-3-tokens-with-padding-request", dict(seq_lens=[3, 130, 1800, 0],
                                               decode_query_len=3, seed=2)),
    ("mtp-2-tokens-fp16", dict(seq_lens=[129, 256, 1025], decode_query_len=2,
                               dtype=torch.float16, seed=3)),
    ("ragged-query-start-loc", dict(seq_lens=[5, 300, 700, 1300], query_lens=[1, 3, 0, 2],
                                    padded_rows=3, seed=4)),
    ("fp8-cache-no-scale", dict(seq_lens=[100, 900, 2000], cache_dtype=torch.float8_e4m3fn,
                                seed=5)),
    ("fp8-cache-scalar-scales", dict(seq_lens=[100, 900, 2000], decode_query_len=2,
                                     cache_dtype=torch.float8_e4m3fn, scale="scalar", seed=6)),
    ("fp8-ragged-0d-scales-fp16", dict(seq_lens=[40, 1000], query_lens=[2, 1], padded_rows=1,
                                       dtype=torch.float16, cache_dtype=torch.float8_e4m3fn,
                                       scale="scalar_0d", seed=7)),
    ("tail-past-vllm-count-holds-visible-blocks", dict(seq_lens=[200, 300, 650],
                                                       decode_query_len=2,
                                                       tail="visible_blocks", seed=8)),
    ("topk-idx-transposed-view", dict(seq_lens=[60, 1400], decode_query_len=2,
                                      topk_view="transposed", seed=9)),
]


def case_id(case):
    return case[0]


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", PREFILL_CASES, ids=case_id)
def test_prefill_matches_vllm(case):
    name, options = case
    check_prefill(f"prefill-{name}", prefill_args(**options))


@pytest.mark.parametrize("case", DECODE_CASES, ids=case_id)
def test_decode_matches_vllm(case):
    name, options = case
    check_decode(f"decode-{name}", decode_args(**options))


def test_tail_entries_change_the_result_when_read():
    """The visible_blocks tail is a real test of vLLM's entry count: flashmsa reading the whole
    row (no -1 written after vLLM's count) gives a different result."""
    name = "prefill-tail-read-by-plain-flashmsa"
    args = prefill_args([90, 60], [0, 200], tail="visible_blocks", seed=6)
    check_prefill(name, args)
    d = HEAD_DIM
    whole_rows = flashmsa.msa_sparse_attention(
        args["q"], args["kv_cache"][..., :d], args["kv_cache"][..., d:], args["topk_idx"],
        args["cu_seqlens_q"], causal=True, softmax_scale=args["sm_scale"],
        page_table=args["block_table"], seqused_k=args["seq_lens"], q_offset=args["prefix_lens"])
    want, defined = vllm_prefill_reference(args)
    max_abs, rel_l2 = error_stats(whole_rows[defined], want[defined])
    assert max_abs >= MAX_ABS_ERROR and rel_l2 >= MAX_REL_L2_ERROR, (
        f"[{name}] reading every entry is within vLLM's bounds (max abs {max_abs:.3e}, rel L2 "
        f"{rel_l2:.3e}): the case does not test which entries are read")


def test_decode_forms_agree_bitwise():
    """The uniform form and the ragged form (query_start_loc, token_to_req_indices) of the same
    batch give the same bits."""
    name = "decode-uniform-vs-ragged"
    args = decode_args([300, 129, 1700], decode_query_len=2, seed=11)
    uniform = run_integration(vllm_ops.minimax_m3_sparse_attn_decode, args, name)
    ragged = dict(args, query_start_loc=torch.tensor([0, 2, 4, 6], dtype=torch.int32),
                  token_to_req_indices=torch.tensor([0, 0, 1, 1, 2, 2], dtype=torch.int32),
                  decode_query_len=7)   # not used by the ragged form
    got = run_integration(vllm_ops.minimax_m3_sparse_attn_decode, ragged, name)
    assert torch.equal(got, uniform), f"[{name}] the two forms differ"


def test_int64_metadata_gives_the_same_bits():
    """vLLM's kernels load any integer dtype: int64 indices, tables and lengths are converted
    on the device and give the int32 result."""
    name = "prefill-int64-metadata"
    args = prefill_args([33, 70], [0, 900], seed=17)
    want = run_integration(vllm_ops.minimax_m3_sparse_attn, args, name)
    wide = dict(args, **{key: args[key].to(torch.int64) for key in (
        "topk_idx", "block_table", "cu_seqlens_q", "seq_lens", "prefix_lens")})
    got = run_integration(vllm_ops.minimax_m3_sparse_attn, wide, name)
    assert torch.equal(got, want), f"[{name}] int64 metadata changed the result"


def test_cache_is_passed_as_views_of_itself(monkeypatch):
    """K and V reach msa_sparse_attention as the halves of kv_cache (same storage, no copy),
    with block_table as the page table, seq_lens as seqused_k and prefix_lens as q_offset."""
    name = "prefill-cache-views"
    args = prefill_args([20, 9], [0, 400], seed=12)
    seen = {}
    real = vllm_ops.msa_sparse_attention

    def spy(q, k, v, q2k_indices, cu_seqlens_q, **kwargs):
        seen.update(k=k, v=v, **kwargs)
        return real(q, k, v, q2k_indices, cu_seqlens_q, **kwargs)

    monkeypatch.setattr(vllm_ops, "msa_sparse_attention", spy)
    check_prefill(name, args)
    cache = args["kv_cache"]
    base = cache.untyped_storage().data_ptr()
    for half, offset in (("k", 0), ("v", HEAD_DIM)):
        view = seen[half]
        assert view.untyped_storage().data_ptr() == base, f"[{name}] {half} is a copy of the cache"
        assert view.data_ptr() == cache.data_ptr() + offset * cache.element_size(), (
            f"[{name}] {half} does not start at its half of the cache")
        assert view.stride() == cache.stride(), f"[{name}] {half} has strides {view.stride()}"
    assert seen["page_table"].data_ptr() == args["block_table"].data_ptr(), (
        f"[{name}] block_table was not passed as the page table")
    assert seen["seqused_k"].data_ptr() == args["seq_lens"].data_ptr(), (
        f"[{name}] seq_lens was not passed as seqused_k")
    assert seen["q_offset"].data_ptr() == args["prefix_lens"].data_ptr(), (
        f"[{name}] prefix_lens was not passed as q_offset")
    assert seen["causal"] is True, f"[{name}] not causal"


def test_scalar_scales_are_read_from_their_tensors():
    """The one-element k_scale / v_scale tensors are what the call reads (not a value taken
    once): changing a tensor in place changes the result like a fresh call on the new value."""
    name = "decode-fp8-scale-tensor-values"
    args = decode_args([300, 1000], cache_dtype=torch.float8_e4m3fn, scale="scalar", seed=13)
    check_decode(name, args)
    args["k_scale"].fill_(0.5)
    args["v_scale"].fill_(2.0)
    check_decode(name + "-after-fill", args)


PER_TOKEN_PREFILL_CASES = [
    ("per-token-scales-bf16", dict(q_lens=[40, 70], prefix_lens=[0, 1200], seed=14)),
    ("per-token-scales-fp16", dict(q_lens=[9, 130], prefix_lens=[300, 0], dtype=torch.float16,
                                   seed=15)),
]
PER_TOKEN_DECODE_CASES = [
    ("per-token-scales", dict(seq_lens=[100, 900, 2000], seed=16)),
    ("per-token-scales-ragged-fp16", dict(seq_lens=[40, 1000], query_lens=[2, 1],
                                          padded_rows=1, dtype=torch.float16, seed=17)),
]


@pytest.mark.parametrize("case", PER_TOKEN_PREFILL_CASES, ids=case_id)
def test_per_token_scales_prefill(case):
    """(num_kv_heads, slots) k_scale / v_scale of an fp8 cache: each key and value times the
    scale of its slot, block * 128 + token, as vLLM reads them."""
    name, options = case
    args = prefill_args(**options, cache_dtype=torch.float8_e4m3fn, scale="per_token")
    check_prefill(name, args)


@pytest.mark.parametrize("case", PER_TOKEN_DECODE_CASES, ids=case_id)
def test_per_token_scales_decode(case):
    name, options = case
    args = decode_args(**options, cache_dtype=torch.float8_e4m3fn, scale="per_token")
    check_decode(name, args)


def test_per_token_scales_are_passed_in_place(monkeypatch):
    """The per-token scales reach flashmsa as the caller's tensors (no copy of anything
    cache-sized), as fp8 k_scale / v_scale."""
    args = decode_args([300, 1000], cache_dtype=torch.float8_e4m3fn, scale="per_token",
                       seed=18)
    seen = {}
    original = vllm_ops.msa_sparse_attention

    def spy(*positional, **keywords):
        seen.update(keywords)
        return original(*positional, **keywords)

    monkeypatch.setattr(vllm_ops, "msa_sparse_attention", spy)
    check_decode("decode-per-token-scales-in-place", args)
    assert seen["k_scale"] is args["k_scale"] and seen["v_scale"] is args["v_scale"]
    assert "k_global_scale" not in seen and "v_global_scale" not in seen


def test_per_token_scale_errors_name_the_argument():
    args = decode_args([100, 300], cache_dtype=torch.float8_e4m3fn, scale="per_token", seed=19)
    output = torch.empty_like(args["q"])
    op = vllm_ops.minimax_m3_sparse_attn_decode
    with pytest.raises(ValueError, match="k_scale.*float32"):
        op(**dict(args, k_scale=args["k_scale"].double()), output=output)
    with pytest.raises(ValueError, match="k_scale.*slots"):   # fewer slots than the cache
        op(**dict(args, k_scale=args["k_scale"][:, :-1], v_scale=args["v_scale"][:, :-1]),
           output=output)
    with pytest.raises(ValueError, match="same shape"):
        op(**dict(args, v_scale=args["v_scale"][:, :-1]), output=output)


def test_scales_of_a_bf16_cache_are_ignored():
    """As in vLLM, k_scale / v_scale only apply to fp8 caches: per-token tensors given with a
    bf16 cache change nothing (and do not raise)."""
    name = "decode-bf16-cache-with-per-token-scales"
    args = decode_args([100, 700], seed=15)
    plain = run_integration(vllm_ops.minimax_m3_sparse_attn_decode, args, name)
    slots = args["kv_cache"].shape[0] * BLOCK
    scaled = dict(args, k_scale=torch.full((NUM_KV_HEADS, slots), 3.0),
                  v_scale=torch.full((NUM_KV_HEADS, slots), 3.0))
    got = run_integration(vllm_ops.minimax_m3_sparse_attn_decode, scaled, name)
    assert torch.equal(got, plain), f"[{name}] scales changed a bf16 cache's result"


def test_argument_errors_name_vllm_arguments():
    args = decode_args([100, 300], cache_dtype=torch.float8_e4m3fn, scale="scalar", seed=16)
    output = torch.empty_like(args["q"])
    op = vllm_ops.minimax_m3_sparse_attn_decode
    with pytest.raises(ValueError, match="both given or both None"):
        op(**dict(args, v_scale=None), output=output)
    with pytest.raises(ValueError, match="kv_cache"):
        op(**dict(args, kv_cache=args["kv_cache"][..., :HEAD_DIM]), output=output)
    with pytest.raises(ValueError, match="decode_query_len"):
        op(**dict(args, decode_query_len=2), output=output)
    with pytest.raises(ValueError, match="token_to_req_indices"):
        op(**dict(args, query_start_loc=torch.tensor([0, 1, 2], dtype=torch.int32)),
           output=output)
    with pytest.raises(ValueError, match="num_kv_heads"):
        op(**dict(args, num_kv_heads=3), output=output)
    with pytest.raises(NotImplementedError, match="float8_e5m2"):
        op(**dict(args, kv_cache=args["kv_cache"].view(torch.float8_e5m2)), output=output)
    with pytest.raises(ValueError, match="output"):
        op(**args, output=output[1:])
