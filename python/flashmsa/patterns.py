"""Block-selection patterns used by benchmarks and tests (contract section 10).

    q2k = make_q2k("random", [4096], [4096], num_kv_heads=4, topk=16, device="cuda")

Each pattern gives, for every (KV head, query row), `topk` request-local block ids with the
query's own block always among them (first). A row that sees fewer than `topk` blocks takes all
of them, padded with -1. Everything is vectorised over rows, so S = 131072 with Hkv = 4 takes
seconds on a GPU.

- random: the other topk-1 blocks uniform among the visible ones (little overlap between
  neighbouring queries);
- clustered: each 64-token window shares one random set, each token then swaps 2 of its blocks
  (much overlap);
- indexer: top-k of per-block max scores of a smooth random walk of index vectors (an
  indexer-like middle ground: recent blocks and a few far ones that happen to match).
"""
import torch

BLOCK_SIZE = 128
PATTERNS = ("random", "clustered", "indexer")

_CLUSTER_WINDOW = 64  # tokens sharing one selection in the clustered pattern
_CLUSTER_SWAPS = 2  # blocks each token of a window replaces
_INDEX_DIM = 32  # width of the indexer pattern's index vectors
_INDEX_SAMPLE_STRIDE = 16  # the walk is sampled every 16 tokens: 8 samples per block
# Noise on the walk for keys and queries: tuned so that the distinct blocks per tile of 8..128
# consecutive tokens (S = 32768, topk 16) fall between random and clustered, near the figures
# of shared/design/performance.md.
_KEY_NOISE = 0.5
_QUERY_NOISE = 0.2
_ROWS_PER_SCORE_CHUNK = 2048  # rows scored at once by the indexer pattern (bounds memory)


class _Rows:
    """Per query row (of all requests, in q order): request, own block, visible block count."""

    def __init__(self, seqlens_q, seqlens_k, causal, q_offsets, device):
        device = torch.device(device)
        seqlens_q = torch.as_tensor(seqlens_q, dtype=torch.int64).reshape(-1)
        seqlens_k = torch.as_tensor(seqlens_k, dtype=torch.int64).reshape(-1)
        if seqlens_q.numel() != seqlens_k.numel():
            raise ValueError("seqlens_q and seqlens_k must have one entry per request")
        batch_size = seqlens_q.numel()
        if q_offsets is None:
            first_position = seqlens_k - seqlens_q  # end-aligned, contract section 5
        elif isinstance(q_offsets, int):
            first_position = torch.full((batch_size,), q_offsets, dtype=torch.int64)
        else:
            first_position = torch.as_tensor(q_offsets, dtype=torch.int64).reshape(-1)
            if first_position.numel() != batch_size:
                raise ValueError("q_offsets must have one entry per request")
        self.request = torch.repeat_interleave(
            torch.arange(batch_size), seqlens_q).to(device)
        starts = torch.cumsum(seqlens_q, 0) - seqlens_q
        local = torch.arange(int(seqlens_q.sum()), device=device) - starts.to(device)[self.request]
        self.total_q = local.numel()
        self.seqlen_k = seqlens_k.to(device)[self.request]
        self.position = first_position.to(device)[self.request] + local
        total_blocks = (self.seqlen_k + BLOCK_SIZE - 1) // BLOCK_SIZE
        if causal:
            # Blocks holding keys <= position; a negative position sees nothing.
            visible_keys = torch.minimum(self.seqlen_k, (self.position + 1).clamp(min=0))
            self.visible = (visible_keys + BLOCK_SIZE - 1) // BLOCK_SIZE
        else:
            self.visible = total_blocks
        # Without causality the "own" block is where the position falls, kept inside the keys.
        self.own = torch.minimum(self.position.clamp(min=0) // BLOCK_SIZE,
                                 (self.visible - 1).clamp(min=0))
        self.local = local
        self.device = device


