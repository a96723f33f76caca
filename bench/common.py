"""Shared pieces of the benchmarks: loading flashmsa, timing, ceilings, inputs, output files.

Timing rules (../shared/design/performance.md): warm up, take the median of >= 20 samples,
time with CUDA graph replays (launch gaps out) or CUDA events, and rotate between several input
sets when one set would fit in the 60 MB L2, so that the numbers are not L2 numbers.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_DIR = os.path.join(os.path.dirname(REPO), "shared", "data", "msa_workloads")
L2_BYTES = 60 << 20       # H200
MAX_SETS = 32             # rotation sets at most: enough to pass 2x L2 for a 4 MiB decode call
HEAD_DIM = 128


def import_flashmsa():
    """The package from python/ (PYTHONPATH=python on the GPU machine) or an installed one."""
    python_dir = os.path.join(REPO, "python")
    if python_dir not in sys.path:
        sys.path.insert(0, python_dir)
    import flashmsa
    return flashmsa


# ---------------------------------------------------------------------------------------------
# Command line


def base_parser(description: str, kv_dtypes=None) -> argparse.ArgumentParser:
    """The benchmarks' common options; kv_dtypes: the --kv-dtype choices (default KV_DTYPES,
    those every benchmark handles; decode and prefill add nvfp4, decode also all)."""
    kv_dtypes = KV_DTYPES if kv_dtypes is None else kv_dtypes
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", default="out/bench", help="directory for CSV, JSON (and PNG)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: tiny shapes through the CPU backend, to check the code paths")
    p.add_argument("--quick", action="store_true", help="fewer cases, to fit a short GPU slot")
    p.add_argument("--reps", type=int, default=20, help="timed samples per measurement (>= 20)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--launch-overrides", default="", metavar="NAME=VALUE,...",
                   help="test-only overrides of the Hopper launch plan for every call of the run "
                        "(flashmsa.testing.FIELDS), e.g. splits=4,push=0")
    kv_help = ("K/V storage of the FlashMSA rows: auto = q's dtype (bf16); fp8 = "
               "float8_e4m3fn converted from the same bf16 data with a per-tensor scale "
               "(k_global_scale / v_global_scale)")
    if "nvfp4" in kv_dtypes:
        kv_help += ("; nvfp4 = packed NVFP4 (uint8, D/2 bytes a row) quantized from the same "
                    "bf16 data by flashmsa.quantize.quantize_nvfp4, with its swizzled E4M3 "
                    "block scales (k_scale / v_scale)")
    if "all" in kv_dtypes:
        kv_help += "; all = bf16, fp8 and nvfp4 rows of every case in one run"
    p.add_argument("--kv-dtype", choices=kv_dtypes, default="auto",
                   help=kv_help + ". The baselines (SDPA, FlexAttention, the gather evaluation) "
                        "run on the bf16 data either way")
    return p


def launch_overrides(text: str):
    """The run's launch overrides (--launch-overrides "splits=4,push=0"), as a context."""
    import flashmsa.testing
    fields = dict(item.split("=", 1) for item in text.split(",") if item)
    return flashmsa.testing.launch_overrides(**{k: int(v) for k, v in fields.items()})


