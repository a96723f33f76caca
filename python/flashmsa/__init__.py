"""FlashMSA: MiniMax Sparse Attention forward for PyTorch, on Hopper GPUs and on the CPU.

    import flashmsa
    out = flashmsa.msa_sparse_attention(q, k, v, q2k_indices, cu_seqlens_q, cu_seqlens_k,
                                        causal=True)

The contract is shared/spec/msa_sparse_attention.md. The native library is loaded on first use
(FLASHMSA_LIBRARY, else the copy installed with this package).
"""
from . import integrations, patterns
from ._lib import has_cuda
from .api import msa_sparse_attention, supports_packed_kv
from .merge import merge_attention_states
from .workspace import MSASparseAttentionWorkspace

__version__ = "0.1.0"

__all__ = ["MSASparseAttentionWorkspace", "has_cuda", "integrations", "merge_attention_states",
           "msa_sparse_attention", "patterns", "supports_packed_kv"]
