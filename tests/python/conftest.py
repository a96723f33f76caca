"""pytest setup for the CPU suite: tests/ on sys.path, so that the independent reference
(tests/torch_reference.py) imports as `torch_reference`."""
import os
import sys

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

import torch  # noqa: E402

# The reference's torch ops are many and small: on one thread they neither pay for waking
# others nor stall when the machine is busy (CI has two cores, shared with the library's own
# worker threads).
torch.set_num_threads(1)