def _fill_distinct(selection, visible, generator, max_rounds=64):
    """Replace every -1 of selection (rows, topk) by distinct random blocks in [0, visible).

    Rows must have visible > topk. Columns are filled one after the other by rejection sampling;
    rows still unlucky after max_rounds (only when visible is barely above topk) are finished
    from a random permutation of their visible blocks.
    """
    rows, topk = selection.shape
    for column in range(topk):
        pending = selection[:, column] < 0
        for _ in range(max_rounds):
            index = pending.nonzero().squeeze(1)
            if index.numel() == 0:
                break
            draw = (torch.rand(index.numel(), generator=generator, device=selection.device)
                    * visible[index]).long()
            fresh = ~(selection[index] == draw.unsqueeze(1)).any(1)
            selection[index[fresh], column] = draw[fresh]
            pending[index[fresh]] = False
        index = pending.nonzero().squeeze(1)
        if index.numel():
            width = int(visible[index].max())
            keys = torch.rand(index.numel(), width, generator=generator, device=selection.device)
            candidates = torch.arange(width, device=selection.device)
            taken = (selection[index].unsqueeze(2) == candidates).any(1)
            keys[taken | (candidates >= visible[index].unsqueeze(1))] = 2.0
            selection[index, column] = keys.argmin(1)
    return selection


def _select_all_visible(rows, topk):
    """Rows that see at most topk blocks take them all, padded with -1; the own block first."""
    blocks = torch.arange(topk, device=rows.device).expand(rows.total_q, topk)
    # Put the own block first by swapping it with block 0.
    own = rows.own.unsqueeze(1)
    blocks = torch.where(blocks == own, 0, torch.where(blocks == 0, own, blocks))
    return torch.where(torch.arange(topk, device=rows.device) < rows.visible.unsqueeze(1),
                       blocks, -1)


def _random(rows, topk, generator):
    selection = torch.full((rows.total_q, topk), -1, dtype=torch.int64, device=rows.device)
    selection[:, 0] = rows.own
    many = rows.visible > topk
    selection[many] = _fill_distinct(selection[many], rows.visible[many], generator)
    return selection


