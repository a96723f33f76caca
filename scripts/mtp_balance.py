"""What multi-token prediction would take if every (request, KV head) had the same union size:
the ceiling of balancing its CTAs' work (docs/performance.md, sixteenth session). Run on the
GPU machine:

    FLASHMSA_LIBRARY=build-gpu/libflashmsa.so PYTHONPATH=python:scripts \\
        python3 scripts/mtp_balance.py [--batch 32] [--sets 4]

For each input set it times the `random` selection (kernel_smoke.decode_case), then the same
shapes with indices rebuilt so that every unit's union has the same number of distinct blocks
(the random selection's mean, rounded), each chosen uniformly and every entry one of them, and
prints both times with their union-size spread and KV bytes (contract section 10). The indices
are built on the device, as the benchmark's are, and the union sizes counted from them
(bench/selection.py, through kernel_smoke.union_sizes).
"""
import argparse

import torch

from kernel_smoke import BLOCK, decode_case, kv_bytes, time_graph, union_sizes

TOKENS, KV_LENGTH = 8, 32768


def balanced_indices(indices, batch, size, generator):
    """The same shape as `indices`, every unit's entries drawn from `size` distinct blocks, each
    of which appears at least once."""
    hkv, rows, topk = indices.shape
    entries = rows // batch * topk
    blocks = KV_LENGTH // BLOCK
    out = torch.empty(hkv, batch, entries, dtype=indices.dtype, device=indices.device)
    for h in range(hkv):
        for b in range(batch):
            chosen = torch.randperm(blocks, generator=generator, device=indices.device)[:size]
            repeats = chosen[torch.randint(0, size, (entries - size,), generator=generator,
                                           device=indices.device)]
            row = torch.cat([chosen, repeats])
            out[h, b] = row[torch.randperm(entries, generator=generator, device=indices.device)]
    return out.reshape(hkv, rows, topk)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--sets", type=int, default=4)
    options = parser.parse_args()
    generator = torch.Generator(device="cuda").manual_seed(1234)
    random_sets = [decode_case(options.batch, TOKENS, KV_LENGTH, seed=s)
                   for s in range(options.sets)]
    balanced_sets = []
    for args in random_sets:
        sizes = union_sizes(args)
        mean = int(round(sizes.double().mean().item()))
        balanced = dict(args)
        balanced["q2k_indices"] = balanced_indices(args["q2k_indices"], options.batch, mean,
                                                   generator)
        check = union_sizes(balanced)
        print(f"set: random unions {sizes.min().item()}-{sizes.max().item()} "
              f"(mean {sizes.double().mean().item():.1f}); balanced {check.min().item()}-"
              f"{check.max().item()}", flush=True)
        balanced_sets.append(balanced)
    for name, sets in (("random", random_sets), ("balanced", balanced_sets),
                       ("random", random_sets), ("balanced", balanced_sets)):
        seconds = time_graph(sets)
        gbytes = sum(kv_bytes(args) for args in sets) / len(sets)
        print(f"mtp b{options.batch} t{TOKENS} kv{KV_LENGTH} {name:8s} {seconds * 1e6:8.1f} us "
              f"{gbytes / seconds / 1e12:6.3f} TB/s", flush=True)


if __name__ == "__main__":
    main()
