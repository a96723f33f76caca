# union sizes per (request, KV head) of kernel_smoke.decode_case(32, 8, 32768) as built on the GPU (the timeline's inputs)
import sys
sys.path[:0] = ["python", "scripts"]
import kernel_smoke as ks
args = ks.decode_case(32, 8, 32768)
idx = args["q2k_indices"].cpu()
for h in range(idx.shape[0]):
    print("union", h, " ".join(str(len(set(x for x in idx[h, b * 8:(b + 1) * 8].flatten().tolist() if x >= 0))) for b in range(32)))
