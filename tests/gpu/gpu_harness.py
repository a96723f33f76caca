"""How every GPU test runs a case: inputs, poisoned outputs, the call, and the comparisons.

A case is built on the CPU by tests/python/msa_inputs.build_case (fresh randn / 3 data seeded per
case, every layout and view the contract allows) and moved to the GPU with its strides and
shared storage kept, so a packed K|V cache stays one cache and a permuted NHD view stays a view.
The GPU result is then compared with
- the CPU backend (flashmsa on the CPU copies of the same inputs), and
- the independent fp64 evaluation (torch_reference.reference_msa, run on the GPU for speed),
within contract section 7, including its tighter bound against a plain evaluation in q's dtype.
Outputs are filled with NaN before every call, so an element the kernel never writes fails.
"""
import math

import torch

import flashmsa
from msa_inputs import build_case, reference_kwargs
from torch_reference import check_close, reference_msa

DEVICE = torch.device("cuda")
DTYPES = (torch.bfloat16, torch.float16)
DTYPE_IDS = {torch.bfloat16: "bf16", torch.float16: "fp16"}
# Rows of the fp64 evaluation per chunk on the GPU: the gathered K/V of a chunk stay near 1 GiB
# at Hkv 4, topk 16 (the reference's default is sized for a CPU).
REFERENCE_ROWS_PER_CHUNK = 128


def dtype_id(dtype):
    return DTYPE_IDS[dtype]


class Case:
    """One case: its name (used in every assertion message), its inputs on the CPU and the GPU."""

    def __init__(self, name, cpu_kwargs):
        self.name = name
        self.cpu = cpu_kwargs
        self.gpu = to_device(cpu_kwargs)

    @property
    def q_dtype(self):
        return self.cpu["q"].dtype

    def with_gpu(self, **changes):
        """The GPU kwargs with some entries replaced (e.g. a q2k view), CPU kwargs alike."""
        self.gpu.update(changes)
        self.cpu.update({k: (v.cpu() if isinstance(v, torch.Tensor) else v)
                         for k, v in changes.items()})
        return self


def make_case(name, seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal, *,
              dtype=torch.bfloat16, seed=0, scalars=None, **build_options):
    """build_case(...) on the CPU, moved to the GPU. scalars: softmax_scale, k_global_scale,
    v_global_scale, lse_temperature_scale given to every evaluation."""
    kwargs = build_case(seqlens_q, seqlens_k, num_qo_heads, num_kv_heads, topk, causal,
                        q_dtype=dtype, seed=seed, **build_options)
    kwargs.update(scalars or {})
    return Case(name, kwargs)


def to_device(kwargs, device=DEVICE):
    """Every tensor of kwargs on `device` with the same sizes, strides and storage offset; tensors
    sharing a storage (the halves of a packed cache) share one on `device`. Either direction."""
    storages, moved = {}, {}
    for name, value in kwargs.items():
        if not isinstance(value, torch.Tensor):
            moved[name] = value
            continue
        key = value.untyped_storage().data_ptr()
        if key not in storages:
            raw = torch.empty(0, dtype=torch.uint8, device=value.device).set_(
                value.untyped_storage())
            storages[key] = raw.to(device)
        moved[name] = torch.empty(0, dtype=value.dtype, device=device).set_(
            storages[key].untyped_storage(), value.storage_offset(), value.shape, value.stride())
    return moved


def synchronize(name):
    """Surface an asynchronous CUDA fault in the test that caused it, naming the case."""
    try:
        torch.cuda.synchronize()
    except RuntimeError as error:
        raise AssertionError(f"[{name}] CUDA error after the call: {error}") from error


def poisoned_out(kwargs):
    q = kwargs["q"]
    return torch.full(q.shape, math.nan, dtype=q.dtype, device=q.device)


def _poison_allocator(shapes, device):
    """Best effort for outputs the library allocates (lse, lse_t, out without out=): fill blocks
    of exactly those sizes with NaN and free them, so the caching allocator hands NaN memory
    back to the call rather than zeros from an earlier test."""
    buffers = [torch.full(shape, math.nan, dtype=torch.float32, device=device) for shape in shapes]
    del buffers


