"""Per-(KV head, token slot) fp8 scales (docs/contract.md section 6, this project's extension) on
the CPU backend, against an fp64 dequantize-then-attend evaluation written here from the
contract's text alone:

- a key is e4m3 * k_scale[h, slot] * k_global_scale, a value likewise with v_, the slot of flat
  key row r being r and of paged (page p, token t) being p * 128 + t;
- row i of request b reads, per KV head, the keys of the distinct ids of its index list up to
  the first negative one, ids below ceil(seqlen_k / 128), with c <= seqlen_k - seqlen_q + i when
  causal; s = softmax_scale * q . key, out = softmax(s) V, lse = log sum exp(s).
"""
import ctypes

import pytest
import torch

import flashmsa
from flashmsa import _lib
from flashmsa.api import _fill_args
from torch_reference import MAX_ABS_ERROR, MAX_LSE_ERROR, MAX_REL_L2_ERROR, error_stats

BLOCK = 128
HEAD_DIM = 128
SPARE_PAGES = 2
K_GLOBAL_SCALE = 0.7    # not powers of two: a scale applied twice or not at all shows
V_GLOBAL_SCALE = 1.3


class Case:
    """Logical inputs with fp8 K/V stored flat and paged (shuffled pages, spare ones holding
    NaN), and per-token scales for both layouts holding the same value for the same key."""

    def __init__(self, q_lens, k_lens, num_qo_heads, num_kv_heads, topk, causal, seed):
        generator = torch.Generator().manual_seed(seed)
        self.q_lens, self.k_lens, self.topk, self.causal = q_lens, k_lens, topk, causal
        self.num_kv_heads = num_kv_heads
        total_q, total_k = sum(q_lens), sum(k_lens)
        self.cu_q = torch.tensor([0] + torch.tensor(q_lens).cumsum(0).tolist(), dtype=torch.int32)
        self.cu_k = torch.tensor([0] + torch.tensor(k_lens).cumsum(0).tolist(), dtype=torch.int32)
        self.q = (torch.randn(total_q, num_qo_heads, HEAD_DIM, generator=generator) / 3).to(
            torch.bfloat16)
        self.k = (torch.randn(total_k, num_kv_heads, HEAD_DIM, generator=generator) / 3).to(
            torch.float8_e4m3fn)
        self.v = (torch.randn(total_k, num_kv_heads, HEAD_DIM, generator=generator) / 3).to(
            torch.float8_e4m3fn)
        self.indices = torch.full((num_kv_heads, total_q, topk), -1, dtype=torch.int32)
        for b, (q_len, k_len) in enumerate(zip(q_lens, k_lens)):
            blocks = -(-k_len // BLOCK)
            rows = slice(int(self.cu_q[b]), int(self.cu_q[b + 1]))
            # Ids past the request's blocks and repeats included; a negative one ends some lists.
            ids = torch.randint(0, blocks + 2, (num_kv_heads, q_len, topk), generator=generator)
            ends = torch.rand(num_kv_heads, q_len, topk, generator=generator) < 0.05
            self.indices[:, rows] = torch.where(ends, -1, ids).to(torch.int32)
        # Scales in [0.25, 2): a scale of the wrong slot shows. Rows padded past the slots, so
        # that the row stride is not the slot count.
        self.flat_k_scale = self._scales(num_kv_heads, total_k, generator)
        self.flat_v_scale = self._scales(num_kv_heads, total_k, generator)
        self._page(generator)

    @staticmethod
    def _scales(num_kv_heads, slots, generator):
        wide = 0.25 + 1.75 * torch.rand(num_kv_heads, slots + 5, generator=generator)
        return wide[:, :slots]

    def _page(self, generator):
        blocks = [-(-k_len // BLOCK) for k_len in self.k_lens]
        num_pages = sum(blocks) + SPARE_PAGES
        order = torch.randperm(num_pages, generator=generator).tolist()
        hkv = self.num_kv_heads
        nan = torch.full((num_pages, hkv, BLOCK, HEAD_DIM), float("nan"))
        self.paged_k = nan.to(torch.float8_e4m3fn)
        self.paged_v = nan.clone().to(torch.float8_e4m3fn)
        self.paged_k_scale = torch.full((hkv, num_pages * BLOCK), float("nan"))
        self.paged_v_scale = self.paged_k_scale.clone()
        self.page_table = torch.full((len(blocks), max(blocks) + 1), -1, dtype=torch.int32)
        next_page = 0
        for b, k_len in enumerate(self.k_lens):
            for j in range(blocks[b]):
                page = order[next_page]
                next_page += 1
                self.page_table[b, j] = page
                first = int(self.cu_k[b]) + j * BLOCK
                n = min(BLOCK, k_len - j * BLOCK)
                tokens = slice(first, first + n)
                self.paged_k[page, :, :n] = self.k[tokens].transpose(0, 1)
                self.paged_v[page, :, :n] = self.v[tokens].transpose(0, 1)
                slots = slice(page * BLOCK, page * BLOCK + n)
                self.paged_k_scale[:, slots] = self.flat_k_scale[:, tokens]
                self.paged_v_scale[:, slots] = self.flat_v_scale[:, tokens]
        self.seqused_k = torch.tensor(self.k_lens, dtype=torch.int32)

    def kwargs(self, paged, scaled="both", global_scales=False):
        """Arguments of msa_sparse_attention; scaled: which of k / v take per-token scales
        ("k", "v", "both" or "none")."""
        kwargs = dict(q=self.q, q2k_indices=self.indices, cu_seqlens_q=self.cu_q,
                      causal=self.causal, return_softmax_lse=True)
        if paged:
            kwargs.update(k=self.paged_k, v=self.paged_v, page_table=self.page_table,
                          seqused_k=self.seqused_k)
            k_scale, v_scale = self.paged_k_scale, self.paged_v_scale
        else:
            kwargs.update(k=self.k, v=self.v, cu_seqlens_k=self.cu_k)
            k_scale, v_scale = self.flat_k_scale, self.flat_v_scale
        if scaled in ("k", "both"):
            kwargs["k_scale"] = k_scale
        if scaled in ("v", "both"):
            kwargs["v_scale"] = v_scale
        if global_scales:
            kwargs.update(k_global_scale=K_GLOBAL_SCALE, v_global_scale=V_GLOBAL_SCALE)
        return kwargs

    def reference(self, scaled="both", global_scales=False):
        """(out, lse) in fp64 by the contract's text, on the flat logical data."""
        hkv = self.num_kv_heads
        q = self.q.to(torch.float64)
        total_q, hq, _ = q.shape
        group = hq // hkv
        k = self.k.to(torch.float64)
        v = self.v.to(torch.float64)
        if scaled in ("k", "both"):
            k = k * self.flat_k_scale.t().to(torch.float64)[:, :, None]
        if scaled in ("v", "both"):
            v = v * self.flat_v_scale.t().to(torch.float64)[:, :, None]
        if global_scales:
            k, v = k * K_GLOBAL_SCALE, v * V_GLOBAL_SCALE
        out = torch.zeros(total_q, hq, HEAD_DIM, dtype=torch.float64)
        lse = torch.full((total_q, hq), float("-inf"), dtype=torch.float64)
        for b, (q_len, k_len) in enumerate(zip(self.q_lens, self.k_lens)):
            blocks = -(-k_len // BLOCK)
            for i in range(q_len):
                row = int(self.cu_q[b]) + i
                limit = min(k_len, k_len - q_len + i + 1) if self.causal else k_len
                for h in range(hkv):
                    selected = set()
                    for block in self.indices[h, row].tolist():
                        if block < 0:
                            break
                        if block < blocks:
                            selected.add(block)
                    keys = [c for block in sorted(selected)
                            for c in range(block * BLOCK, min((block + 1) * BLOCK, limit))]
                    if not keys:
                        continue
                    keys = torch.tensor(keys) + int(self.cu_k[b])
                    heads = slice(h * group, (h + 1) * group)
                    scores = q[row, heads] @ k[keys, h].t() * HEAD_DIM ** -0.5
                    out[row, heads] = torch.softmax(scores, dim=-1) @ v[keys, h]
                    lse[row, heads] = torch.logsumexp(scores, dim=-1)
        return out, lse


def check_against(name, got, want):
    out, lse = got
    ref_out, ref_lse = want
    max_abs, rel_l2 = error_stats(out.to(torch.float64), ref_out)
    assert max_abs < MAX_ABS_ERROR, f"[{name}] max |out - ref| = {max_abs:.3e}"
    assert rel_l2 < MAX_REL_L2_ERROR, f"[{name}] relative L2 error {rel_l2:.3e}"
    empty = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), empty), f"[{name}] -inf lse where the reference is not"
    assert bool((out[empty.nonzero(as_tuple=True)] == 0).all()), f"[{name}] empty rows not 0"
    lse_error = (lse.to(torch.float64)[~empty] - ref_lse[~empty]).abs().max().item()
    assert lse_error < MAX_LSE_ERROR, f"[{name}] max |lse - ref| = {lse_error:.3e}"


def assert_bitwise(name, got, want):
    for label, a, b in zip(("out", "lse"), got, want):
        assert torch.equal(a.view(torch.int16) if a.dtype == torch.bfloat16 else a.view(
            torch.int32), b.view(torch.int16) if b.dtype == torch.bfloat16 else b.view(
            torch.int32)), f"[{name}] {label} differs bitwise"


def make_case(group, topk, causal):
    num_kv_heads = 2 if group == 1 else 1
    k_lens = [900, 300] if topk < 64 else [8300, 700]
    return Case(q_lens=[5, 4], k_lens=k_lens, num_qo_heads=group * num_kv_heads,
                num_kv_heads=num_kv_heads, topk=topk, causal=causal, seed=group * 100 + topk)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("topk", [1, 16, 64])
@pytest.mark.parametrize("group", [1, 16])
def test_matches_dequantize_then_attend(group, topk, causal):
    case = make_case(group, topk, causal)
    for scaled in ("k", "v", "both"):
        for global_scales in (False, True):
            want = case.reference(scaled, global_scales)
            results = {}
            for paged in (False, True):
                name = (f"group {group} topk {topk} causal {causal} scaled {scaled} global "
                        f"{global_scales} {'paged' if paged else 'flat'}")
                results[paged] = flashmsa.msa_sparse_attention(
                    **case.kwargs(paged, scaled, global_scales))
                check_against(name, results[paged], want)
            assert_bitwise(f"paged vs flat, group {group} topk {topk} scaled {scaled}",
                           results[True], results[False])


@pytest.mark.parametrize("paged", [False, True], ids=["flat", "paged"])
def test_unit_scales_give_the_unscaled_result_bitwise(paged):
    case = make_case(16, 16, True)
    plain = flashmsa.msa_sparse_attention(**case.kwargs(paged, "none", True))
    kwargs = case.kwargs(paged, "both", True)
    kwargs["k_scale"] = torch.ones_like(kwargs["k_scale"])
    kwargs["v_scale"] = torch.ones_like(kwargs["v_scale"])
    assert_bitwise("unit per-token scales", flashmsa.msa_sparse_attention(**kwargs), plain)


@pytest.fixture(scope="module")
def small_case():
    return make_case(1, 16, True)


def expect_value_error(kwargs, *fragments):
    with pytest.raises(ValueError) as raised:
        flashmsa.msa_sparse_attention(**kwargs)
    for fragment in fragments:
        assert fragment in str(raised.value), f"{fragment!r} not in {str(raised.value)!r}"


@pytest.mark.parametrize("paged", [False, True], ids=["flat", "paged"])
@pytest.mark.parametrize("name", ["k_scale", "v_scale"])
def test_scale_errors_name_the_argument(small_case, paged, name):
    kwargs = small_case.kwargs(paged)
    scale = kwargs[name]
    expect_value_error(dict(kwargs, **{name: scale.double()}), name, "float32")
    expect_value_error(dict(kwargs, **{name: scale[0]}), name, "2-D")
    expect_value_error(dict(kwargs, **{name: scale[:1]}), name, "num_kv_heads")
    expect_value_error(dict(kwargs, **{name: scale[:, :-1]}), name, "slots")
    expect_value_error(dict(kwargs, **{name: scale.t().contiguous().t()}), name, "contiguous")
    expect_value_error(dict(kwargs, **{name: scale[:1].expand(scale.shape)}), name, "stride")
    expect_value_error(dict(kwargs, **{name: torch.empty(scale.shape, device="meta")}), name,
                       "device")


def test_scales_on_bf16_kv_are_refused(small_case):
    kwargs = small_case.kwargs(False, "k")
    kwargs.update(k=small_case.k.to(torch.bfloat16), v=small_case.v.to(torch.bfloat16))
    expect_value_error(kwargs, "k_scale", "float8_e4m3fn")


def _c_args(kwargs):
    """The flashmsa_args of a CPU call, as the Python package fills them."""
    out, lse = torch.empty_like(kwargs["q"]), torch.empty(kwargs["q"].shape[:2])
    return _fill_args(
        kwargs["q"], kwargs["k"], kwargs["v"], kwargs["q2k_indices"], kwargs["cu_seqlens_q"],
        kwargs.get("cu_seqlens_k"), kwargs.get("page_table"), kwargs.get("seqused_k"),
        kwargs.get("k_scale"), kwargs.get("v_scale"), None, None, kwargs["causal"],
        HEAD_DIM ** -0.5, 1.0, 1.0, 1.0, out, lse, None, None, None), (out, lse)


def _call(args):
    library = _lib.library()
    status = library.flashmsa_sparse_attention(ctypes.byref(args))
    return status, library.flashmsa_last_error().decode()


def test_c_validation_of_token_scales(small_case):
    args, _ = _c_args(small_case.kwargs(True))
    assert _call(args)[0] == _lib.OK
    args.k_token_scale_slots -= 1
    status, message = _call(args)
    assert status == _lib.ERROR_INVALID_ARGUMENT and "k_token_scale_slots" in message, message
    args, _ = _c_args(small_case.kwargs(True))
    args.v_token_scale_stride_head = args.v_token_scale_slots - 1
    status, message = _call(args)
    assert (status == _lib.ERROR_INVALID_ARGUMENT
            and "v_token_scale_stride_head" in message), message
    args, _ = _c_args(small_case.kwargs(True))
    args.kv_dtype = _lib.DTYPE_BF16
    status, message = _call(args)
    assert status == _lib.ERROR_INVALID_ARGUMENT and "k_token_scale" in message, message
