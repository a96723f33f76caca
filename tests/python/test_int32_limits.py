"""Lengths, offsets, positions and block ids near the int32 limits (issue 31, part 2), on the CPU
backend, against the independent evaluations of the contract (shared/spec, sections 4-6).

Cases (the GPU suite runs the same ones: tests/gpu/test_gpu_int32_limits.py imports the builders
below):
  1. flat calls with an int q_offset near INT32_MAX / INT32_MIN and past them (int64 values the
     Python API accepts), causal and not; the API's range for an int q_offset;
  2. q_offset as an int32 tensor holding INT32_MAX, INT32_MAX - 5, INT32_MIN, -1 and 0;
  3. paged calls with seqused_k near INT32_MAX over page tables of 1-8 columns (ids at or past
     page_table.shape[1] are ignored while ceil(seqused_k / 128) is huge), and tables much wider
     than the requests need (their unused columns hold real pages, which must not be read);
  4. q2k ids near INT32_MAX (2^31 - 1, 2^31 - 2) and INT32_MIN mixed with valid ones;
  5. decode shapes (one row a request, batch 1-8, group sizes 16, 1, 4, 8 and 32, topk 16),
     multi-token prediction (8 rows a request) and prefill shapes (70-150 rows a request): on the
     GPU they take the one-token decode kernel, the one- and two-consumer kernels with warp
     planning, and the block-wide planning;
  6. the default q_offset (None) with seqused_k near INT32_MAX: the position is
     seqused_k - seqlen_q + i, whatever the page table's width;
  7. near-limit probes: a page table of 2^24 columns, so that a request's key length really is
     2^31 - 1 (or -100, -128, -129) on the device, each row selecting one of blocks 0, 3,
     2^24 - 3 .. 2^24 - 1 (among junk ids) with the causal limit inside the last ones. V is
     one-hot there (V[page, head, t, d] = [t == d]), so that out[row, head, d] != 0 iff the row
     reads token d of its block: which keys are read is checked exactly, not within a
     tolerance (one key of 128 moves lse by under 1e-2);
  8. negative and non-monotonic sequence lengths (the contract's seqlen_k < 0 reads nothing).

The dense fp64 evaluation (tests/torch_reference.py) materialises every key a request may read,
so it is used where the page table is small; `sparse_reference` below, written from the contract
alone, touches only the selected blocks and also serves the 2^24-column tables (it is checked
against torch_reference on the small cases).

The default q_offset of a paged request is seqused_k - seqlen_q even where seqused_k is past
page_table.shape[1] * 128 (rule 2 drops the blocks past the table, not the positions):
test_default_q_offset_with_seqused_near_int32_max checks exactly that.
"""
import math
import zlib

import pytest
import torch

import flashmsa
from msa_inputs import reference_kwargs
from torch_reference import check_close, reference_msa

INT32_MAX = 2 ** 31 - 1
INT32_MIN = -(2 ** 31)
BLOCK = 128
HEAD_DIM = 128
TEMPERATURE = 0.7  # lse_t is checked at a temperature other than 1
HUGE_WIDTH = 2 ** 24  # page-table columns whose keys reach 2^31: 64 MiB of int32 per request
# Call shapes: query rows per request, (Hq, Hkv), topk. On the GPU (the launch plan, src/sm90/launch_plan.cpp):
# decode-*: one-token decode kernel (group <= 16, topk <= 32, one row a request), except
# decode-g32 (group 32: one-consumer kernel, warp plan in entry order); mtp: one-token kernel
# (16 rows x 4 KV heads fit one CTA per SM); mtp-b8: two-consumer kernel, warp-planned 8-token
# tiles; prefill-g16: two-consumer kernel, warp-planned (8 tokens x 16 ids = 128 entries);
# prefill-g8: two-consumer kernel, block-wide plan (16-token tiles, 256 entries).
SHAPES = {
    "decode-b1-g16": ([1], 64, 4, 16),
    "decode-g16": ([1] * 4, 64, 4, 16),
    "decode-b8-g16": ([1] * 8, 64, 4, 16),
    "decode-g1": ([1] * 4, 4, 4, 16),
    "decode-g4": ([1] * 4, 16, 4, 16),
    "decode-g8": ([1] * 4, 32, 4, 16),
    "decode-g32": ([1] * 4, 32, 1, 16),
    "mtp": ([8] * 2, 64, 4, 16),
    "mtp-b8": ([8] * 8, 64, 4, 16),
    "prefill-g16": ([150, 70], 64, 4, 16),
    "prefill-g8": ([150, 70], 16, 2, 16),
}


def shape_rows(shape, batch):
    """The shape's query rows per request for `batch` requests: its pattern, cycled; prefill
    shapes add short requests (3 rows, 1 row: a chunked-prefill batch) past their two."""
    pattern = SHAPES[shape][0]
    if shape.startswith("prefill"):
        pattern = pattern + [3, 1]
    return [pattern[b % len(pattern)] for b in range(batch)]


def generator_for(name):
    return torch.Generator().manual_seed(zlib.crc32(name.encode()) % (2 ** 31))


def randn(generator, *shape, dtype=torch.float32):
    return (torch.randn(*shape, generator=generator) / 3).to(dtype)


# ---------------------------------------------------------------------------------------------
# The selection: q2k rows of chosen blocks, junk ids and list ends
# ---------------------------------------------------------------------------------------------

