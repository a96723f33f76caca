"""A vLLM-style decode step with FlashMSA, captured in a CUDA graph and replayed.

    python3 examples/decode_step_graph.py                 # CUDA on a Hopper GPU, else CPU
    python3 examples/decode_step_graph.py --device cpu

An inference engine runs its decode step as a CUDA graph captured once per batch size: every
input lives in a static buffer, each step copies the new values in and replays. This example
does the same for the attention of one layer:

- a paged K/V cache (num_pages, Hkv, 128, D), pages handed out in random order through a block
  table (B, max_pages), and the key length of each request in seq_lens (B,);
- the step writes each request's new key and value into its slot of the cache (what vLLM's
  reshape_and_cache does), then calls flashmsa.msa_sparse_attention with q (B, Hq, D), the
  q2k_indices (Hkv, B, topk) an indexer chose (here flashmsa.patterns.make_q2k) and out= a
  static output buffer, causal with the default end-aligned q_offset (the new token is the
  last key);
- a flashmsa.MSASparseAttentionWorkspace holds the call's scratch memory: warmed by one eager
  call, then captured with the step in a torch.cuda.CUDAGraph;
- each step copies new query tokens, K/V, indices and lengths into the static buffers (one step
  pads the batch: a request of length 0 reads nothing and gets out = 0) and replays. Every
  replay is checked against an eager call on the same buffers (bitwise) and against the fp64
  evaluation of flashmsa.reference.

On the CPU there is no graph: each step runs eagerly, twice (the two results must be bitwise
equal), and is checked against the fp64 evaluation. MiniMax-M3 heads (Hq 64, Hkv 4, D 128,
topk 16) everywhere; the CPU runs a smaller batch and shorter sequences. Exits 1 on a mismatch.
"""
import argparse
import sys

import torch

import flashmsa
from flashmsa.patterns import make_q2k
from flashmsa.reference import evaluate_rows

PAGE = 128  # tokens per page = per selectable block
HEAD_DIM = 128
# Bounds of the check against the fp64 evaluation (those of `python3 -m flashmsa bench`).
MAX_ABS_ERROR, MAX_REL_L2_ERROR = 2.5e-2, 1e-2
# Shapes per device: (batch, (shortest, longest) initial key length, decode steps).
SIZES = {"cuda": (32, (1000, 16000), 4), "cpu": (4, (100, 1500), 4)}