def run_gpu(case, *, lse=True, out="poisoned", **extra):
    """One call on the GPU inputs. Returns (out, lse or None, lse_t or None).

    out="poisoned": a NaN-filled out= buffer (checked to be the tensor returned); None: the
    library allocates. lse=True asks for lse and lse_t. extra overrides call arguments.
    """
    kwargs = {**case.gpu, **extra}
    total_q, num_qo_heads, _ = kwargs["q"].shape
    if out == "poisoned":
        out = poisoned_out(kwargs)
    shapes = [(total_q, num_qo_heads)] * (2 if lse else 0)
    if out is None:
        shapes.insert(0, kwargs["q"].shape)
    _poison_allocator(shapes, kwargs["q"].device)
    result = flashmsa.msa_sparse_attention(**kwargs, out=out, return_temperature_lse=lse)
    synchronize(case.name)
    got = result[0] if lse else result
    if out is not None:
        assert got is out, f"[{case.name}] msa_sparse_attention did not return the out= tensor"
    return (got, result[1], result[2]) if lse else (got, None, None)


def run_cpu_backend(case, lse=True):
    result = flashmsa.msa_sparse_attention(**case.cpu, return_temperature_lse=lse)
    return (result[0], result[1], result[2]) if lse else (result, None, None)


def reference(case, rows=None, compute_dtype=torch.float64):
    """reference_msa on the GPU copies of the inputs (rows: a sample of query rows)."""
    return reference_msa(**reference_kwargs(case.gpu), query_rows=rows,
                         compute_dtype=compute_dtype, rows_per_chunk=REFERENCE_ROWS_PER_CHUNK)


def check_gpu_result(case, got, rows=None, cpu_backend=True, cpu_result=None):
    """The comparisons of contract section 7 for a GPU result (out, lse, lse_t).

    rows: compare only these query rows with the evaluations (large cases); every element of
    out is still checked to be finite. cpu_backend: also compare with the CPU backend
    (cpu_result, if already computed, else computed here on the whole case).
    """
    out, lse, lse_t = got
    name, dtype = case.name, case.q_dtype
    finite = torch.isfinite(out.float())
    assert bool(finite.all()), (f"[{name}] out has {int((~finite).sum())} NaN/inf elements "
                                f"(unwritten or poisoned) of {out.numel()}")
    ref, ref_lse, ref_lse_t = reference(case, rows)
    plain, _, _ = reference(case, rows, compute_dtype=dtype)
    pick = (lambda x: x) if rows is None else (lambda x: None if x is None else x[rows])
    check_close(pick(out), ref, dtype, lse=pick(lse), ref_lse=ref_lse, lse_t=pick(lse_t),
                ref_lse_t=ref_lse_t, baseline=plain, case=f"{name} vs fp64 reference")
    # A row that reads nothing: out exactly 0 (section 6).
    empty = torch.isneginf(ref_lse)
    if bool(empty.any()):
        zeros = pick(out)[empty]
        assert bool((zeros == 0).all()), (
            f"[{name}] {int((zeros != 0).sum())} output values of rows that read nothing are "
            f"not exactly 0")
    if cpu_backend:
        if cpu_result is None:
            cpu_result = run_cpu_backend(case, lse=lse is not None)
        cpu_out, cpu_lse, cpu_lse_t = cpu_result
        check_close(out.cpu(), cpu_out, dtype, lse=None if lse is None else lse.cpu(),
                    ref_lse=cpu_lse, lse_t=None if lse_t is None else lse_t.cpu(),
                    ref_lse_t=cpu_lse_t, case=f"{name} vs CPU backend")
    check_inputs_unchanged(case)


def _bytes_if_fp8(x):
    """torch.equal has no kernels for float8 tensors: compare their bytes (bit for bit, the
    same test)."""
    return x.view(torch.uint8) if x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else x


def check_inputs_unchanged(case):
    """The call wrote nothing into its inputs (an out-of-bounds write often lands there)."""
    for key, value in case.gpu.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(_bytes_if_fp8(value.cpu()), _bytes_if_fp8(case.cpu[key])), (
                f"[{case.name}] input {key} changed on the GPU during the call")


