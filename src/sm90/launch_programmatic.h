// Kernel launches with programmatic dependent launch (PDL): the kernel may be scheduled before
// the previous kernel of the stream has finished, and calls griddepcontrol.wait before it reads
// or writes global memory. That hides the launch latency between back-to-back kernels (our split
// kernel and its merge, consecutive calls in a decode graph). Stream capture records the
// programmatic edge, so CUDA graphs keep it.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "sm90/kernel_traits.h"
#include "sm90/params.h"

namespace flashmsa::sm90 {

// Once per device and kernel: more than 48 KiB of shared memory, and clusters past the portable
// size of 8 (decode's KV splits, kMaxClusterSplits).
template <typename Kernel>
cudaError_t configure_kernel(Kernel kernel) {
  cudaError_t status = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            kSharedMemoryLimit);
  if (status != cudaSuccess) return status;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
}

// configure_kernel on the current device, unless `configured_device` (the caller's static,
// one per kernel and thread) says it was done there.
template <typename Kernel>
cudaError_t configure_kernel_once(Kernel kernel, int& configured_device) {
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  if (configured_device == device) return cudaSuccess;
  status = configure_kernel(kernel);
  if (status == cudaSuccess) configured_device = device;
  return status;
}

// How many thread-block clusters of `cluster_size` CTAs of `kernel` (`threads` threads and
// `shared_bytes` of dynamic shared memory each) the current device holds at once; 0 if the
// query fails (its failure is not left as the caller's sticky error).
template <typename Kernel>
int max_active_clusters(Kernel kernel, int threads, uint32_t shared_bytes, int cluster_size) {
  if (configure_kernel(kernel) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = static_cast<unsigned>(cluster_size);
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(cluster_size));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = shared_bytes;
  config.attrs = &attribute;
  config.numAttrs = 1;
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return clusters;
}

// cluster_size > 1 also groups consecutive blocks along x into thread-block clusters of that
// size (grid.x must be a multiple of it).
template <typename... KernelArgs, typename... Args>
cudaError_t launch_programmatic(void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                                size_t shared_bytes, cudaStream_t stream, unsigned cluster_size,
                                Args&&... args) {
  cudaLaunchAttribute attributes[2];
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  attributes[1].val.clusterDim.x = cluster_size;
  attributes[1].val.clusterDim.y = 1;
  attributes[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = cluster_size > 1 ? 2 : 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// One of the attention kernels (prefill_kernel, decode_kernel): configured once per device
// (`configured_device`: the caller's static for this kernel), its shared memory from the
// params' layout, its KV splits as one cluster when they reduce in it.
template <typename Kernel>
cudaError_t launch_attention_kernel(Kernel kernel, int& configured_device,
                                    const AttentionParams& params, dim3 grid, unsigned threads,
                                    cudaStream_t stream) {
  const cudaError_t status = configure_kernel_once(kernel, configured_device);
  if (status != cudaSuccess) return status;
  const uint32_t shared_bytes = params.smem_layout.bytes + kSharedMemoryAlignmentSlack;
  const unsigned cluster_size = params.cluster_reduce ? static_cast<unsigned>(params.num_splits) : 1u;
  return launch_programmatic(kernel, grid, dim3(threads), shared_bytes, stream, cluster_size,
                             params);
}

}  // namespace flashmsa::sm90
