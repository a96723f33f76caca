"""fp8 E4M3 and NVFP4 K/V on the GPU, one case of each layout and q dtype. A format the kernels
support (GPU_SUPPORTED_KV) is checked against the CPU backend and the fp64 reference
(test_gpu_fp8_kv.py holds the full fp8 suite); one they do not yet support must raise
NotImplementedError with a message that names the format and says what is supported."""
import re

import pytest

from gpu_harness import DTYPES, check_gpu_result, dtype_id, make_case, run_gpu

# The K/V formats the Hopper kernels run: fp8 E4M3 does; NVFP4 raises NotImplementedError until
# its kernels land (then flip its entry).
GPU_SUPPORTED_KV = {"fp8": True, "nvfp4": False}


@pytest.mark.kv_quant_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("layout", ["flat", "paged"])
@pytest.mark.parametrize("kv_dtype", ["fp8", "nvfp4"])
def test_quantized_kv(kv_dtype, layout, dtype):
    name = f"kv-{kv_dtype}-{layout}-{dtype_id(dtype)}"
    case = make_case(name, [120, 33], [2000, 700], 16, 2, 16, True, dtype=dtype, seed=101,
                     kv_dtype=kv_dtype, layout=layout)
    if GPU_SUPPORTED_KV[kv_dtype]:
        check_gpu_result(case, run_gpu(case))
        return
    with pytest.raises(NotImplementedError) as raised:
        run_gpu(case)
    message = str(raised.value)
    # The message names the K/V format refused and what the GPU does run.
    assert re.search(r"float8|fp8|e4m3|uint8|nvfp4", message, re.I), (
        f"[{name}] NotImplementedError does not name the K/V format: {message!r}")
    assert re.search(r"bfloat16|float16|q's dtype", message), (
        f"[{name}] NotImplementedError does not say what is supported: {message!r}")
