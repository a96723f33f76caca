import os, sys
sys.argv = ["x"]
sys.path.insert(0, "scripts")
import kernel_smoke as ks
import torch
cases = [(1,1,32768),(16,1,32768),(64,1,32768),(128,1,32768),(64,1,131072),(32,8,32768)]
for batch, tokens, kv in cases:
    args = ks.decode_case(batch, tokens, kv)
    gb = ks.kv_bytes(args)
    row = []
    for splits in ["auto", "1", "2", "3", "4", "6", "8", "16", "32"]:
        if splits == "auto":
            os.environ.pop("FLASHMSA_EXPERIMENT_SPLITS", None)
        else:
            os.environ["FLASHMSA_EXPERIMENT_SPLITS"] = splits
        t = ks.time_graph(args)
        row.append(f"{splits}:{t*1e6:6.1f}us/{gb/t/1e12:4.2f}")
    print(f"b{batch} t{tokens} kv{kv}: " + "  ".join(row), flush=True)
