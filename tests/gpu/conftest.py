"""pytest setup for the GPU suite (run on the GPU machine by scripts/gpu_check.sh).

Puts tests/ (the independent reference, torch_reference.py), tests/python/ (the case builder
shared with the CPU suite, msa_inputs.py) and python/ (the flashmsa package, when it is not
installed) on sys.path, and skips every test here, with the reason, unless a CUDA device of
compute capability 9.0 is present. Collection never touches the GPU, so `pytest --collect-only`
works anywhere.
"""
import contextlib
import os
import sys

import pytest

GPU_DIR = os.path.dirname(os.path.abspath(__file__))
TESTS_DIR = os.path.dirname(GPU_DIR)
REPO_DIR = os.path.dirname(TESTS_DIR)
for path in (TESTS_DIR, os.path.join(TESTS_DIR, "python")):
    if path not in sys.path:
        sys.path.insert(0, path)
# Last, so that an installed flashmsa or PYTHONPATH=python wins.
if os.path.join(REPO_DIR, "python") not in sys.path:
    sys.path.append(os.path.join(REPO_DIR, "python"))


def _skip_reason():
    import torch

    if not torch.cuda.is_available():
        return "tests/gpu needs a CUDA device of compute capability 9.0 (Hopper); none is visible"
    capability = torch.cuda.get_device_capability()
    if capability != (9, 0):
        return (f"tests/gpu needs compute capability 9.0 (Hopper); "
                f"{torch.cuda.get_device_name()} is {capability[0]}.{capability[1]}")
    return None


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "kv_quant_gpu: fp8 E4M3 and NVFP4 K/V on the GPU, both run by the Hopper "
        "kernels (test_gpu_fp8_kv.py, test_gpu_nvfp4_kv.py, and test_gpu_quantized_kv.py's one "
        "case of each format, layout and q dtype)")


def pytest_collection_modifyitems(config, items):
    reason = _skip_reason()
    if reason is None:
        return
    marker = pytest.mark.skip(reason=reason)
    for item in items:
        if str(item.path).startswith(GPU_DIR + os.sep):
            item.add_marker(marker)


@pytest.fixture
def launch_overrides():
    """override(**fields): test-only overrides of the launch plan (flashmsa.testing) for the rest
    of the test; later calls add to earlier ones."""
    import flashmsa.testing

    with contextlib.ExitStack() as stack:
        def override(**fields):
            stack.enter_context(flashmsa.testing.launch_overrides(**fields))
        yield override
