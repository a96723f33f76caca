"""`python -m flashmsa bench`: run one MSA forward shape, check it, time it.

    python -m flashmsa bench                      # MiniMax-M3 prefill on the best device present
    python -m flashmsa bench --seq 131072 --pattern indexer
    python -m flashmsa bench --q-lens 16384 --k-lens 65536 --heads 16/1 --layout paged
    python -m flashmsa bench --device cpu --seq 1024 --kv-dtype nvfp4

Inputs are randn / 3; the result is checked on a sample of query rows against an fp64 PyTorch
evaluation on the same device (contract section 7 bounds), and the speed is quoted as useful
TFLOP/s (section 10: 4 * D * the keys each (query token, query head) reads).
"""
import argparse
import statistics
import sys
import time

import torch

from . import _lib
from .api import msa_sparse_attention, supports_packed_kv
from .patterns import PATTERNS, make_q2k
from .quantize import quantize_fp8, quantize_nvfp4
from .reference import evaluate_rows, keys_read

HEAD_DIM = 128
BLOCK_SIZE = 128
# MiniMax-M3: 64 query heads, 4 KV heads, topk 16, causal (contract section 1).
M3_HEADS = "64/4"
M3_TOPK = 16
# Default prefill length: long enough to measure on a GPU, short enough for a CPU run to take
# seconds.
DEFAULT_SEQ = {"cuda": 32768, "cpu": 2048}
# Rows checked by default: the CPU gathers every sampled row's keys in fp64, so fewer there.
DEFAULT_CHECK_ROWS = {"cuda": 512, "cpu": 256}
MAX_ABS_ERROR, MAX_REL_L2_ERROR, MAX_LSE_ERROR = 2.5e-2, 1e-2, 1e-2
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Progress:
    """One status line on stderr, rewritten in place when stderr is a terminal."""

    def __init__(self):
        self.interactive = sys.stderr.isatty()
        self.started = time.perf_counter()

    def show(self, text):
        elapsed = time.perf_counter() - self.started
        line = f"  [{elapsed:6.1f} s] {text}"
        if self.interactive:
            sys.stderr.write("\r\033[K" + line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def done(self):
        if self.interactive:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _lengths(text):
    return [int(value) for value in text.split(",")] if text else None


def _parse(argv):
    parser = argparse.ArgumentParser(
        prog="python -m flashmsa",
        description="Run, check and time one MiniMax Sparse Attention forward shape.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, text in (("bench", "run, check and time one shape"),
                       ("demo", "the same as bench (MiniMax-M3 prefill by default)")):
        bench = commands.add_parser(name, help=text, description=text)
        shape = bench.add_argument_group("shape")
        shape.add_argument("--seq", type=int, help="MiniMax-M3 style prefill of S tokens: one "
                           "request with S queries over S keys (default 32768 on CUDA, 2048 on "
                           "CPU, when no --q-lens is given)")
        shape.add_argument("--batch", type=int, default=1, help="requests (default 1); one "
                           "length in --q-lens/--k-lens applies to all")
        shape.add_argument("--q-lens", type=_lengths, help="query lengths, comma-separated")
        shape.add_argument("--k-lens", type=_lengths, help="key lengths, comma-separated "
                           "(default: the query lengths)")
        shape.add_argument("--heads", default=M3_HEADS, help="Hq/Hkv (default 64/4)")
        shape.add_argument("--topk", type=int, default=M3_TOPK, help="blocks per query (16)")
        shape.add_argument("--pattern", choices=PATTERNS, default="random",
                           help="block selection (contract section 10)")
        shape.add_argument("--causal", action=argparse.BooleanOptionalAction, default=True)
        data = bench.add_argument_group("data")
        data.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="q dtype")
        data.add_argument("--kv-dtype", choices=["same", "bf16", "fp16", "fp8", "nvfp4"],
                          default="same", help="K/V storage (default: q's dtype)")
        data.add_argument("--layout", choices=["flat", "paged"], default="flat",
                          help="flat K/V or a paged cache with pages in random order")
        data.add_argument("--seed", type=int, default=0)
        run = bench.add_argument_group("run")
        run.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                         help="auto: the GPU when flashmsa's kernels run this case there")
        run.add_argument("--warmup", type=int, help="untimed runs (default 3 on CUDA, 1 on CPU)")
        run.add_argument("--iters", type=int, help="timed runs (default 20 on CUDA, 3 on CPU)")
        run.add_argument("--check-rows", type=int, help="query rows checked against the fp64 "
                         "evaluation (default 512 on CUDA, 256 on CPU; 0: no check)")
    return parser.parse_args(argv)


def _pick_device(requested, q_dtype, kv_dtype):
    if requested != "auto":
        return torch.device(requested)
    if torch.cuda.is_available() and _lib.has_cuda():
        device = torch.device("cuda", torch.cuda.current_device())
        if supports_packed_kv(device) and kv_dtype in (q_dtype, None):
            return device
        print(f"note: {torch.cuda.get_device_name(device)}: this case does not run on the GPU "
              "yet (Hopper kernels take K/V in q's dtype); running on the CPU", file=sys.stderr)
    return torch.device("cpu")