def make_indices(generator, num_kv_heads, seqlens_q, topk, candidates, junk, *, must=None,
                 junk_per_row=2, valid_per_row=None):
    """(Hkv, total_q, topk) int32 ids. Row r of request b, KV head h: `must[b]` (ids every row
    selects), a random choice of candidates[b] (valid_per_row of them, default as many as fit;
    a candidate listed twice is chosen more often), up to junk_per_row ids of junk[b] (ids the
    rules must drop), shuffled; a short list is padded with repeats of its ids (which count
    once).
    Every fifth row ends its list early with INT32_MIN or -1 at a random slot, followed by ids
    that must be ignored (INT32_MAX, a valid candidate)."""
    must = must or [[] for _ in seqlens_q]
    rows = []
    for b, count in enumerate(seqlens_q):
        for r in range(count):
            per_head = []
            for _ in range(num_kv_heads):
                chosen = list(must[b])
                pool = [c for c in candidates[b] if c not in chosen]
                order = torch.randperm(len(pool), generator=generator).tolist()
                room = max(0, topk - len(chosen) - junk_per_row)
                if valid_per_row is not None:
                    room = min(room, valid_per_row)
                for i in order:
                    if room == 0:
                        break
                    if pool[i] not in chosen:
                        chosen.append(pool[i])
                        room -= 1
                if junk[b] and junk_per_row:
                    picks = torch.randint(0, len(junk[b]), (junk_per_row,), generator=generator)
                    chosen += [junk[b][int(i)] for i in picks]
                chosen = chosen[:topk]
                if not chosen:
                    chosen = [-1]
                order = torch.randperm(len(chosen), generator=generator).tolist()
                entries = [chosen[i] for i in order]
                while len(entries) < topk:
                    entries.append(entries[len(entries) % len(chosen)])
                if r % 5 == 3 and topk > 1:
                    slot = int(torch.randint(1, topk, (1,), generator=generator))
                    entries[slot] = INT32_MIN if r % 10 == 3 else -1
                    for later in range(slot + 1, topk):
                        entries[later] = INT32_MAX if later % 2 else entries[0]
                per_head.append(entries)
            rows.append(per_head)
    if not rows:
        return torch.empty(num_kv_heads, 0, topk, dtype=torch.int32)
    return torch.tensor(rows, dtype=torch.int32).permute(1, 0, 2).contiguous()


def _cu(lengths):
    cu = [0]
    for length in lengths:
        cu.append(cu[-1] + length)
    return torch.tensor(cu, dtype=torch.int32)


def _offset_argument(q_offset):
    if isinstance(q_offset, (list, tuple)):
        return torch.tensor(q_offset, dtype=torch.int32)
    return q_offset


# ---------------------------------------------------------------------------------------------
# Case builders (keyword arguments of msa_sparse_attention, CPU tensors, fresh randn / 3 data)
# ---------------------------------------------------------------------------------------------