def check_device(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: use --device cpu for the tiny code-path check")


# ---------------------------------------------------------------------------------------------
# Timing


@dataclass
class Timing:
    seconds: float          # median per call
    reps: int               # samples the median is over
    method: str             # "graph", "events" or "wall"
    samples: list = field(default_factory=list)


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_calls(fns, device: str, reps: int = 20, warmup: int = 3, graph: bool = True,
               budget_s: float | None = None, min_reps: int = 5) -> Timing:
    """Median seconds per call of `fns` (one callable per rotation set, run round robin).

    graph=True captures one CUDA graph holding one call per set and times its replays with
    events (per call = replay / len(fns)); if capture fails it falls back to events. budget_s
    caps the timed loop of slow baselines: the reps then drop (never below min_reps) and the
    row says how many samples there were.
    """
    fns = list(fns)
    if device != "cuda":
        for f in fns[:1]:
            f()
        samples = []
        for i in range(reps):
            t0 = time.perf_counter()
            fns[i % len(fns)]()
            samples.append(time.perf_counter() - t0)
        return Timing(statistics.median(samples), reps, "wall", samples)

    # Warm up on a side stream: what graph capture wants, and it keeps one-off work (module
    # load, autotuning, allocations) out of the numbers either way.
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    t0 = time.perf_counter()
    with torch.cuda.stream(stream):
        for _ in range(max(1, warmup)):
            for f in fns:
                f()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    per_call = (time.perf_counter() - t0) / (max(1, warmup) * len(fns))
    if budget_s is not None and per_call * len(fns) * reps > budget_s:
        reps = max(min_reps, int(budget_s / (per_call * len(fns))))

    if graph:
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for f in fns:
                    f()
            g.replay()
            torch.cuda.synchronize()
            samples = _event_samples(g.replay, reps)
            return Timing(statistics.median(samples) / len(fns), reps, "graph",
                          [s / len(fns) for s in samples])
        except Exception as e:  # noqa: BLE001 - a baseline that cannot be captured is timed eagerly
            torch.cuda.synchronize()
            print(f"  (graph capture failed, timing with events: {type(e).__name__}: {e})")
    samples = []
    for i in range(reps):
        samples += _event_samples(fns[i % len(fns)], 1)
    return Timing(statistics.median(samples), reps, "events", samples)


def _event_samples(fn, reps: int) -> list:
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(reps)]
    for start, end in pairs:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1e-3 for start, end in pairs]


