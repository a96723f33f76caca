"""torch.library registration (torch.compile, fake implementation), the workspace, and the
package's small helpers."""
import pytest
import torch

import flashmsa
from flashmsa import workspace as workspace_module
from msa_inputs import build_case


@pytest.fixture(scope="module")
def case():
    return build_case([40, 25], [700, 300], 8, 2, 8, True, seed=31)


def test_torch_compile_fullgraph(case):
    def attention_then_more(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k):
        out, lse = flashmsa.msa_sparse_attention(q * 2, k, v, q2k_indices, cu_seqlens_q,
                                                 cu_seqlens_k, causal=True, softmax_scale=0.04,
                                                 return_softmax_lse=True)
        return out.float() + 1, lse

    arguments = [case[name] for name in ("q", "k", "v", "q2k_indices", "cu_seqlens_q",
                                          "cu_seqlens_k")]
    torch._dynamo.reset()
    compiled = torch.compile(attention_then_more, fullgraph=True)
    got_out, got_lse = compiled(*arguments)
    want_out, want_lse = attention_then_more(*arguments)
    assert torch.equal(got_out, want_out) and torch.equal(got_lse, want_lse)


def test_fake_implementation_passes_opcheck(case):
    q = case["q"]
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:2], dtype=torch.float32)
    arguments = (q, case["k"], case["v"], case["q2k_indices"], case["cu_seqlens_q"],
                 case["cu_seqlens_k"], None, None, None, None, None, None, True,
                 q.shape[-1] ** -0.5, 1.0, 1.0, 1.0, 0, out, lse, None)
    torch.library.opcheck(torch.ops.flashmsa.msa_sparse_attention.default, arguments)


def test_workspace_gives_the_same_result_and_grows(case):
    workspace = flashmsa.MSASparseAttentionWorkspace("cpu")
    assert workspace.nbytes == 0 and workspace.device == torch.device("cpu")
    expected = flashmsa.msa_sparse_attention(**case)
    assert torch.equal(flashmsa.msa_sparse_attention(**case, workspace=workspace), expected)
    buffer = workspace.reserve(4096)
    assert workspace.nbytes == 4096 and buffer.dtype == torch.uint8
    assert workspace.reserve(100) is buffer, "a large enough workspace must not reallocate"
    assert torch.equal(flashmsa.msa_sparse_attention(**case, workspace=workspace), expected)


def test_workspace_never_grows_during_graph_capture(monkeypatch):
    workspace = flashmsa.MSASparseAttentionWorkspace("cpu")
    workspace.reserve(1024)
    monkeypatch.setattr(workspace_module, "_capturing", lambda device: True)
    assert workspace.reserve(512).numel() == 1024  # big enough: fine while capturing
    with pytest.raises(RuntimeError, match="warm it"):
        workspace.reserve(4096)
    assert workspace.nbytes == 1024


def test_supports_packed_kv_on_cpu():
    assert flashmsa.supports_packed_kv("cpu") is True
    assert flashmsa.supports_packed_kv(torch.device("cpu")) is True
    assert flashmsa.supports_packed_kv("meta") is False


def test_library_reports_its_build():
    assert isinstance(flashmsa.has_cuda(), bool)
