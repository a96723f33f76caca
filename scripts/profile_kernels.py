"""One MiniMax-M3 decode call and one prefill call, for `ncu` to profile (scripts/profile.sh).

    python3 scripts/profile_kernels.py [decode|decode1|decode16|mtp|prefill|both]

PROFILE_KV=fp8 or nvfp4 stores the cases' K/V in that format (default q's dtype, bf16).
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import flashmsa  # noqa: E402
from kernel_smoke import decode_case, make_case  # noqa: E402


def main():
    which = sys.argv[1] if len(sys.argv) > 1 else "both"
    kv = os.environ.get("PROFILE_KV") or None
    cases = []
    if which in ("decode", "both"):
        cases.append(decode_case(64, 1, 32768, kv_dtype=kv))
    if which == "decode1":  # batch 1: planning and fixed costs are most of the kernel
        cases.append(decode_case(1, 1, 32768, kv_dtype=kv))
    if which == "decode16":  # batch 16: two splits, one CTA per SM on 128 SMs
        cases.append(decode_case(16, 1, 32768, kv_dtype=kv))
    if which == "mtp":  # 8 query tokens per request, batch 32
        cases.append(decode_case(32, 8, 32768, kv_dtype=kv))
    if which in ("prefill", "both"):
        cases.append(make_case(1, 64, 4, 16, [8192], [8192], True, pattern="random", kv_dtype=kv))
    for args in cases:
        flashmsa.msa_sparse_attention(**args)  # warm-up (module load, attributes)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        flashmsa.msa_sparse_attention(**args)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


if __name__ == "__main__":
    main()