def _clustered(rows, topk, generator):
    # One shared random list per (request, 64-token window).
    window = rows.request * (1 << 40) + rows.local // _CLUSTER_WINDOW
    _, window_id = torch.unique(window, return_inverse=True)
    num_windows = int(window_id.max()) + 1 if rows.total_q else 0
    # The window's set: topk - 1 blocks among those every row of the window sees (a repeat
    # becomes a hole, filled per token below).
    slot_keys = torch.rand(num_windows, topk - 1, generator=generator, device=rows.device)
    selection = torch.full((rows.total_q, topk), -1, dtype=torch.int64, device=rows.device)
    selection[:, 0] = rows.own
    window_visible = torch.zeros(num_windows, dtype=torch.int64, device=rows.device)
    window_visible.scatter_reduce_(0, window_id, rows.visible, "amin", include_self=False)
    window_blocks = (slot_keys * window_visible.unsqueeze(1)).long()
    candidates = window_blocks[window_id]  # (rows, topk - 1)
    # Keep each shared block once and never the row's own block; holes are filled randomly.
    candidates = torch.where(candidates == rows.own.unsqueeze(1), -1, candidates)
    ordered, order = torch.sort(candidates, dim=1)
    repeated = torch.zeros_like(ordered, dtype=torch.bool)
    repeated[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
    duplicate = torch.zeros_like(repeated).scatter_(1, order, repeated)
    candidates = torch.where(duplicate, -1, candidates)
    # Each token swaps _CLUSTER_SWAPS of the shared blocks for blocks of its own choice.
    swap_keys = torch.rand(rows.total_q, topk - 1, generator=generator, device=rows.device)
    swapped = swap_keys.argsort(1)[:, :_CLUSTER_SWAPS]
    candidates.scatter_(1, swapped, -1)
    selection[:, 1:] = candidates
    many = rows.visible > topk
    selection[many] = _fill_distinct(selection[many], rows.visible[many], generator)
    return selection


def _indexer(rows, topk, generator):
    selection = torch.full((rows.total_q, topk), -1, dtype=torch.int64, device=rows.device)
    many = (rows.visible > topk).nonzero().squeeze(1)
    if many.numel() == 0:
        return selection
    # One smooth random walk of index vectors per request, sampled every 16 tokens: queries
    # and keys at nearby positions look alike, far ones only by chance.
    requests = rows.request[many]
    for request in torch.unique(requests).tolist():
        members = many[requests == request]
        seqlen_k = int(rows.seqlen_k[members[0]])
        samples = (seqlen_k + _INDEX_SAMPLE_STRIDE - 1) // _INDEX_SAMPLE_STRIDE
        samples_per_block = BLOCK_SIZE // _INDEX_SAMPLE_STRIDE
        num_blocks = (samples + samples_per_block - 1) // samples_per_block
        steps = torch.randn(num_blocks * samples_per_block, _INDEX_DIM, generator=generator,
                            device=rows.device)
        walk = torch.cumsum(steps, 0)
        walk = walk / walk.norm(dim=1, keepdim=True)
        key_vectors = walk + _KEY_NOISE * torch.randn(walk.shape, generator=generator,
                                               device=rows.device)
        # Samples past the last key never win the block maximum.
        sample_valid = torch.arange(walk.shape[0], device=rows.device) < samples
        for start in range(0, members.numel(), _ROWS_PER_SCORE_CHUNK):
            chunk = members[start:start + _ROWS_PER_SCORE_CHUNK]
            sample = (rows.position[chunk].clamp(0, seqlen_k - 1)) // _INDEX_SAMPLE_STRIDE
            query_vectors = walk[sample] + _QUERY_NOISE * torch.randn(
                chunk.numel(), _INDEX_DIM, generator=generator, device=rows.device)
            scores = query_vectors @ key_vectors.T
            scores = scores.masked_fill(~sample_valid, -torch.inf)
            block_scores = scores.view(chunk.numel(), num_blocks, samples_per_block).amax(2)
            blocks = torch.arange(num_blocks, device=rows.device)
            block_scores = block_scores.masked_fill(
                blocks >= rows.visible[chunk].unsqueeze(1), -torch.inf)
            # The own block always wins: it sorts first.
            block_scores.scatter_(1, rows.own[chunk].unsqueeze(1), torch.inf)
            selection[chunk] = block_scores.topk(topk, dim=1).indices
    return selection


def make_q2k(pattern, seqlens_q, seqlens_k, num_kv_heads, topk, causal=True, q_offsets=None,
             seed=0, device="cpu"):
    """q2k_indices for the given requests: int32 (num_kv_heads, total_q, topk), contiguous.

    seqlens_q, seqlens_k: per-request query and key lengths. q_offsets: None (end-aligned),
    an int, or one value per request (contract section 5). Every KV head draws its own
    selection; the same seed gives the same indices on the same device.
    """
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {PATTERNS}, got {pattern!r}")
    if topk < 1:
        raise ValueError(f"topk must be >= 1, got {topk}")
    rows = _Rows(seqlens_q, seqlens_k, causal, q_offsets, device)
    generator = torch.Generator(device=rows.device)
    generator.manual_seed(seed)
    build = {"random": _random, "clustered": _clustered, "indexer": _indexer}[pattern]
    all_visible = _select_all_visible(rows, topk)
    few = (rows.visible <= topk).unsqueeze(1)
    heads = []
    for _ in range(num_kv_heads):
        selection = build(rows, topk, generator) if topk > 1 else rows.own.unsqueeze(1).clone()
        selection = torch.where(few, all_visible, selection)
        heads.append(selection.to(torch.int32))
    return torch.stack(heads)
