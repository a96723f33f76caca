"""Caller-owned scratch memory for msa_sparse_attention (contract section 9)."""
import itertools
import weakref

import torch

# The custom op cannot take a Python object, so a workspace is passed to it by id and found
# here. Weak references: a workspace lives exactly as long as its owner keeps it.
_registry = weakref.WeakValueDictionary()
_next_id = itertools.count(1)


class MSASparseAttentionWorkspace:
    """Scratch memory (planning metadata, split partials) owned by the caller.

    It grows on eager calls and never during CUDA-graph capture: to capture, warm it once
    eagerly with the same shapes and options. Without a workspace, every call takes its scratch
    from PyTorch's caching allocator on the current stream instead.
    """

    def __init__(self, device):
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        self.buffer = torch.empty(0, dtype=torch.uint8, device=device)
        self.id = next(_next_id)
        _registry[self.id] = self

    @property
    def nbytes(self):
        return self.buffer.numel()

    def reserve(self, nbytes):
        """The buffer, grown to at least nbytes first when needed (never while capturing)."""
        if nbytes > self.buffer.numel():
            if _capturing(self.device):
                raise RuntimeError(
                    f"MSASparseAttentionWorkspace holds {self.buffer.numel()} bytes but this call "
                    f"needs {nbytes}, and it cannot grow during CUDA-graph capture: warm it with "
                    "one eager call of the same shapes and options before capturing")
            # Drop the old buffer first so the allocator can reuse its memory.
            self.buffer = torch.empty(0, dtype=torch.uint8, device=self.device)
            self.buffer = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        return self.buffer

    def __repr__(self):
        return f"MSASparseAttentionWorkspace(device={str(self.device)!r}, nbytes={self.nbytes})"


def _capturing(device):
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def find_workspace(workspace_id):
    """The workspace of that id, or None (id 0, or a workspace its owner has dropped since a
    compiled graph recorded its id: the call then takes scratch from the allocator)."""
    return _registry.get(workspace_id)
