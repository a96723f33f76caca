# The Hopper kernels: sm_90a only (wgmma and setmaxnreg need the "a" target, and the
# -arch=sm_90a shorthand is not enough), CUDA runtime linked statically so the library loads
# next to any PyTorch, CuTe/CUTLASS headers from the nvidia-cutlass PyPI wheel.
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
set_target_properties(flashmsa PROPERTIES CUDA_ARCHITECTURES OFF)  # -gencode below

set(FLASHMSA_CUTLASS_DIR "" CACHE PATH "Root holding cutlass/ and cute/ headers")
if(NOT FLASHMSA_CUTLASS_DIR)
  find_package(Python3 COMPONENTS Interpreter REQUIRED)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c
      "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))"
    OUTPUT_VARIABLE FLASHMSA_CUTLASS_DIR OUTPUT_STRIP_TRAILING_WHITESPACE
    RESULT_VARIABLE cutlass_found)
  if(NOT cutlass_found EQUAL 0 OR NOT EXISTS "${FLASHMSA_CUTLASS_DIR}/cute/tensor.hpp")
    message(FATAL_ERROR "CUTLASS headers not found: pip install nvidia-cutlass==4.2.0.0 "
                        "or set FLASHMSA_CUTLASS_DIR")
  endif()
endif()
message(STATUS "flashmsa: sm_90a kernels on, CUTLASS headers in ${FLASHMSA_CUTLASS_DIR}")

find_package(CUDAToolkit REQUIRED)
target_sources(flashmsa PRIVATE
  src/sm90/launch.cu
  src/sm90/prefill_bf16.cu
  src/sm90/prefill_fp16.cu
  src/sm90/prefill_bf16_fp8.cu
  src/sm90/prefill_fp16_fp8.cu
  src/sm90/prefill_bf16_fp8_scaled.cu
  src/sm90/prefill_fp16_fp8_scaled.cu
  src/sm90/prefill_bf16_nvfp4.cu
  src/sm90/prefill_fp16_nvfp4.cu
  src/sm90/decode_bf16.cu
  src/sm90/decode_fp16.cu
  src/sm90/decode_bf16_fp8.cu
  src/sm90/decode_fp16_fp8.cu
  src/sm90/decode_bf16_fp8_scaled.cu
  src/sm90/decode_fp16_fp8_scaled.cu
  src/sm90/decode_bf16_nvfp4.cu
  src/sm90/decode_fp16_nvfp4.cu
  src/sm90/merge.cu
)
target_include_directories(flashmsa PRIVATE ${FLASHMSA_CUTLASS_DIR} ${CUDAToolkit_INCLUDE_DIRS}
                                            ${CUDAToolkit_INCLUDE_DIRS}/cccl)
target_compile_definitions(flashmsa PRIVATE FLASHMSA_WITH_CUDA=1
                                    $<$<BOOL:${FLASHMSA_TIMELINE}>:FLASHMSA_TIMELINE=1>)
target_compile_options(flashmsa PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr
    -Xcompiler=-fvisibility=hidden -lineinfo $<$<BOOL:${FLASHMSA_PTXAS_VERBOSE}>:-Xptxas=-v>>)
target_link_libraries(flashmsa PRIVATE CUDA::cudart_static)
