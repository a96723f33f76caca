"""Prefill cost model: per case and candidate design, the tensor work with its waste, the bytes
from L2 into shared memory, the shared-memory operand bytes per FLOP, the parallelism, and the
floor those give, computed on the CPU from the benchmark's own selections.

    PYTHONPATH=python python3 -m bench.cost_model [--sizes 8192,32768,131072] [--production on]

Designs (MiniMax-M3 heads: 16 query heads a KV head, D 128, blocks of 128 keys; every
operand bf16, K+V of a block 64 KiB):
  union8      the prefill kernel as built: a CTA of 8 tokens loads the union of their blocks;
              each of its two warpgroups (4 tokens x 16 heads = 64 rows, heads as wgmma M)
              runs S = Q K^T (Q and K from shared memory) and O += P V (P from registers, V from
              shared memory) on every block one of its 4 tokens selected.
  union8x2    the same tiles in clusters of two neighbouring CTAs that load their union once
              and multicast it (TMA multicast): the work of union8, the bytes of 16 tokens.
  keys1       token-granular: keys as wgmma M, one token's 16 heads as N; a CTA computes one
              token on each of its blocks: no waste, but each block serves 16 rows, and P goes
              through shared memory (a wgmma B operand).
  keys2       the same for 2 tokens a CTA (N = 32): each of the pair's blocks for both tokens.
  tiles8      the union tile's CTA of 8 tokens and its loads, each 16-row tile (one token's
              heads) computed with mma.sync only on the blocks its token selected, by all four
              warps of its warpgroup (keys split for S, head dims for O, P through shared
              memory): no waste, the bytes of union8; per row tile and block the warps read K and
              V once (64 KiB), Q 4 KiB each (16) and P (16, and 4 written). Built and measured
              at half its floor (its per-tile chain of two barriers binds it), not kept.
  warp16      a CTA of 16 tokens loads their union, and each of its 16 warps computes one
              token's 16 heads with mma.sync (the decode kernel's way) on that token's blocks
              only: no waste, 16 tokens share each load; K and V fragments come from shared
              memory for every warp, and mma.sync runs below wgmma's rate (MMA_SYNC_FLOPS,
              measured by scripts/probes/mma_sync_rate.cu). Its 8-token form on fp8 K/V is the
              token-warp kernel, bound not by these terms but by its in-register conversions
              (docs/performance.md, "fp8 prefill by token warps").
Each design's floor is the largest of: its executed FLOP at the dense attention rate (or at
the rate its shared-memory operand traffic allows, if lower), its L2 bytes at the measured L2
-> shared memory rate, and its largest CTA's work and intake on one SM (the bound of calls of
about one wave or less: the short chunks); `+split` lifts the last one by splitting each tile's
blocks over as many CTAs as fill the machine (decode's split-and-merge machinery), paying the
partials' round trip (where that is faster).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

from flashmsa.patterns import make_q2k

from .prefill import PATTERNS, production_cases
from .selection import BLOCK, distinct_blocks, select

HEAD_DIM = 128
GROUP = 16            # query heads per KV head
KV_HEADS = 4
TOPK = 16
SMS = 132
BLOCK_BYTES = 2 * BLOCK * HEAD_DIM * 2          # K and V of one block, bf16
FLOP_PER_ROW_KEY = 4 * HEAD_DIM                 # S = Q K^T and O += P V
# Measured on the H200 (docs/performance.md): cuDNN's dense attention of equal work, the
# practical tensor-core rate of attention; random 32 KiB blocks from L2 into shared memory
# (scripts/probes/l2_bandwidth.cu); shared memory, 128 bytes a clock an SM at about 1.83 GHz.
DENSE_FLOPS = 660e12
L2_BYTES_PER_S = 9.0e12
SMEM_BYTES_PER_S = SMS * 128 * 1.83e9
DRAM_BYTES_PER_S = 4.2e12
SM_INTAKE_BYTES_PER_S = 99e9  # one SM alone, from L2 (the same probe)
# Attention's inner loop on mma.sync with ldmatrix operands and the exponentials, 16 warps a
# CTA (scripts/probes/mma_sync_rate.cu): an upper bound, with no softmax bookkeeping.
MMA_SYNC_FLOPS = 448e12


@dataclass
class Design:
    name: str
    tokens: int          # tokens of one CTA
    load_tokens: int     # tokens whose union one load serves (multicast pairs: 16)
    unit_tokens: int     # tokens of one MMA unit (a warpgroup's rows, or the N tokens)
    rows_per_unit: int   # query rows an MMA unit computes on each of its blocks
    smem_bytes_per_unit_block: int  # shared-memory operand bytes of one unit on one block
    tensor_flops: float = DENSE_FLOPS


DESIGNS = [
    # Q 16 KiB (SS) + K 32 KiB + V 32 KiB for 64 rows.
    Design("union8", 8, 8, 4, 64, (16 + 32 + 32) * 1024),
    Design("union8x2", 8, 16, 4, 64, (16 + 32 + 32) * 1024),
    # K 32 KiB + Q 4 KiB a token + P^T written and read (8 KiB a token) + V 32 KiB.
    Design("keys1", 1, 1, 1, 16, (32 + 4 + 8 + 32) * 1024),
    Design("keys2", 2, 2, 2, 32, (32 + 8 + 16 + 32) * 1024),
    # K 32 KiB + V 32 KiB through ldmatrix for one warp's 16 rows (Q and P in registers).
    Design("tiles8", 8, 8, 1, 16, (32 + 32 + 16 + 16 + 4) * 1024, MMA_SYNC_FLOPS),
    Design("warp16", 16, 16, 1, 16, (32 + 32) * 1024, MMA_SYNC_FLOPS),
]


def tile_groups(sel, tokens):
    """(total_q,) dense group index of each row for tiles of `tokens` consecutive rows of one
    request, and the group count."""
    total_q = sel.ids.shape[1]
    rows = torch.arange(total_q)
    group = sel.request * (total_q // tokens + 1) + rows // tokens
    _, group = torch.unique(group, return_inverse=True)
    return group, int(group.max().item()) + 1


def case_costs(seqlen_q, seqlen_k, pattern, seed=0):
    """Per design: useful FLOP, executed FLOP, L2 bytes, CTAs, the largest CTA's FLOP and
    bytes, shared-memory FLOP per byte."""
    q2k = make_q2k(pattern, [seqlen_q], [seqlen_k], KV_HEADS, TOPK, causal=True, seed=seed)
    cu_q = torch.tensor([0, seqlen_q])
    sel = select(q2k, cu_q, torch.tensor([seqlen_k]), causal=True)
    keys = (sel.limit[None, :, None] - sel.ids * BLOCK).clamp(0, BLOCK) * sel.keep
    useful = float(keys.sum()) * GROUP * FLOP_PER_ROW_KEY
    # Blocks with at least one visible key: the ones a tile loads and computes.
    sel.keep = sel.keep & (keys > 0)
    out = {}
    for d in DESIGNS:
        unit_group, units = tile_groups(sel, d.unit_tokens)
        load_group, loads = tile_groups(sel, d.load_tokens)
        cta_group, ctas = tile_groups(sel, d.tokens)
        unit_blocks = distinct_blocks(unit_group, sel, units).double()   # (Hkv, units)
        load_blocks = distinct_blocks(load_group, sel, loads).double()
        unit_flop = unit_blocks * d.rows_per_unit * BLOCK * FLOP_PER_ROW_KEY
        executed = float(unit_flop.sum())
        l2_bytes = float(load_blocks.sum()) * BLOCK_BYTES
        units_per_cta = max(1, d.tokens // d.unit_tokens)
        cta_flop = unit_flop.view(KV_HEADS, -1)
        cta_flop = torch.nn.functional.pad(cta_flop, (0, (-cta_flop.shape[1]) % units_per_cta))
        cta_flop = cta_flop.view(KV_HEADS, -1, units_per_cta).sum(-1)
        # Every CTA of a multicast group takes in the group's whole union.
        cta_bytes = load_blocks.max().item() * BLOCK_BYTES
        out[d.name] = dict(
            useful=useful, executed=executed, l2_bytes=l2_bytes, ctas=ctas * KV_HEADS,
            rows=seqlen_q * GROUP * KV_HEADS,
            cta_flop=float(cta_flop.max()), cta_bytes=cta_bytes,
            smem_flop_per_byte=d.rows_per_unit * BLOCK * FLOP_PER_ROW_KEY
            / d.smem_bytes_per_unit_block, tensor_flops=d.tensor_flops)
    return out


def floor_seconds(c, split=False):
    """The design's floor (see the module docstring) for one case's costs `c`."""
    rate = min(c["tensor_flops"], SMEM_BYTES_PER_S * c["smem_flop_per_byte"])
    whole = max(c["executed"] / rate, c["l2_bytes"] / L2_BYTES_PER_S)
    per_cta = max(c["cta_flop"] / (rate / SMS), c["cta_bytes"] / SM_INTAKE_BYTES_PER_S)
    if not split:
        return max(whole, per_cta)
    best = max(whole, per_cta)
    for splits in range(2, 17):
        waves = -(-c["ctas"] * splits // SMS)
        # Partials: fp32 out and LSE of every row, written and read back, once per split.
        merge = c["rows"] * splits * (HEAD_DIM + 1) * 4 * 2 / DRAM_BYTES_PER_S
        best = min(best, max(whole, waves * per_cta / splits) + merge)
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="8192,32768,131072")
    p.add_argument("--patterns", default=",".join(PATTERNS))
    p.add_argument("--production", choices=("on", "off"), default="on")
    args = p.parse_args()
    cases = [(f"m3_{pattern}_S{s}", pattern, s, s, 0.0)
             for s in map(int, args.sizes.split(",")) for pattern in args.patterns.split(",")]
    if args.production == "on":
        cases += [(c.name[:23], "indexer", c.seqlen_q, c.seqlen_k, c.weight)
                  for c in production_cases((64, 4, 16))]
    header = (f"{'case':24s} {'design':14s} {'waste':>6s} {'L2 GB':>8s} {'smemF/B':>8s} "
              f"{'waves':>6s} {'floor ms':>9s} {'TFLOP/s':>8s}  bound")
    print(header)
    weighted = {}
    for name, pattern, sq, sk, weight in cases:
        costs = case_costs(sq, sk, pattern)
        for design, c in costs.items():
            for split in (False, True):
                label = design + ("+split" if split else "")
                seconds = floor_seconds(c, split)
                rate = min(c["tensor_flops"], SMEM_BYTES_PER_S * c["smem_flop_per_byte"])
                parts = {"tensor": c["executed"] / rate, "L2": c["l2_bytes"] / L2_BYTES_PER_S}
                bound = (max(parts, key=parts.get) if seconds <= max(parts.values()) * 1.0001
                         else "split+merge" if split else "one CTA")
                if not split or seconds < floor_seconds(c, False):
                    print(f"{name:24s} {label:14s} {c['executed'] / c['useful']:6.2f} "
                          f"{c['l2_bytes'] / 1e9:8.1f} {c['smem_flop_per_byte']:8.1f} "
                          f"{c['ctas'] / SMS:6.2f} {seconds * 1e3:9.3f} "
                          f"{c['useful'] / seconds / 1e12:8.1f}  {bound}", flush=True)
                if weight:
                    w = weighted.setdefault(label, [0.0, 0.0])
                    w[0] += weight * c["useful"]
                    w[1] += weight * seconds
    for label, (flop, seconds) in weighted.items():
        print(f"production-weighted floor {label:14s}: {flop / seconds / 1e12:7.1f} useful "
              "TFLOP/s")


if __name__ == "__main__":
    main()
