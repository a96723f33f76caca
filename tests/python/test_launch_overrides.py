"""flashmsa.testing: the test-only launch overrides. On the CPU backend they change nothing (the
plan is the Hopper launch's); here they must reach the library's test-only entry point, nest,
end with their block, and reject unknown names."""
import ctypes

import pytest
import torch

import flashmsa
import flashmsa.testing
from flashmsa import _lib
from msa_inputs import build_case


def _call(case):
    return flashmsa.msa_sparse_attention(case["q"], case["k"], case["v"], case["q2k_indices"],
                                         case["cu_seqlens_q"], case["cu_seqlens_k"], causal=True)


def test_every_field_starts_at_the_plans_choice():
    with flashmsa.testing.launch_overrides() as tuning:
        for name in flashmsa.testing.FIELDS:
            assert getattr(tuning, name) == _lib.TUNING_DEFAULT, f"field {name}"


def test_overrides_nest_and_end_with_their_block():
    assert flashmsa.testing.launch_overrides_in_effect() is None
    with flashmsa.testing.launch_overrides(splits=4, push=0):
        with flashmsa.testing.launch_overrides(splits=2, throttle=1) as inner:
            assert (inner.splits, inner.push, inner.throttle) == (2, 0, 1)
        outer = flashmsa.testing.launch_overrides_in_effect()
        assert (outer.splits, outer.push, outer.throttle) == (4, 0, _lib.TUNING_DEFAULT)
    assert flashmsa.testing.launch_overrides_in_effect() is None


def test_unknown_override_names_the_fields():
    with pytest.raises(ValueError, match="splitz.*splits"):
        with flashmsa.testing.launch_overrides(splitz=2):
            pass


def test_calls_inside_a_block_take_the_tuned_entry_point(monkeypatch):
    case = build_case([20, 7], [300, 129], 8, 2, 4, True, seed=41)
    want = _call(case)
    seen = []
    tuned = _lib.library().flashmsa_sparse_attention_tuned

    def spy(args, tuning, workspace_fn, context):
        seen.append(ctypes.cast(tuning, ctypes.POINTER(_lib.Tuning)).contents.splits)
        return tuned(args, tuning, workspace_fn, context)

    monkeypatch.setattr(_lib.library(), "flashmsa_sparse_attention_tuned", spy)
    with flashmsa.testing.launch_overrides(splits=3):
        got = _call(case)
    assert seen == [3], "the call inside the block did not pass its overrides"
    assert torch.equal(got, want), "CPU result changed under launch overrides"
    _call(case)
    assert seen == [3], "a call after the block still went through the tuned entry point"


def test_a_failing_workspace_allocator_fails_the_call_with_its_own_error():
    """The library asks the allocator only for CUDA calls that need scratch memory; the binding's
    error path is exercised directly: an allocator that raises fails the call with its error."""
    args = _lib.new_args()

    def allocate(nbytes):
        raise MemoryError(f"no {nbytes} bytes")

    _lib._scratch.allocate = allocate
    try:
        assert _lib._workspace_fn(256, None) is None
        assert isinstance(_lib._scratch.error, MemoryError)
    finally:
        _lib._scratch.allocate = _lib._scratch.error = None
    with pytest.raises(ValueError):  # an empty flashmsa_args: invalid before any allocation
        _lib.sparse_attention_allocating(args, allocate)
