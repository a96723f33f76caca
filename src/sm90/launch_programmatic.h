// Kernel launches with programmatic dependent launch (PDL): the kernel may be scheduled before
// the previous kernel of the stream has finished, and calls griddepcontrol.wait before it reads
// or writes global memory. That hides the launch latency between back-to-back kernels (our split
// kernel and its merge, consecutive calls in a decode graph). Stream capture records the
// programmatic edge, so CUDA graphs keep it.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace flashmsa::sm90 {

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

}  // namespace flashmsa::sm90
