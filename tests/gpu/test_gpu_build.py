"""The library under test is the one with the Hopper kernels: without them every other GPU test
would fail with NotImplementedError, so say so first (this file runs first)."""
import os

import torch

import flashmsa


def test_library_has_hopper_kernels():
    library = os.environ.get("FLASHMSA_LIBRARY", "(the copy installed with the package)")
    assert flashmsa.has_cuda(), (
        f"[build] {library} was built without the sm_90a kernels (no nvcc at build time): "
        "build it with nvcc (scripts/build_gpu.sh) and point FLASHMSA_LIBRARY at it")


def test_device_is_hopper():
    capability = torch.cuda.get_device_capability()
    assert capability == (9, 0), f"[build] {torch.cuda.get_device_name()} is {capability}"
    assert flashmsa.supports_packed_kv("cuda"), "[build] supports_packed_kv('cuda') is False"
