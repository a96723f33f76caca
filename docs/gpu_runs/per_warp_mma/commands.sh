# On the H200, one call: the probe of commit 753aad0 (reverted by 0325958) against 0fdd84f's library
# (prefill_base.log), every production case and M3 at 8K/32K/128K; wgmma_min_warps=N computes a
# block by wgmma when at least N of a warpgroup's warps' rows selected it, else by the
# selecting warps with mma.sync (1: every block by wgmma, 5: none). Then the contract and
# layout tests on the probe build (tests.log: 134 passed).
export PYTHONPATH=python PYTHONUNBUFFERED=1
B="python3 -m bench.prefill --quick --sizes 8192,32768,131072 --impls msa --production-impls msa"
FLASHMSA_LIBRARY=build-gpu/base/libflashmsa.so $B > prefill_base.log
for w in 1 3 4 5 2; do
  FLASHMSA_LIBRARY=build-gpu/libflashmsa.so $B --launch-overrides wgmma_min_warps=$w > prefill_w$w.log
done
