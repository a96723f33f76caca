"""fp8 E4M3 and NVFP4 K/V on the GPU, one case of each layout and q dtype: both formats run on
the Hopper kernels (GPU_SUPPORTED_KV), each result checked against the CPU backend and the fp64
reference. test_gpu_fp8_kv.py and test_gpu_nvfp4_kv.py hold the full suites of each format."""
import pytest

from gpu_harness import DTYPES, check_gpu_result, dtype_id, make_case, run_gpu

# The K/V formats the Hopper kernels run: fp8 E4M3 and NVFP4 both do, so no format is left to
# raise NotImplementedError on CUDA.
GPU_SUPPORTED_KV = {"fp8": True, "nvfp4": True}


@pytest.mark.kv_quant_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize("layout", ["flat", "paged"])
@pytest.mark.parametrize("kv_dtype", sorted(GPU_SUPPORTED_KV))
def test_quantized_kv(kv_dtype, layout, dtype):
    name = f"kv-{kv_dtype}-{layout}-{dtype_id(dtype)}"
    assert GPU_SUPPORTED_KV[kv_dtype], f"[{name}] every K/V format must run on the GPU"
    case = make_case(name, [120, 33], [2000, 700], 16, 2, 16, True, dtype=dtype, seed=101,
                     kv_dtype=kv_dtype, layout=layout)
    check_gpu_result(case, run_gpu(case))