def garbage_indices(q2k, num_blocks_min, generator):
    """q2k with contract section 4's worst, row r by r % 7: huge ids, a negative in the middle (the
    rest ignored, garbage included), one id topk times, unsorted, an id past the shortest
    request's blocks, the most negative id."""
    q2k = q2k.clone()
    heads, rows, topk = q2k.shape
    r = torch.arange(rows)
    q2k[:, r % 7 == 0, topk // 2] = 2 ** 31 - 1
    q2k[:, r % 7 == 1, 1] = 2 ** 30 + 5
    middle = r % 7 == 2
    q2k[:, middle, topk // 2] = -7
    q2k[:, middle, topk // 2 + 1:] = 2 ** 31 - 1          # after the end: must be ignored
    dup = r % 7 == 3
    q2k[:, dup, 1:] = q2k[:, dup, :1]                   # one id, topk times
    q2k[:, r % 7 == 4] = q2k[:, r % 7 == 4].flip(-1)    # unsorted (patterns put own block first)
    q2k[:, r % 7 == 5, -1] = num_blocks_min + torch.randint(0, 3, (1,), generator=generator).item()
    q2k[:, r % 7 == 6, 2] = -(2 ** 31)
    return q2k


def assert_bitwise(name, what, got, want):
    """Bitwise equality of two outputs (NaN never equals; -inf equals -inf)."""
    if got is None and want is None:
        return
    same = torch.equal(got, want)
    if not same:
        diff = (got.double() - want.double()).abs().nan_to_num(math.inf)
        assert same, (f"[{name}] {what}: not bitwise equal ({int((got != want).sum())} of "
                      f"{got.numel()} elements differ, max |diff| {diff.max().item():.3e})")


def sample_rows(total_q, count=256, seed=0):
    """A sorted random sample of query rows, always with the first and the last."""
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randperm(total_q, generator=generator)[:count]
    rows = torch.cat([rows, torch.tensor([0, total_q - 1])]).unique()
    return rows.to(DEVICE)


def rows_as_requests(case, rows):
    """The sampled rows of a one-request flat case as a paged call of len(rows) requests of one
    query each, reading the same K/V (a paged view of the flat cache, no copy) with q_offset
    giving each row its position. The CPU backend can then evaluate a sample of a long case.
    Needs total_k a multiple of 128."""
    kw = case.cpu
    total_k, num_kv_heads, head_dim = kw["k"].shape
    assert total_k % 128 == 0 and kw["cu_seqlens_q"].numel() == 2, (
        f"[{case.name}] rows_as_requests needs one request and total_k a multiple of 128")
    rows = rows.cpu()
    num_rows = rows.numel()
    pages = total_k // 128

    def paged_view(x):
        return x.view(pages, 128, num_kv_heads, head_dim).permute(0, 2, 1, 3)

    seqlen_q = int(kw["cu_seqlens_q"][1])
    offset = kw.get("q_offset")
    first = total_k - seqlen_q if offset is None else int(offset if isinstance(offset, int)
                                                          else offset[0])
    sub = dict(kw)
    sub.update(q=kw["q"][rows], k=paged_view(kw["k"]), v=paged_view(kw["v"]),
               q2k_indices=kw["q2k_indices"][:, rows], cu_seqlens_k=None,
               cu_seqlens_q=torch.arange(num_rows + 1, dtype=torch.int32),
               page_table=torch.arange(pages, dtype=torch.int32).repeat(num_rows, 1),
               seqused_k=torch.full((num_rows,), total_k, dtype=torch.int32),
               q_offset=(first + rows).to(torch.int32))
    return sub


def capture_graph(name, fn):
    """fn() once eagerly on a side stream (what capture wants: lazy initialisation, allocator
    warm-up), then one call captured in a CUDA graph. Returns (graph, what the captured fn
    returned: its output tensors, which every replay rewrites)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    synchronize(name)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        result = fn()
    synchronize(name)
    return graph, result


def replay(name, graph, outputs):
    """Poison the graph's outputs, replay, and surface any fault in this test."""
    for x in outputs:
        if x is not None:
            x.fill_(math.nan)
    graph.replay()
    synchronize(name)


def replay_on_new_inputs(name, step_a, step_b, workspace=None):
    """Capture one call on step A's device buffers (after an eager call that warms the
    workspace), copy step B's tensors (same shapes, asserted) into those buffers and replay.
    Returns (the replay's out, lse, lse_t; an eager call on B's own tensors)."""
    static = step_a.gpu
    for key, value in step_b.gpu.items():
        if isinstance(value, torch.Tensor):
            assert value.shape == static[key].shape, f"[{name}] {key} shapes differ"
    run_gpu(step_a, workspace=workspace)
    out = torch.full_like(static["q"], math.nan)

    def call():
        return flashmsa.msa_sparse_attention(**static, out=out, return_temperature_lse=True,
                                             workspace=workspace)

    graph, captured = capture_graph(name, call)
    for key, value in step_b.gpu.items():
        if isinstance(value, torch.Tensor):
            static[key].copy_(value)
    replay(name, graph, captured)
    return captured, run_gpu(step_b, workspace=workspace)