def flat_inputs(name, seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal, *,
                q_offset=None, dtype=torch.bfloat16, must=None, junk=None, cu_seqlens_k=None,
                junk_per_row=2):
    """A flat call. Candidates: the request's blocks; junk: ids just past them and near
    INT32_MAX. cu_seqlens_k overrides the prefix sums of seqlens_k (garbage lengths)."""
    generator = generator_for(name)
    total_q, total_k = sum(seqlens_q), sum(max(0, s) for s in seqlens_k)
    blocks = [max(0, -(-s // BLOCK)) for s in seqlens_k]
    candidates = [list(range(n)) for n in blocks]
    if junk is None:
        junk = [[n, n + 1, INT32_MAX, INT32_MAX - 1] for n in blocks]
    kwargs = dict(
        q=randn(generator, total_q, num_qo_heads, HEAD_DIM, dtype=dtype),
        k=randn(generator, total_k, num_kv_heads, HEAD_DIM, dtype=dtype),
        v=randn(generator, total_k, num_kv_heads, HEAD_DIM, dtype=dtype),
        q2k_indices=make_indices(generator, num_kv_heads, seqlens_q, topk, candidates, junk,
                                 must=must, junk_per_row=junk_per_row),
        cu_seqlens_q=_cu(seqlens_q),
        cu_seqlens_k=_cu(seqlens_k) if cu_seqlens_k is None else
        torch.tensor(cu_seqlens_k, dtype=torch.int32),
        causal=causal, lse_temperature_scale=TEMPERATURE)
    if q_offset is not None:
        kwargs["q_offset"] = _offset_argument(q_offset)
    return kwargs


def paged_inputs(name, seqlens_q, seqused_k, width, num_qo_heads, num_kv_heads, topk, causal, *,
                 q_offset=None, dtype=torch.bfloat16, candidates=None, must=None, junk=None,
                 fill_table=True, shared_row=False, one_hot_values=False, junk_per_row=2,
                 valid_per_row=None):
    """A paged call over a page table of `width` columns.

    candidates[b]: the ids the rows of request b choose from (default: the blocks the request
    has, capped at the table's width); junk[b]: ids the rules must drop (default: the table's
    width and past it, ids below ceil(seqused_k / 128) but past the table, near INT32_MAX).
    fill_table: every column of a row holds a distinct real page (so that reading a block the
    rules drop reads real data), else only the candidates' columns do and the rest hold -1.
    shared_row: one table row for every request, expanded (batch stride 0), for 2^24-column
    tables of several requests. one_hot_values: V[page, head, t, :] is the one-hot vector of t
    (with valid_per_row=1, out[row, head, t] != 0 then shows whether the row reads token t of
    its one block).
    """
    generator = generator_for(name)
    batch = len(seqlens_q)
    total_q = sum(seqlens_q)
    if candidates is None:
        candidates = [list(range(min(width, max(0, -(-s // BLOCK))))) for s in seqused_k]
    if junk is None:
        junk = []
        for s in seqused_k:
            needed = max(0, -(-s // BLOCK))
            junk.append(sorted({width, width + 1, max(width, needed - 1), INT32_MAX,
                                INT32_MAX - 1}))
    rows_needing_pages = 1 if shared_row else batch
    columns = []  # per table row: the columns that get a real page
    for b in range(rows_needing_pages):
        if fill_table:
            columns.append(list(range(width)))
        else:
            wanted = set()
            for r in (range(batch) if shared_row else [b]):
                wanted.update(c for c in candidates[r] + (must[r] if must else []) if c < width)
                wanted.update(c for c in junk[r] if 0 <= c < width)
            columns.append(sorted(wanted))
    num_pages = sum(len(c) for c in columns) + 3  # three spare pages no request owns
    order = torch.randperm(num_pages, generator=generator).tolist()
    table = torch.full((rows_needing_pages, width), -1, dtype=torch.int32)
    next_page = 0
    for b, cols in enumerate(columns):
        if cols:
            pages = torch.tensor(order[next_page:next_page + len(cols)], dtype=torch.int32)
            table[b, torch.tensor(cols, dtype=torch.int64)] = pages
            next_page += len(cols)
    if shared_row:
        table = table.expand(batch, width)
    k = randn(generator, num_pages, num_kv_heads, BLOCK, HEAD_DIM, dtype=dtype)
    if one_hot_values:
        v = torch.eye(BLOCK, HEAD_DIM, dtype=dtype).expand(num_pages, num_kv_heads, BLOCK,
                                                            HEAD_DIM).contiguous()
    else:
        v = randn(generator, num_pages, num_kv_heads, BLOCK, HEAD_DIM, dtype=dtype)
    kwargs = dict(
        q=randn(generator, total_q, num_qo_heads, HEAD_DIM, dtype=dtype), k=k, v=v,
        q2k_indices=make_indices(generator, num_kv_heads, seqlens_q, topk, candidates, junk,
                                 must=must, junk_per_row=junk_per_row,
                                 valid_per_row=valid_per_row),
        cu_seqlens_q=_cu(seqlens_q), causal=causal, page_table=table,
        seqused_k=torch.tensor(seqused_k, dtype=torch.int32),
        lse_temperature_scale=TEMPERATURE)
    if q_offset is not None:
        kwargs["q_offset"] = _offset_argument(q_offset)
    return kwargs


# ---------------------------------------------------------------------------------------------
# An independent evaluation that touches only the selected blocks (contract sections 4-6)
# ---------------------------------------------------------------------------------------------

def sparse_reference(kwargs):
    """fp64 (out, lse, lse_t, visible) of the call, row by row, from the contract alone.

    visible[row, head, t]: the row reads token t of some selected block (what a one-hot V shows
    in out[row, head, t]). Exact integer arithmetic (Python ints) for lengths and positions:
    seqlen_k is cu_seqlens_k[b + 1] - cu_seqlens_k[b] (flat) or seqused_k[b] (paged); the
    default position is seqlen_k - seqlen_q + i; ids past ceil(seqlen_k / 128), and on the paged
    path past page_table.shape[1], select nothing; a table entry that is not a page reads
    nothing (the library's choice where the contract is silent). Assumes monotonic
    cu_seqlens_q."""
    q, k, v = kwargs["q"], kwargs["k"], kwargs["v"]
    total_q, num_qo_heads, head_dim = q.shape
    q2k = kwargs["q2k_indices"]
    num_kv_heads = q2k.shape[0]
    group = num_qo_heads // num_kv_heads
    cu_q = kwargs["cu_seqlens_q"].tolist()
    paged = kwargs.get("page_table") is not None
    if paged:
        table = kwargs["page_table"]
        width, num_pages = table.shape[1], k.shape[0]
        seqlen = kwargs["seqused_k"].tolist()
    else:
        cu_k = kwargs["cu_seqlens_k"].tolist()
        seqlen = [end - begin for begin, end in zip(cu_k[:-1], cu_k[1:])]
    offset = kwargs.get("q_offset")
    causal = bool(kwargs.get("causal", False))
    scale = kwargs.get("softmax_scale")
    scale = head_dim ** -0.5 if scale is None else float(scale)
    scale *= float(kwargs.get("k_global_scale") or 1.0)
    v_factor = float(kwargs.get("v_global_scale") or 1.0)
    temperature = float(kwargs.get("lse_temperature_scale", 1.0))

    out = torch.zeros(total_q, num_qo_heads, head_dim, dtype=torch.float64)
    lse = torch.full((total_q, num_qo_heads), -math.inf, dtype=torch.float64)
    lse_t = lse.clone()
    visible = torch.zeros(total_q, num_qo_heads, BLOCK, dtype=torch.bool)
    ids_all = q2k.tolist()
    page_of = {}

    def page(b, block):
        if (b, block) not in page_of:
            entry = int(table[b, block])
            page_of[(b, block)] = entry if 0 <= entry < num_pages else -1
        return page_of[(b, block)]

    for b in range(len(cu_q) - 1):
        seqlen_q = cu_q[b + 1] - cu_q[b]
        if offset is None:
            first = seqlen[b] - seqlen_q
        elif isinstance(offset, int):
            first = offset
        else:
            first = int(offset[b])
        num_blocks = -(-seqlen[b] // BLOCK) if seqlen[b] > 0 else 0
        for row in range(cu_q[b], cu_q[b + 1]):
            position = first + (row - cu_q[b])
            limit = min(seqlen[b], position + 1) if causal else seqlen[b]
            for h in range(num_kv_heads):
                selected = set()
                for block in ids_all[h][row]:
                    if block < 0:
                        break
                    if block >= num_blocks or (paged and block >= width):
                        continue
                    selected.add(block)
                sources, tokens = [], []
                for block in sorted(selected):
                    count = min(BLOCK, limit - block * BLOCK)
                    if count <= 0:
                        continue
                    if paged:
                        p = page(b, block)
                        if p < 0:
                            continue
                        sources.append((p, count))
                    else:
                        sources.append((cu_k[b] + block * BLOCK, count))
                    tokens.extend(range(count))
                if not tokens:
                    continue
                if paged:
                    keys = torch.cat([k[p, h, :count] for p, count in sources])
                    values = torch.cat([v[p, h, :count] for p, count in sources])
                else:
                    keys = torch.cat([k[start:start + count, h] for start, count in sources])
                    values = torch.cat([v[start:start + count, h] for start, count in sources])
                heads = slice(h * group, (h + 1) * group)
                scores = q[row, heads].double() @ keys.double().T * scale  # (G, keys)
                row_lse = torch.logsumexp(scores, dim=-1)
                out[row, heads] = (torch.exp(scores - row_lse[:, None]) @ values.double()) \
                    * v_factor
                lse[row, heads] = row_lse
                lse_t[row, heads] = torch.logsumexp(scores * temperature, dim=-1)
                visible[row, heads, torch.tensor(sorted(set(tokens)))] = True
    return out, lse, lse_t, visible


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------

def run_library(kwargs, **options):
    """The call (on the kwargs' device) with lse and lse_t."""
    return flashmsa.msa_sparse_attention(**kwargs, return_temperature_lse=True, **options)


def dense_reference(kwargs, compute_dtype=torch.float64):
    return reference_msa(**reference_kwargs(kwargs), compute_dtype=compute_dtype)


def check_against(got, want, dtype, case):
    out, lse, lse_t = got
    check_close(out.cpu(), want[0], dtype, lse=lse.cpu(), ref_lse=want[1], lse_t=lse_t.cpu(),
                ref_lse_t=want[2], case=case)


def check_probe(out, visible, case):
    """One-hot V: out[row, head, t] != 0 exactly where the contract reads token t."""
    got = out.cpu().float() != 0
    wrong = got != visible
    if bool(wrong.any()):
        row, head, token = (int(i) for i in wrong.nonzero()[0])
        raise AssertionError(
            f"[{case}] {int(wrong.sum())} (row, head, token) visibilities differ from the "
            f"contract's; first: row {row}, query head {head}, token {token} of the selected "
            f"blocks is {'read' if bool(got[row, head, token]) else 'not read'}, the contract "
            f"{'reads' if bool(visible[row, head, token]) else 'does not read'} it")


def check_empty_rows(got, lse_want, case):
    """Rows that read nothing: out exactly 0, lse and lse_t exactly -inf."""
    out, lse, lse_t = (x.cpu() for x in got)
    empty = torch.isneginf(lse_want)
    if bool(empty.any()):
        assert bool((out[empty] == 0).all()), f"[{case}] rows that read nothing are not 0"
        assert bool(torch.isneginf(lse[empty]).all() and torch.isneginf(lse_t[empty]).all()), (
            f"[{case}] lse / lse_t of rows that read nothing are not -inf")


def check_cpu_case(kwargs, case, *, dense=True, probe=False):
    """The CPU backend against the sparse evaluation (always), the dense torch_reference (when
    the table is small: dense=True, which also cross-checks the two evaluations), and the exact
    one-hot probe. Returns the library's (out, lse, lse_t)."""
    got = run_library(kwargs)
    dtype = kwargs["q"].dtype
    sparse = sparse_reference(kwargs)
    check_against(got, sparse, dtype, f"{case} vs sparse fp64 evaluation")
    check_empty_rows(got, sparse[1], case)
    if probe:
        check_probe(got[0], sparse[3], case)
    if dense:
        ref = dense_reference(kwargs)
        baseline = dense_reference(kwargs, compute_dtype=dtype)[0]
        check_close(got[0], ref[0], dtype, lse=got[1], ref_lse=ref[1], lse_t=got[2],
                    ref_lse_t=ref[2], baseline=baseline, case=f"{case} vs torch_reference")
        check_close(sparse[0], ref[0], torch.float32, lse=sparse[1], ref_lse=ref[1],
                    case=f"{case}: sparse evaluation vs torch_reference")
    return got


# ---------------------------------------------------------------------------------------------
# The cases, shared with the GPU suite: each is (name, builder) where builder() -> kwargs
# ---------------------------------------------------------------------------------------------

FLAT_LENGTHS = {1: [700], 2: [700, 2000], 4: [700, 300, 129, 1000], 8: [700, 300, 129, 1000] * 2}
SCALAR_OFFSETS = [INT32_MAX, INT32_MAX - 1, 2 ** 31, 2 ** 32 + 5, 2 ** 40, 2 ** 62 - 1,
                  INT32_MIN, INT32_MIN + 1, INT32_MIN - 1, -(2 ** 40), -(2 ** 62)]
SCALAR_OFFSETS_NON_CAUSAL = [INT32_MAX, INT32_MIN, 2 ** 62 - 1, -(2 ** 62)]
SCALAR_SHAPES = ["decode-g16", "mtp", "prefill-g8"]


def scalar_offset_case(shape, q_offset, causal, dtype=torch.bfloat16):
    rows, hq, hkv, topk = SHAPES[shape]
    name = f"flat-{shape}-q_offset{q_offset}-{'causal' if causal else 'full'}-{dtype}"
    return name, lambda: flat_inputs(name, rows, FLAT_LENGTHS[len(rows)], hq, hkv, topk, causal,
                                     q_offset=q_offset, dtype=dtype)


SCALAR_CASES = ([(s, o, True) for s in SCALAR_SHAPES for o in SCALAR_OFFSETS] +
                [(s, o, False) for s in SCALAR_SHAPES for o in SCALAR_OFFSETS_NON_CAUSAL])

TENSOR_OFFSETS = [INT32_MAX, INT32_MAX - 5, INT32_MIN, -1, 0]
TENSOR_LENGTHS_K = [700, 300, 1000, 129, 500]
TENSOR_SHAPES = {"decode": [1] * 5, "mtp": [8] * 5, "prefill": [70, 3, 64, 5, 90]}
# (Hq, Hkv) of each: 40 mtp rows x 2 KV heads still fit one CTA per SM (one-token kernel).
TENSOR_HEADS = {"decode": (64, 4), "mtp": (16, 2), "prefill": (16, 2)}


def tensor_offset_case(layout, shape, causal, dtype=torch.bfloat16):
    rows = TENSOR_SHAPES[shape]
    hq, hkv = TENSOR_HEADS[shape]
    name = f"{layout}-{shape}-q_offset_tensor-{'causal' if causal else 'full'}-{dtype}"
    # Requests 3 and 4 (offsets -1 and 0) read block 0 up to their positions: always select it.
    must = [[], [], [], [0], [0]]
    if layout == "flat":
        return name, lambda: flat_inputs(name, rows, TENSOR_LENGTHS_K, hq, hkv, 16, causal,
                                         q_offset=TENSOR_OFFSETS, dtype=dtype, must=must)
    width = max(-(-s // BLOCK) for s in TENSOR_LENGTHS_K) + 2
    return name, lambda: paged_inputs(name, rows, TENSOR_LENGTHS_K, width, hq, hkv, 16, causal,
                                      q_offset=TENSOR_OFFSETS, dtype=dtype, must=must)


TENSOR_CASES = [(layout, shape, causal) for layout in ("flat", "paged")
                for shape in TENSOR_SHAPES for causal in (True, False)]

# 2^31 - 1, 2^31 - 100, 2^31 - 128, 2^31 - 129: ceil(/ 128) = 2^24, 2^24, 2^24 - 1, 2^24 - 1.
SEQUSED_NEAR_MAX = [INT32_MAX, INT32_MAX - 99, INT32_MAX - 127, INT32_MAX - 128]
SMALL_TABLE_OFFSETS = {
    "int": (2 ** 31 - 200, True),
    "tensor": ([INT32_MAX, INT32_MAX - 5, -1, 100], True),
    "none-full": (None, False),
    "int32min-full": (INT32_MIN, False),
}
# (shape, table width). On the GPU the two-consumer kernel's warp plan keeps a bitmap of the
# request's blocks while the table has at most 45056 columns (launch_plan.cpp: warp_plan_kind), else
# it sorts: widths 45056 and 45057 take the bitmap at its largest and the sorting network.
SMALL_TABLE_SHAPES = [("decode-g16", 1), ("decode-g16", 5), ("decode-g1", 8), ("mtp", 2),
                      ("mtp", 8), ("mtp-b8", 3), ("prefill-g16", 8), ("prefill-g8", 3),
                      ("mtp-b8", 45056), ("prefill-g16", 45057)]
DENSE_MAX_WIDTH = 64  # torch_reference materialises min(seqused_k, width * 128) keys a request


def small_table_case(shape, width, offset_kind, dtype=torch.bfloat16):
    q_offset, causal = SMALL_TABLE_OFFSETS[offset_kind]
    batch = max(4, len(SHAPES[shape][0]))
    rows = shape_rows(shape, batch)
    if isinstance(q_offset, list):
        q_offset = [q_offset[b % len(q_offset)] for b in range(batch)]
    _, hq, hkv, topk = SHAPES[shape]
    seqused = [SEQUSED_NEAR_MAX[b % 4] for b in range(batch)]
    name = f"paged-{shape}-width{width}-seqused_near_max-{offset_kind}-{dtype}"
    # Offsets -1 and 100 read block 0 partially: select it.
    must = [[0] if isinstance(q_offset, list) and q_offset[b] < 1000 else [] for b in range(batch)]
    junk = [[width, width + 1, width + 7, 2 ** 24 - 2, 2 ** 24 - 1, 2 ** 24, INT32_MAX,
             INT32_MAX - 1] for _ in range(batch)]
    candidates, fill_table = None, True
    if width > DENSE_MAX_WIDTH:  # pages for the columns rows may select, not for all of them
        candidates = [[0, 1, 2, width - 3, width - 2, width - 1] for _ in range(batch)]
        fill_table = False
    return name, lambda: paged_inputs(name, rows, seqused, width, hq, hkv, topk, causal,
                                      q_offset=q_offset, dtype=dtype, must=must, junk=junk,
                                      candidates=candidates, fill_table=fill_table)


SMALL_TABLE_CASES = [(s, w, o) for s, w in SMALL_TABLE_SHAPES for o in SMALL_TABLE_OFFSETS]

WIDE_TABLE_SEQUSED = [300, 129, 1, 0, 1000, 128, 5000, 257]
WIDE_TABLE_OFFSETS = {"none": (None, True), "int": (150, True), "near-max": (INT32_MAX, True),
                      "full": (None, False)}
WIDE_TABLE_SHAPES = ["decode-b8-g16", "decode-g4", "mtp", "mtp-b8", "prefill-g16", "prefill-g8"]


def wide_table_case(shape, offset_kind, dtype=torch.bfloat16):
    """Tables of 64 columns, all real pages, for requests of 0-40 blocks: ids between the
    request's blocks and the table's width must be ignored."""
    q_offset, causal = WIDE_TABLE_OFFSETS[offset_kind]
    rows, hq, hkv, topk = SHAPES[shape]
    batch = len(rows) if len(rows) > 2 else 4
    rows = shape_rows(shape, batch)
    seqused = WIDE_TABLE_SEQUSED[:batch]
    width = 64
    name = f"paged-{shape}-width64-wider_than_needed-{offset_kind}-{dtype}"
    candidates = [list(range(width)) for _ in range(batch)]  # mostly past the request's blocks
    must = [list(range(min(3, -(-s // BLOCK)))) for s in seqused]
    junk = [[width, INT32_MAX, INT32_MAX - 1, 2 ** 24] for _ in range(batch)]
    return name, lambda: paged_inputs(name, rows, seqused, width, hq, hkv, topk, causal,
                                      q_offset=q_offset, dtype=dtype, candidates=candidates,
                                      must=must, junk=junk)


WIDE_TABLE_CASES = [(s, o) for s in WIDE_TABLE_SHAPES for o in WIDE_TABLE_OFFSETS]

EXTREME_ID_SHAPES = ["decode-g16", "decode-g32", "mtp", "mtp-b8", "prefill-g16", "prefill-g8"]


def extreme_ids_case(layout, shape, dtype=torch.bfloat16):
    """Rows mixing valid ids with 2^31 - 1, 2^31 - 2 and lists ended by INT32_MIN; some rows hold
    only such ids (read nothing) and some INT32_MIN first."""
    rows, hq, hkv, topk = SHAPES[shape]
    batch = len(rows) if len(rows) > 2 else 2
    rows = shape_rows(shape, batch)
    lengths = (FLAT_LENGTHS[8] + FLAT_LENGTHS[8])[:batch]
    name = f"{layout}-{shape}-extreme_ids-{dtype}"
    junk = [[INT32_MAX, INT32_MAX - 1, INT32_MAX - 1, 2 ** 30 + 5] for _ in lengths]

    def build():
        if layout == "flat":
            kwargs = flat_inputs(name, rows, lengths, hq, hkv, topk, True, dtype=dtype,
                                 junk=junk, junk_per_row=4)
        else:
            width = max(-(-s // BLOCK) for s in lengths)
            kwargs = paged_inputs(name, rows, lengths, width, hq, hkv, topk, True, dtype=dtype,
                                  junk=junk, junk_per_row=4)
        q2k = kwargs["q2k_indices"].clone()
        total_q = q2k.shape[1]
        r = torch.arange(total_q)
        q2k[:, r % 6 == 1] = INT32_MAX                       # only out-of-range ids
        q2k[:, r % 6 == 2] = INT32_MAX - 1
        q2k[:, r % 6 == 4, 0] = INT32_MIN                     # the list ends at once
        q2k[0, r % 6 == 5, topk // 2:] = INT32_MIN            # one KV head cut in the middle
        kwargs["q2k_indices"] = q2k
        return kwargs
    return name, build


EXTREME_ID_CASES = [(layout, shape) for layout in ("flat", "paged") for shape in EXTREME_ID_SHAPES]

# Default q_offset with seqused_k near INT32_MAX: (query rows a request, table width). Widths
# below ceil(seqused_k / 128) trigger the clamp of the known deviation; 2^24 columns do not.
DEFAULT_OFFSET_ROWS = [1, 2, 4, 8, 100]
DEFAULT_OFFSET_WIDTHS = [2, 8, HUGE_WIDTH - 1, HUGE_WIDTH]
DEFAULT_OFFSET_SEQUSED = [INT32_MAX, INT32_MAX - 99]


def default_offset_case(rows_per_request, width, dtype=torch.bfloat16):
    """Causal, q_offset None, one-hot V: the position of row i is seqused_k - seqlen_q + i."""
    seqused = DEFAULT_OFFSET_SEQUSED
    rows = [rows_per_request] * len(seqused)
    hq, hkv = (64, 4) if rows_per_request <= 8 else (16, 2)
    name = f"paged-default_q_offset-rows{rows_per_request}-width{width}-{dtype}"
    # One block a row (so that the one-hot V shows its tokens): mostly the last block the table
    # and the length allow, else the one before or block 0; junk: the ids just past it.
    candidates, junk = [], []
    for s in seqused:
        last = min(width, -(-s // BLOCK)) - 1
        candidates.append([last] * 4 + [max(0, last - 1), 0])
        junk.append([last + 1, last + 2, width, INT32_MAX])
    small = width <= DENSE_MAX_WIDTH
    return name, lambda: paged_inputs(name, rows, seqused, width, hq, hkv, 16, True,
                                      dtype=dtype, candidates=candidates, junk=junk,
                                      fill_table=small, one_hot_values=True, valid_per_row=1)


DEFAULT_OFFSET_CASES = [(r, w) for r in DEFAULT_OFFSET_ROWS for w in DEFAULT_OFFSET_WIDTHS]

# Near-limit probes over 2^24-column tables. Lengths 2^31 - 1, -100, -128, -129 (ceil(/128) =
# 2^24, 2^24, 2^24 - 1, 2^24 - 1): block 2^24 - 1 has 127, 28, 0 and 0 readable keys.
# Each row selects one of these (the last two most often) among junk ids.
PROBE_BLOCKS = [0, 3, HUGE_WIDTH - 3] + [HUGE_WIDTH - 2] * 3 + [HUGE_WIDTH - 1] * 4
PROBE_JUNK = [HUGE_WIDTH, HUGE_WIDTH + 1, INT32_MAX, INT32_MAX - 1]
PROBE_OFFSETS = {
    "none": None,                                   # seqused_k - seqlen_q + i
    "tensor": [INT32_MAX - 5, INT32_MAX - 130, INT32_MAX - 200, INT32_MAX],
    "int": 2 ** 31 - 140,
    "int-max": INT32_MAX,
    "full": None,                                   # non-causal
}
# (shape, requests, shared table row): contiguous tables for up to two requests (64 MiB a row),
# one expanded row (batch stride 0) for more.
PROBE_SHAPES = [("decode-b1-g16", 1, False), ("decode-g16", 2, False), ("decode-g1", 2, False),
                ("decode-g4", 2, False), ("decode-g8", 2, False), ("decode-g32", 2, False),
                ("decode-b8-g16", 8, True), ("mtp", 2, False), ("mtp-b8", 8, True),
                ("prefill-g16", 2, False), ("prefill-g8", 2, False)]


def probe_case(shape, batch, shared_row, offset_kind, dtype=torch.bfloat16):
    _, hq, hkv, topk = SHAPES[shape]
    rows = shape_rows(shape, batch)
    causal = offset_kind != "full"
    q_offset = PROBE_OFFSETS[offset_kind]
    if isinstance(q_offset, list):
        q_offset = [q_offset[b % len(q_offset)] for b in range(batch)]
    seqused = [SEQUSED_NEAR_MAX[b % 4] for b in range(batch)]
    if shape == "decode-b1-g16":
        seqused = [INT32_MAX]
    name = f"paged-{shape}-probe-width2^24-{offset_kind}-{dtype}"
    candidates = [list(PROBE_BLOCKS) for _ in range(batch)]
    junk = [list(PROBE_JUNK) for _ in range(batch)]
    return name, lambda: paged_inputs(name, rows, seqused, HUGE_WIDTH, hq, hkv, topk, causal,
                                      q_offset=q_offset, dtype=dtype, candidates=candidates,
                                      junk=junk, fill_table=False, shared_row=shared_row,
                                      one_hot_values=True, valid_per_row=1)


PROBE_CASES = [(s, b, shared, o) for s, b, shared in PROBE_SHAPES for o in PROBE_OFFSETS]

# Negative and non-monotonic lengths: (layout, causal).
NEGATIVE_LENGTH_CASES = [("flat", True), ("flat", False), ("paged", True), ("paged", False)]


def negative_lengths_case(layout, causal, dtype=torch.bfloat16):
    """Flat: cu_seqlens_k = 0, 600, 200, 900, 900 (lengths 600, -400, 700, 0; request 2's keys
    overlap request 0's). Paged: seqused_k = -5, INT32_MIN, 300, 0. A negative length reads
    nothing (no key c satisfies 0 <= c < seqlen_k)."""
    rows = [3, 4, 5, 2]
    name = f"{layout}-negative_lengths-{'causal' if causal else 'full'}-{dtype}"
    if layout == "flat":
        # k holds 1300 rows; the ids of each request come from the blocks of its length as
        # listed (600, 0, 700, 0), and those of the empty ones are junk (ids 0, 1, ...).
        return name, lambda: flat_inputs(name, rows, [600, 0, 700, 0], 16, 2, 8, causal,
                                         dtype=dtype, cu_seqlens_k=[0, 600, 200, 900, 900])
    seqused = [-5, INT32_MIN, 300, 0]
    junk = [[0, 1, INT32_MAX], [0, 2, INT32_MAX], [3, 4, INT32_MAX], [0, INT32_MAX]]
    candidates = [[0, 1, 2], [0, 1, 2], [0, 1, 2], [0, 1]]
    return name, lambda: paged_inputs(name, rows, seqused, 4, 16, 2, 8, causal, dtype=dtype,
                                      candidates=candidates, junk=junk)


# ---------------------------------------------------------------------------------------------
# Tests (CPU backend)
# ---------------------------------------------------------------------------------------------

def _scalar_id(spec):
    shape, offset, causal = spec
    return f"{shape}-{offset}-{'causal' if causal else 'full'}"


@pytest.mark.parametrize("spec", SCALAR_CASES, ids=_scalar_id)
def test_scalar_q_offset_near_int_limits(spec):
    shape, q_offset, causal = spec
    name, build = scalar_offset_case(shape, q_offset, causal)
    kwargs = build()
    got = check_cpu_case(kwargs, name)
    if causal and q_offset > 0:  # every positive offset here is past every request's keys
        # Every key of every selected block is before the position: the non-causal result.
        full = run_library(dict(kwargs, causal=False, q_offset=None))
        for what, a, b in zip(("out", "lse", "lse_t"), got, full):
            assert torch.equal(a, b), f"[{name}] {what} differs from the non-causal call's"
    if causal and q_offset < 0:  # and every negative one is far below -(rows a request)
        assert bool((got[0] == 0).all()), f"[{name}] negative positions must read nothing"
        assert bool(torch.isneginf(got[1]).all()), f"[{name}] lse must be -inf everywhere"


@pytest.mark.parametrize("q_offset", [2 ** 62, 2 ** 63 - 1, -(2 ** 62) - 1, -(2 ** 63)])
def test_int_q_offset_beyond_the_clamp(q_offset):
    """An int q_offset in int64 but beyond +-2^62: either refused with ValueError or the same as
    +-(2^62 - 1) (every key before the position, or none)."""
    name, build = scalar_offset_case("mtp", 0, True)
    kwargs = build()
    near = 2 ** 62 - 1 if q_offset > 0 else -(2 ** 62)
    try:
        got = run_library(dict(kwargs, q_offset=q_offset))
    except ValueError as error:
        assert "q_offset" in str(error)
        return
    want = run_library(dict(kwargs, q_offset=near))
    for what, a, b in zip(("out", "lse", "lse_t"), got, want):
        assert torch.equal(a, b), f"[q_offset {q_offset}] {what} differs from q_offset {near}'s"


@pytest.mark.parametrize("q_offset", [2 ** 63, -(2 ** 63) - 1, 2 ** 100])
def test_int_q_offset_outside_int64_is_a_value_error(q_offset):
    name, build = scalar_offset_case("mtp", 0, True)
    with pytest.raises(ValueError, match="q_offset"):
        run_library(dict(build(), q_offset=q_offset))


@pytest.mark.parametrize("spec", TENSOR_CASES,
                         ids=lambda s: f"{s[0]}-{s[1]}-{'causal' if s[2] else 'full'}")
def test_q_offset_tensor_extremes(spec):
    name, build = tensor_offset_case(*spec)
    check_cpu_case(build(), name)


@pytest.mark.parametrize("spec", SMALL_TABLE_CASES, ids=lambda s: f"{s[0]}-width{s[1]}-{s[2]}")
def test_seqused_near_int32_max_small_tables(spec):
    name, build = small_table_case(*spec)
    check_cpu_case(build(), name, dense=spec[1] <= DENSE_MAX_WIDTH)


@pytest.mark.parametrize("spec", WIDE_TABLE_CASES, ids=lambda s: f"{s[0]}-{s[1]}")
def test_tables_wider_than_needed(spec):
    name, build = wide_table_case(*spec)
    check_cpu_case(build(), name)


@pytest.mark.parametrize("spec", EXTREME_ID_CASES, ids=lambda s: f"{s[0]}-{s[1]}")
def test_q2k_ids_near_int32_limits(spec):
    name, build = extreme_ids_case(*spec)
    check_cpu_case(build(), name)


@pytest.mark.parametrize("spec", DEFAULT_OFFSET_CASES, ids=lambda s: f"rows{s[0]}-width{s[1]}")
def test_default_q_offset_with_seqused_near_int32_max(spec):
    rows, width = spec
    name, build = default_offset_case(rows, width)
    check_cpu_case(build(), name, dense=width <= DENSE_MAX_WIDTH, probe=True)


@pytest.mark.parametrize("spec", PROBE_CASES, ids=lambda s: f"{s[0]}-{s[3]}")
def test_near_int32_limit_probe(spec):
    name, build = probe_case(*spec)
    check_cpu_case(build(), name, dense=False, probe=True)


@pytest.mark.parametrize("spec", NEGATIVE_LENGTH_CASES,
                         ids=lambda s: f"{s[0]}-{'causal' if s[1] else 'full'}")
def test_negative_and_non_monotonic_lengths(spec):
    name, build = negative_lengths_case(*spec)
    kwargs = build()
    got = check_cpu_case(kwargs, name)
    dead = slice(0, 7) if spec[0] == "paged" else slice(3, 7)  # requests of negative length
    assert bool((got[0][dead] == 0).all()), f"[{name}] a negative length must read nothing"
    assert bool(torch.isneginf(got[1][dead]).all()), f"[{name}] lse must be -inf there"


def test_garbage_key_prefix_sums_past_total_k():
    """cu_seqlens_k entries near INT32_MAX (past k's rows): no fault; the library clamps the
    range into k's rows (visibility.h), so request 1 reads keys 500..999 and request 2 none.
    Non-causal, so that the result does not depend on how the default position treats such
    lengths."""
    name = "flat-cu_seqlens_k_past_total_k"
    kwargs = flat_inputs(name, [4, 3, 2], [500, 500, 0], 16, 2, 8, False,
                         cu_seqlens_k=[0, 500, INT32_MAX, INT32_MAX])
    got = run_library(kwargs)
    clamped = dict(kwargs, cu_seqlens_k=torch.tensor([0, 500, 1000, 1000], dtype=torch.int32))
    ref = dense_reference(clamped)
    check_close(got[0], ref[0], kwargs["q"].dtype, lse=got[1], ref_lse=ref[1], case=name)