def default_device():
    if (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
            and flashmsa.has_cuda()):
        return "cuda"
    return "cpu"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="default: cuda on a Hopper GPU with a CUDA build, else cpu")
    parser.add_argument("--batch", type=int, help="requests in the graph's batch")
    parser.add_argument("--steps", type=int, help="decode steps replayed")
    parser.add_argument("--heads", default="64/4", help="Hq/Hkv (default 64/4, MiniMax-M3)")
    parser.add_argument("--topk", type=int, default=16, help="blocks per query (default 16)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


def check_against_reference(out, kwargs):
    """Section 7 bounds of out against the fp64 evaluation of the same call: (ok, text)."""
    ref_out, ref_lse, _ = evaluate_rows(**kwargs)
    diff = out.double() - ref_out
    max_abs = diff.abs().max().item()
    ref_norm = torch.linalg.vector_norm(ref_out).item()
    rel_l2 = torch.linalg.vector_norm(diff).item() / ref_norm if ref_norm > 0 else 0.0
    # Rows that read nothing (a padded request) must be exactly 0.
    empty = torch.isneginf(ref_lse)
    empty_ok = bool((out.double()[empty] == 0).all())
    ok = (max_abs < MAX_ABS_ERROR and rel_l2 < MAX_REL_L2_ERROR and empty_ok
          and bool(torch.isfinite(out).all()))
    text = (f"vs fp64: max abs {max_abs:.2e} (< {MAX_ABS_ERROR}), rel L2 {rel_l2:.2e} "
            f"(< {MAX_REL_L2_ERROR})")
    if not empty_ok:
        text += ", a row that reads nothing is not 0"
    return ok, text


def main():
    options = parse_args()
    device = torch.device(options.device or default_device())
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but torch sees no CUDA device")
    batch, (shortest, longest), steps = SIZES[device.type]
    batch = options.batch or batch
    steps = options.steps or steps
    num_qo_heads, num_kv_heads = (int(x) for x in options.heads.split("/"))
    topk = options.topk
    dtype = torch.bfloat16
    torch.manual_seed(options.seed)
    generator = torch.Generator().manual_seed(options.seed)

    # --- The paged cache, the block table and the lengths (host-side bookkeeping in int64,
    # device tensors in int32 as the call wants them). Page 0 is a scratch page that no request
    # owns: padded batch entries write their K/V there.
    seq_lens = torch.randint(shortest, longest + 1, (batch,), generator=generator)
    max_pages = (longest + steps + PAGE - 1) // PAGE
    num_pages = 1 + batch * max_pages
    owned = (torch.randperm(num_pages - 1, generator=generator) + 1).view(batch, max_pages)
    k_cache = torch.randn(num_pages, num_kv_heads, PAGE, HEAD_DIM, device=device,
                          dtype=dtype) / 3
    v_cache = torch.randn_like(k_cache)
    print(f"decode step on {device}: batch {batch}, Hq {num_qo_heads}, Hkv {num_kv_heads}, "
          f"D {HEAD_DIM}, topk {topk}, bf16, paged cache of {num_pages} pages "
          f"({k_cache.numel() * 2 * 2 / 2**20:.0f} MiB K+V), key lengths "
          f"{int(seq_lens.min())}..{int(seq_lens.max())}")

    # --- Static buffers: the graph reads and writes only these.
    static = {
        "q": torch.zeros(batch, num_qo_heads, HEAD_DIM, device=device, dtype=dtype),
        "new_k": torch.zeros(batch, num_kv_heads, HEAD_DIM, device=device, dtype=dtype),
        "new_v": torch.zeros(batch, num_kv_heads, HEAD_DIM, device=device, dtype=dtype),
        "slot_page": torch.zeros(batch, dtype=torch.int64, device=device),
        "slot_offset": torch.zeros(batch, dtype=torch.int64, device=device),
        "q2k": torch.full((num_kv_heads, batch, topk), -1, dtype=torch.int32, device=device),
        "block_table": owned.to(device=device, dtype=torch.int32),
        "seq_lens": torch.zeros(batch, dtype=torch.int32, device=device),
        # One query token per request: constant for the graph's batch size.
        "cu_seqlens_q": torch.arange(batch + 1, dtype=torch.int32, device=device),
        "out": torch.zeros(batch, num_qo_heads, HEAD_DIM, device=device, dtype=dtype),
    }
    workspace = flashmsa.MSASparseAttentionWorkspace(device)

    def attention_kwargs():
        return dict(q=static["q"], k=k_cache, v=v_cache, q2k_indices=static["q2k"],
                    cu_seqlens_q=static["cu_seqlens_q"], page_table=static["block_table"],
                    seqused_k=static["seq_lens"], causal=True)

    def step(out):
        # Append this step's K/V at position seq_len - 1 of each request, then attend.
        k_cache[static["slot_page"], :, static["slot_offset"]] = static["new_k"]
        v_cache[static["slot_page"], :, static["slot_offset"]] = static["new_v"]
        flashmsa.msa_sparse_attention(**attention_kwargs(), workspace=workspace, out=out)

    def load_step(index, advance=True):
        """Host side of one step: new tokens, lengths and indices into the static buffers.
        Returns the number of live requests: on step 2 the last one sits out (as when the
        engine runs fewer requests than the graph's batch size) and the batch is padded."""
        live = batch - 1 if index == 2 and batch > 1 else batch
        if advance:
            seq_lens[:live] += 1  # each live request appends its new token
        lengths = seq_lens.clone()
        lengths[live:] = 0
        # The slot of each live request's new token; padding writes into scratch page 0.
        position = (lengths - 1).clamp(min=0)
        page = owned[torch.arange(batch), position // PAGE]
        page[live:] = 0
        static["slot_page"].copy_(page)
        static["slot_offset"].copy_(position % PAGE)
        static["seq_lens"].copy_(lengths)
        static["q"].copy_(torch.randn(batch, num_qo_heads, HEAD_DIM, generator=generator) / 3)
        static["new_k"].copy_(torch.randn(batch, num_kv_heads, HEAD_DIM, generator=generator)
                              / 3)
        static["new_v"].copy_(torch.randn(batch, num_kv_heads, HEAD_DIM, generator=generator))
        # The indexer's choice for the new token (end-aligned: it sits at seq_len - 1).
        static["q2k"].copy_(make_q2k("random", [1] * batch, lengths.tolist(), num_kv_heads,
                                     topk, causal=True, seed=options.seed + 1 + index,
                                     device=device))
        return live

    graph = None
    if device.type == "cuda":
        # Warm up eagerly on a side stream (the workspace grows to what the shapes need), then
        # capture one step. The workspace never grows during capture.
        load_step(0, advance=False)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step(static["out"])
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step(static["out"])
        torch.cuda.synchronize()
        print(f"  captured the step in a CUDA graph (workspace {workspace.nbytes} bytes)")
    else:
        print("  CPU: no CUDA graph, each step runs eagerly (twice, compared bitwise)")

    failures = 0
    eager_out = torch.empty_like(static["out"])
    for index in range(steps):
        live = load_step(index)
        if graph is not None:
            static["out"].fill_(float("nan"))  # a replay must write every row
            graph.replay()
            torch.cuda.synchronize()
            # The same call eagerly, on the same buffers: the graph's result, bit for bit.
            flashmsa.msa_sparse_attention(**attention_kwargs(), workspace=workspace,
                                          out=eager_out)
            torch.cuda.synchronize()
            what = "graph replay == eager call"
        else:
            step(static["out"])
            flashmsa.msa_sparse_attention(**attention_kwargs(), workspace=workspace,
                                          out=eager_out)
            what = "run twice"
        same = torch.equal(static["out"], eager_out)
        ok, text = check_against_reference(static["out"], attention_kwargs())
        lengths = static["seq_lens"].tolist()
        print(f"  step {index}: {live} of {batch} requests live, key lengths "
              f"{min(lengths[:live])}..{max(lengths[:live])}: {what}: "
              f"{'bitwise equal' if same else 'DIFFERENT'}; {text}")
        failures += (not same) + (not ok)

    if failures:
        print(f"FAILED: {failures} mismatches")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
