import sys
sys.path.insert(0, "scripts")
import kernel_smoke as ks
import torch
import flashmsa

for batch, tokens in ((128, 1), (1, 1)):
    args = ks.decode_case(batch, tokens, 32768)
    for i in range(4):
        print(f"=== b{batch} t{tokens} call {i}", flush=True)
        flashmsa.msa_sparse_attention(**args)
        torch.cuda.synchronize()
