"""Drop-in front ends with the signatures of other libraries' sparse-attention ops.

- `flashmsa.integrations.vllm`: vLLM's MiniMax-M3 ops `minimax_m3_sparse_attn` (prefill) and
  `minimax_m3_sparse_attn_decode` (decode), on vLLM's packed K|V paged cache.

Each maps its arguments onto `flashmsa.msa_sparse_attention` without copying the KV cache and
without a host synchronisation, so it can be captured in a CUDA graph.
"""
from . import vllm

__all__ = ["vllm"]
