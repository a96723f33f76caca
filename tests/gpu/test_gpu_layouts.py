"""K/V layouts read in place: paged with permuted pages, the K and V halves of one packed cache,
NHD caches permuted to HND. All of them hold the same logical data as the flat contiguous case
(msa_inputs builds them from the same seed), so their outputs must equal the flat ones bitwise
(contract section 6), and the flat one must be right (section 7)."""
import pytest

from gpu_harness import (DTYPES, assert_bitwise, check_gpu_result, check_inputs_unchanged,
                         dtype_id, make_case, run_gpu)

# (name, q lens, k lens, Hq, Hkv, topk, causal, pattern)
CASES = [
    ("gqa2_full", [100, 37], [2048, 700], 4, 2, 16, False, "random"),
    ("ragged_causal", [130, 64, 1], [1024, 513, 129], 2, 2, 16, True, "random"),
    ("m3", [200, 50], [3000, 1800], 64, 4, 16, True, "clustered"),
    ("tp8", [160], [2900], 8, 1, 16, True, "indexer"),
]
LAYOUTS = [("paged", "contiguous"), ("paged", "packed"), ("paged", "nhd"), ("flat", "packed"),
           ("flat", "nhd")]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("spec", CASES, ids=lambda s: s[0])
def test_layouts_equal_flat_bitwise(spec, dtype):
    label, lens_q, lens_k, hq, hkv, topk, causal, pattern = spec
    base = f"layout-{label}-{dtype_id(dtype)}"

    def build(layout, view):
        return make_case(f"{base}-{layout}-{view}", lens_q, lens_k, hq, hkv, topk, causal,
                         dtype=dtype, pattern=pattern, seed=31, layout=layout, view=view)

    flat = build("flat", "contiguous")
    want = run_gpu(flat)
    check_gpu_result(flat, want)
    for layout, view in LAYOUTS:
        other = build(layout, view)
        got = run_gpu(other)
        for what, g, w in zip(("out", "lse", "lse_t"), got, want):
            assert_bitwise(other.name, f"{what} vs flat contiguous", g, w)
        check_inputs_unchanged(other)