def rotation_sets(bytes_per_set: int, device: str, max_total: int = 8 << 30) -> int:
    """How many input sets keep the reuse distance of any byte above 2x L2."""
    if device != "cuda" or bytes_per_set <= 0:
        return 1
    n = math.ceil(2 * L2_BYTES / bytes_per_set)
    return max(1, min(n, MAX_SETS, max(1, max_total // bytes_per_set)))


# ---------------------------------------------------------------------------------------------
# Ceilings measured in the same run


def measure_ceilings(device: str, reps: int) -> dict:
    """Device-to-device copy bandwidth (bytes read + written) and a bf16 square matmul."""
    if device == "cuda":
        copy_bytes, n = 2 << 30, 8192
    else:
        copy_bytes, n = 64 << 20, 512
    src = torch.randn(copy_bytes // 2, dtype=torch.bfloat16, device=device)
    dst = torch.empty_like(src)
    t = time_calls([lambda: dst.copy_(src)], device, reps=reps, graph=False)
    copy_gbs = 2 * copy_bytes / t.seconds / 1e9
    del src, dst
    a = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    b = torch.randn(n, n, dtype=torch.bfloat16, device=device)
    t2 = time_calls([lambda: torch.mm(a, b)], device, reps=reps, graph=False)
    return {"copy_GBps": copy_gbs, "copy_bytes": copy_bytes,
            "matmul_TFLOPs": 2 * n ** 3 / t2.seconds / 1e12, "matmul_n": n}


# ---------------------------------------------------------------------------------------------
# Inputs


def randn(shape, dtype, device, generator=None):
    """Inputs are randn / 3 (contract section 7), never zeros."""
    x = torch.randn(shape, dtype=torch.float32, device=device, generator=generator) / 3
    return x.to(dtype)


def cu_seqlens(lengths, device) -> torch.Tensor:
    lens = torch.as_tensor(list(lengths), dtype=torch.int64)
    return torch.cat([torch.zeros(1, dtype=torch.int64), lens.cumsum(0)]).to(
        device=device, dtype=torch.int32)


# ---------------------------------------------------------------------------------------------
# K/V storage (--kv-dtype)

KV_DTYPES = ("auto", "fp8")                  # what every benchmark's --kv-dtype takes
KV_DTYPES_NVFP4 = KV_DTYPES + ("nvfp4",)     # bench.decode and bench.prefill
FP8 = torch.float8_e4m3fn
NVFP4 = torch.uint8   # packed NVFP4: two E2M1 values a byte, E4M3 block scales beside (section 6)
NVFP4_GROUP = 16      # elements sharing one block scale
E4M3_MAX = 448.0
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16", FP8: "fp8", NVFP4: "nvfp4"}
_CONVERT_ELEMENTS = 1 << 26   # elements converted at a time: float32 temporaries of 256 MiB
# Elements quantized to NVFP4 at a time: quantize_nvfp4's temporaries (float32 groups, int64
# codes) are some 40 bytes an element, 640 MiB here.
_NVFP4_ELEMENTS = 1 << 24


def kv_storage_dtype(kv_dtype: str, q_dtype: torch.dtype) -> torch.dtype:
    """The dtype FlashMSA's K/V are stored in for --kv-dtype (auto: q's dtype; nvfp4: uint8)."""
    return {"fp8": FP8, "nvfp4": NVFP4}.get(kv_dtype, q_dtype)


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def kv_scale_row_bytes(dtype: torch.dtype, head_dim: int = HEAD_DIM) -> int:
    """Block-scale bytes of one key row of K (or V) of one KV head: D/16 for NVFP4 (one E4M3
    byte per 16 elements), none for the other storages (fp8's per-tensor scale is no row's)."""
    return head_dim // NVFP4_GROUP if dtype == NVFP4 else 0


def kv_row_bytes(dtype: torch.dtype, head_dim: int = HEAD_DIM) -> int:
    """Bytes read for one key row of K (or V) of one KV head in `dtype`'s storage: D elements
    of 2 (bf16) or 1 (fp8) bytes; NVFP4 D/2 bytes of packed values plus D/16 of block scales
    (contract section 10: the bytes of K and V the call reads)."""
    if dtype == NVFP4:
        return head_dim // 2 + kv_scale_row_bytes(dtype, head_dim)
    return head_dim * torch.empty(0, dtype=dtype).element_size()


@dataclass
class StoredKV:
    """FlashMSA's K and V in one storage, with the scale arguments of its calls.

    scales: keyword arguments for flashmsa.msa_sparse_attention and flashmsa.reference:
    k_global_scale / v_global_scale (fp8, per-tensor descales), k_scale / v_scale (NVFP4, the
    swizzled block-scale tables), none for bf16."""
    dtype: torch.dtype
    k: torch.Tensor
    v: torch.Tensor
    scales: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return dtype_name(self.dtype)

    def bytes(self) -> int:
        tensors = [self.k, self.v] + [x for x in self.scales.values()
                                      if isinstance(x, torch.Tensor)]
        return sum(x.numel() * x.element_size() for x in tensors)


def store_kv(k: torch.Tensor, v: torch.Tensor, dtype: torch.dtype, paged: bool) -> StoredKV:
    """FlashMSA's K/V in `dtype` from the bf16 k, v (the same tensors for k's own dtype; fp8:
    to_fp8; NVFP4: to_nvfp4, paged (num_pages, Hkv, 128, D) or flat (total_k, Hkv, D))."""
    if dtype == k.dtype:
        return StoredKV(dtype, k, v)
    if dtype == FP8:
        k8, k_scale = to_fp8(k)
        v8, v_scale = to_fp8(v)
        return StoredKV(dtype, k8, v8, dict(k_global_scale=k_scale, v_global_scale=v_scale))
    if dtype == NVFP4:
        k4, k_table = to_nvfp4(k, paged)
        v4, v_table = to_nvfp4(v, paged)
        return StoredKV(dtype, k4, v4, dict(k_scale=k_table, v_scale=v_table))
    raise ValueError(f"no K/V storage {dtype}")


def to_fp8(x: torch.Tensor):
    """x -> (float8_e4m3fn copy, per-tensor descale) with x ~= fp8 * scale: (x / scale) rounded to
    E4M3, the scale mapping x's largest magnitude to E4M3's largest finite value (448). Slices of
    the first dim at a time, so that a cache of many GiB needs no float32 copy of itself."""
    out = torch.empty(x.shape, dtype=FP8, device=x.device)
    if x.numel() == 0:
        return out, 1.0
    step = max(1, _CONVERT_ELEMENTS // max(1, x[0].numel()))
    slices = [slice(i, i + step) for i in range(0, x.shape[0], step)]
    amax = max(float(x[s].abs().amax()) for s in slices)
    scale = amax / E4M3_MAX if amax > 0 else 1.0
    for s in slices:
        out[s] = (x[s].float() / scale).clamp_(-E4M3_MAX, E4M3_MAX).to(FP8)
    return out, scale


def to_nvfp4(x: torch.Tensor, paged: bool):
    """x -> (packed uint8 (..., D/2), swizzled E4M3 block-scale table): exactly
    flashmsa.quantize.quantize_nvfp4(x, paged=paged), paged x (num_pages, Hkv, 128, D) or flat
    (total_k, Hkv, D), but quantized a slice of the first dim at a time, so that a cache of many
    GiB needs no float32 or int64 copy of itself. A slice starting at a multiple of 128 scale-table
    rows fills its own contiguous part of the table (each 128 rows are 128 * D/16 bytes)."""
    from flashmsa.quantize import quantize_nvfp4
    head_dim = x.shape[-1]
    cols = head_dim // NVFP4_GROUP
    rows_per_item = x[0, ..., 0].numel() if x.shape[0] else 1   # paged Hkv * 128, flat Hkv
    if x.numel() <= _NVFP4_ELEMENTS or cols % 4:
        return quantize_nvfp4(x, paged=paged)
    num_rows = x[..., 0].numel()
    packed = torch.empty((*x.shape[:-1], head_dim // 2), dtype=torch.uint8, device=x.device)
    table = torch.zeros(-(-num_rows // 128) * 128 * cols, dtype=torch.uint8, device=x.device)
    align = 128 // math.gcd(128, rows_per_item)   # items whose rows make whole 128-row groups
    step = max(align, _NVFP4_ELEMENTS // max(1, x[0].numel()) // align * align)
    for start in range(0, x.shape[0], step):
        part, part_table = quantize_nvfp4(x[start:start + step], paged=paged)
        packed[start:start + step] = part
        offset = start * rows_per_item * cols
        table[offset:offset + part_table.numel()] = part_table
        del part, part_table
    return packed, table


# ---------------------------------------------------------------------------------------------
# Output


def environment(device: str) -> dict:
    env = {"time": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "torch": torch.__version__,
           "python": platform.python_version(), "device": device,
           "library": os.environ.get("FLASHMSA_LIBRARY", "")}
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name()
        env["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
    # FLASHMSA_COMMIT names the commit the library was built from; it wins over the checkout's
    # HEAD, which on the GPU machine can be a stale copy of .git.
    env["commit"] = os.environ.get("FLASHMSA_COMMIT")
    if not env["commit"]:
        try:
            env["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, text=True,
                                           capture_output=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            env["commit"] = "unknown"
    return env


def write_outputs(out_dir: str, name: str, rows: list, extra: dict) -> None:
    """<name>.csv (one row per measurement) and <name>.json (rows plus environment, ceilings,
    aggregates)."""
    os.makedirs(out_dir, exist_ok=True)
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(os.path.join(out_dir, f"{name}.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
        json.dump({**extra, "rows": rows}, f, indent=1, default=str)


def print_table(rows: list, columns: list, title: str) -> None:
    """A compact fixed-width table: columns is a list of (key, header, format)."""
    cells = [[("" if r.get(k) is None else (fmt.format(r[k]) if isinstance(r[k], (int, float))
               else str(r[k]))) for k, _, fmt in columns] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, (_, h, _) in enumerate(columns)]
    print(f"\n== {title}")
    print("  ".join(h.rjust(w) for (_, h, _), w in zip(columns, widths)))
    for c in cells:
        print("  ".join(x.rjust(w) for x, w in zip(c, widths)))


def sampled_error(flashmsa, out: torch.Tensor, call: dict, count: int = 256) -> float:
    """Relative L2 error of `out` on a random sample of rows against flashmsa.reference's fp64
    evaluation of the same call: a fast wrong kernel must not land in a table unflagged.

    A paged call is evaluated on a few rows at a time, each group against a cache holding only
    the pages its rows can read (paged_rows_call): evaluate_rows decodes quantized K/V (fp8,
    NVFP4) to float32 whole, which for the decode benchmark's 24 GiB fp8 K would be 49 GiB, per
    tensor."""
    rows = torch.randperm(out.shape[0], device=out.device)[:count]
    if call.get("page_table") is None:
        ref, _, _ = flashmsa.reference.evaluate_rows(**call, rows=rows)
    else:
        k = call["k"]
        pages_per_row = call["q2k_indices"].shape[0] * call["q2k_indices"].shape[2]
        # The group's pages as stored plus their float32 decoding, K and V; NVFP4 holds two
        # elements a byte, and its decoding's temporaries (codes, per-element scales) are about
        # twice its float32 result again.
        elements = k[0].numel() * (2 if k.dtype == NVFP4 else 1)
        page_bytes = 2 * (k[0].numel() * k.element_size()
                          + 4 * elements * (3 if k.dtype == NVFP4 else 1))
        step = max(1, _REFERENCE_BYTES // (pages_per_row * page_bytes))
        ref = torch.cat([flashmsa.reference.evaluate_rows(**paged_rows_call(call, part),
                                                          rows=part)[0]
                         for part in rows.split(step)])
    got = out[rows].double()
    if not bool(torch.isfinite(got).all()):
        return math.inf
    return ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()


_REFERENCE_BYTES = 1 << 30   # K/V pages (stored + float32) per evaluate_rows call of a paged check


def paged_rows_call(call: dict, rows: torch.Tensor) -> dict:
    """The paged call `call` cut down for the query rows `rows`: k and v hold only the pages
    that any of the rows' q2k entries maps to (a superset of what the rows read), and the page
    table points into them, every other entry -1 (reads nothing). The rows' results are the
    full call's: the same pages, in the same order of keys. NVFP4 block scales (k_scale,
    v_scale) are cut to the same pages: a swizzled table's page is Hkv * 128 whole rows, a
    contiguous run of its bytes; page-local (4-D) scales are indexed like k."""
    k, v, table = call["k"], call["v"], call["page_table"]
    num_pages = k.shape[0]
    cu_q = call["cu_seqlens_q"].to(device=rows.device, dtype=torch.int64)
    request = torch.searchsorted(cu_q[1:], rows, right=True)
    entries = table.to(torch.int64)
    ids = call["q2k_indices"][:, rows, :].to(torch.int64).clamp(0, entries.shape[1] - 1)
    pages = entries[request.view(1, -1, 1), ids].reshape(-1)
    pages = pages[(pages >= 0) & (pages < num_pages)].unique()
    if pages.numel() == 0:
        pages = torch.zeros(1, dtype=torch.int64, device=k.device)   # keep k indexable
    new_index = torch.full((num_pages,), -1, dtype=torch.int64, device=k.device)
    new_index[pages] = torch.arange(pages.numel(), device=k.device)
    in_range = (entries >= 0) & (entries < num_pages)
    new_table = torch.where(in_range, new_index[entries.clamp(0, num_pages - 1)], -1)
    cut = {**call, "k": k[pages], "v": v[pages], "page_table": new_table.to(table.dtype)}
    if k.dtype == NVFP4:
        for name in ("k_scale", "v_scale"):
            scale = call.get(name)
            if scale is None:
                continue
            if scale.dim() == 4:
                cut[name] = scale[pages]
            else:
                # The swizzled layout's 128-row groups are ceil(cols / 4) * 512 bytes.
                cols = 2 * k.shape[-1] // NVFP4_GROUP
                per_page = k.shape[1] * k.shape[2] // 128 * (-(-cols // 4) * 512)
                flat = scale.reshape(-1)[:num_pages * per_page].view(num_pages, per_page)
                cut[name] = flat[pages].reshape(-1)
    return cut


def run_checked(args, run, failures) -> None:
    """A benchmark's main: rows = run(args) under args' launch overrides; exit status 1, the
    reasons on stderr, when failures(rows) names any."""
    with launch_overrides(args.launch_overrides):
        rows = run(args)
    bad = failures(rows)
    if bad:
        print("FAILED:\n  " + "\n  ".join(bad), file=sys.stderr)
        sys.exit(1)


def check_note(rel_l2: float) -> str:
    """Contract section 7's relative bound on the sampled rows."""
    return "" if rel_l2 < 1e-2 else f"CHECK FAILED (sampled rel L2 {rel_l2:.2e})"


def free_memory(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def workload_file(name: str) -> str:
    """A file of the MSA workloads: ../shared when present (developer machines), else the copy
    in bench/data (the GPU machine gets the repository alone)."""
    for folder in (DATA_DIR, os.path.join(REPO, "bench", "data")):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"{name} neither in {DATA_DIR} nor in bench/data")