def _shape(options, device_type):
    if options.q_lens is None:
        seq = options.seq or DEFAULT_SEQ[device_type]
        seqlens_q = [seq]
        seqlens_k = options.k_lens or [seq]
    else:
        seqlens_q = options.q_lens
        seqlens_k = options.k_lens or options.q_lens
    if len(seqlens_q) == 1:
        seqlens_q = seqlens_q * options.batch
    if len(seqlens_k) == 1:
        seqlens_k = seqlens_k * len(seqlens_q)
    if len(seqlens_q) != len(seqlens_k):
        raise SystemExit("error: --q-lens and --k-lens must list one length per request")
    num_qo_heads, num_kv_heads = (int(value) for value in options.heads.split("/"))
    return seqlens_q, seqlens_k, num_qo_heads, num_kv_heads


def _paginate(x, seqlens_k, page_order):
    """Flat (total_k, Hkv, D) -> paged (num_pages, Hkv, 128, D) placed at page_order."""
    num_pages = page_order.numel()
    pages = torch.zeros(num_pages, x.shape[1], BLOCK_SIZE, x.shape[2], dtype=x.dtype,
                        device=x.device)
    start = used = 0
    for length in seqlens_k:
        blocks = -(-length // BLOCK_SIZE)
        padded = torch.zeros(blocks * BLOCK_SIZE, *x.shape[1:], dtype=x.dtype, device=x.device)
        padded[:length] = x[start:start + length]
        pages[page_order[used:used + blocks]] = padded.view(
            blocks, BLOCK_SIZE, *x.shape[1:]).transpose(1, 2)
        start, used = start + length, used + blocks
    return pages


def build_inputs(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, pattern, causal,
                 q_dtype, kv_dtype, layout, device, seed):
    """The call's keyword arguments: randn / 3 data, `pattern` selections."""
    generator = torch.Generator(device=device).manual_seed(seed)
    total_q, total_k = sum(seqlens_q), sum(seqlens_k)

    def randn(*shape):
        return torch.randn(*shape, generator=generator, device=device) / 3

    def prefix_sums(lengths):
        return torch.tensor([0] + lengths, device=device).cumsum(0).to(torch.int32)

    kwargs = dict(q=randn(total_q, num_qo_heads, HEAD_DIM).to(q_dtype),
                  cu_seqlens_q=prefix_sums(seqlens_q), causal=causal,
                  q2k_indices=make_q2k(pattern, seqlens_q, seqlens_k, num_kv_heads, topk,
                                       causal=causal, seed=seed, device=device))
    keys, values = randn(total_k, num_kv_heads, HEAD_DIM), randn(total_k, num_kv_heads, HEAD_DIM)
    paged = layout == "paged"
    if paged:
        pages_per_request = [-(-length // BLOCK_SIZE) for length in seqlens_k]
        order = torch.randperm(sum(pages_per_request), generator=generator, device=device)
        keys, values = _paginate(keys, seqlens_k, order), _paginate(values, seqlens_k, order)
        table = torch.full((len(seqlens_k), max(pages_per_request)), -1, dtype=torch.int32,
                           device=device)
        used = 0
        for request, blocks in enumerate(pages_per_request):
            table[request, :blocks] = order[used:used + blocks].to(torch.int32)
            used += blocks
        kwargs.update(page_table=table,
                      seqused_k=torch.tensor(seqlens_k, dtype=torch.int32, device=device))
    else:
        kwargs["cu_seqlens_k"] = prefix_sums(seqlens_k)
    if kv_dtype == "fp8":
        kwargs["k"], kwargs["k_global_scale"] = quantize_fp8(keys)
        kwargs["v"], kwargs["v_global_scale"] = quantize_fp8(values)
    elif kv_dtype == "nvfp4":
        kwargs["k"], kwargs["k_scale"] = quantize_nvfp4(keys, paged=paged)
        kwargs["v"], kwargs["v_scale"] = quantize_nvfp4(values, paged=paged)
    else:
        kwargs["k"], kwargs["v"] = keys.to(kv_dtype), values.to(kv_dtype)
    return kwargs


def _sample_rows(total_q, count, cu_seqlens_q, device, seed):
    """`count` query rows: the first and last of every request, the rest at random."""
    if count >= total_q:
        return torch.arange(total_q, device=device)
    bounds = cu_seqlens_q.long()
    edges = torch.cat([bounds[:-1], bounds[1:] - 1]).clamp(0, total_q - 1)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    random_rows = torch.randperm(total_q, generator=generator)[:count].to(device)
    return torch.unique(torch.cat([edges, random_rows]))[:max(count, edges.numel())]


def check(kwargs, out, lse, rows):
    """Section 7 bounds on the sampled rows: (passed, text)."""
    reference = {name: value for name, value in kwargs.items()}
    ref_out, ref_lse, _ = evaluate_rows(**reference, rows=rows)
    got = out[rows].double()
    diff = got - ref_out
    max_abs = diff.abs().max().item() if diff.numel() else 0.0
    ref_norm = torch.linalg.vector_norm(ref_out).item()
    rel_l2 = torch.linalg.vector_norm(diff).item() / ref_norm if ref_norm > 0 else 0.0
    got_lse = lse[rows].double()
    empty_mismatch = int((torch.isneginf(got_lse) != torch.isneginf(ref_lse)).sum())
    finite = torch.isfinite(ref_lse)
    lse_error = (got_lse[finite] - ref_lse[finite]).abs().max().item() if finite.any() else 0.0
    finite_out = bool(torch.isfinite(got).all())
    passed = (max_abs < MAX_ABS_ERROR and rel_l2 < MAX_REL_L2_ERROR and lse_error < MAX_LSE_ERROR
              and empty_mismatch == 0 and finite_out)
    text = (f"max abs {max_abs:.2e} (< {MAX_ABS_ERROR}), rel L2 {rel_l2:.2e} "
            f"(< {MAX_REL_L2_ERROR}), lse max abs {lse_error:.2e} (< {MAX_LSE_ERROR})")
    if empty_mismatch:
        text += f", {empty_mismatch} lse entries disagree on -inf"
    if not finite_out:
        text += ", NaN/inf in out"
    return passed, text


def _time_runs(call, device, warmup, iters, progress):
    """Median seconds per call: CUDA events on the GPU, perf_counter on the CPU."""
    for index in range(warmup):
        progress.show(f"warm-up {index + 1}/{warmup}")
        call()
    times = []
    for index in range(iters):
        progress.show(f"timing {index + 1}/{iters}")
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
    return times


def bench(options):
    q_dtype = DTYPES[options.dtype]
    kv_name = options.dtype if options.kv_dtype == "same" else options.kv_dtype
    kv_dtype = DTYPES.get(kv_name, kv_name)
    device = _pick_device(options.device, q_dtype, kv_dtype)
    seqlens_q, seqlens_k, num_qo_heads, num_kv_heads = _shape(options, device.type)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    lengths = (f"S={seqlens_q[0]}" if len(seqlens_q) == 1 and seqlens_q == seqlens_k else
               f"q lens {seqlens_q}, k lens {seqlens_k}")
    print(f"flashmsa bench: {lengths}, Hq {num_qo_heads} / Hkv {num_kv_heads}, topk "
          f"{options.topk}, {'causal' if options.causal else 'non-causal'}, pattern "
          f"{options.pattern}, q {options.dtype}, kv {kv_name}, {options.layout}, on "
          f"{device} ({device_name})")
    progress = Progress()
    progress.show("building inputs")
    kwargs = build_inputs(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, options.topk,
                          options.pattern, options.causal, q_dtype, kv_dtype, options.layout,
                          device, options.seed)
    reads = keys_read(kwargs["q2k_indices"], kwargs["cu_seqlens_q"], kwargs.get("cu_seqlens_k"),
                      options.causal, kwargs.get("page_table"), kwargs.get("seqused_k"))
    useful_flops = 4 * HEAD_DIM * (num_qo_heads // num_kv_heads) * int(reads.sum())

    progress.show("first run")
    out = torch.empty_like(kwargs["q"])
    out, lse = msa_sparse_attention(**kwargs, return_softmax_lse=True, out=out)
    passed = True
    check_rows = (options.check_rows if options.check_rows is not None
                  else DEFAULT_CHECK_ROWS[device.type])
    if check_rows > 0:
        progress.show(f"checking {check_rows} rows against the fp64 evaluation")
        rows = _sample_rows(out.shape[0], check_rows, kwargs["cu_seqlens_q"], device,
                            options.seed)
        passed, text = check(kwargs, out, lse, rows)
        progress.done()
        print(f"  check: {rows.numel()} of {out.shape[0]} rows vs fp64 torch: {text}: "
              f"{'PASS' if passed else 'FAIL'}")

    warmup = options.warmup if options.warmup is not None else (3 if device.type == "cuda" else 1)
    iters = options.iters if options.iters is not None else (20 if device.type == "cuda" else 3)
    times = _time_runs(lambda: msa_sparse_attention(**kwargs, out=out), device, warmup,
                       max(1, iters), progress)
    progress.done()
    median = statistics.median(times)
    print(f"  time: median {median * 1e3:.3f} ms over {len(times)} runs "
          f"(min {min(times) * 1e3:.3f}, max {max(times) * 1e3:.3f})")
    print(f"  useful work: {useful_flops / 1e12:.3f} TFLOP ({int(reads.sum())} keys read over "
          f"(token, KV head)) -> {useful_flops / median / 1e12:.2f} useful TFLOP/s")
    return 0 if passed else 1


def main(argv=None):
    options = _parse(argv)
    return bench(options)


if __name__ == "__main__":
    sys.exit(main())
