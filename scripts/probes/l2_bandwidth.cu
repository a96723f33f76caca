// Diagnostic, not part of the library: how fast the SMs can pull random 32 KiB K or V blocks into
// shared memory when the blocks sit in L2, the ceiling of a prefill design's block loads (a
// prefill tile reads its union of blocks from L2, since neighbouring tiles of a KV head share
// them). The same rows over a 4 GiB span read from DRAM, for reference.
//
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -Isrc -o build-gpu/l2_bandwidth \
//       scripts/probes/l2_bandwidth.cu
//   build-gpu/l2_bandwidth
//
// Each CTA (one or two per SM) has one thread that keeps `stages` 32 KiB bulk copies
// (cp.async.bulk, as the kernels' TMA loads a contiguous piece) in flight into a ring of shared
// memory, each from a pseudo-random 32 KiB-aligned block of a buffer of `span` bytes, for a
// fixed number of copies; nothing consumes the data. The call is timed with events after a
// warm-up call that also brings a small span into L2; reported: bytes copied / time.
//
// Result (H200, docs/gpu_runs/l2_bandwidth/): spans of 8-40 MiB stream 8.5-9.4 TB/s into
// shared memory with every SM (64 KiB in flight per SM 8.5-8.9, 128-192 KiB 8.9-9.4); a 4 GiB
// span, from DRAM, 4.7 TB/s at every depth. With fewer SMs each gets 99 GB/s at 128 KiB in
// flight, against 69 with all 132: the L2's output, not an SM's intake, stops the full grid.
// Multicast clusters (this file's protocol: a slice of each block per CTA, remote arrivals on
// every CTA's empty barrier) landed less than independent loads: clusters of 2 put 6.3 TB/s
// into shared memory from 3.2 TB/s of L2 reads, of 4 3.2 from 0.8 (multicast.log); with
// release-ordered remote arrivals 3.8 and 1.5. They cut what L2 sends, not the time.
// (l2_bandwidth.log holds the rows before the multicast ones; multicast.log the latter.)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "probe_common.cuh"

using namespace flashmsa::sm90;

constexpr uint32_t kBlockBytes = 32 * 1024;
constexpr int kMostStages = 6;

struct Probe {
  const uint8_t* buffer;
  uint64_t blocks;  // 32 KiB blocks in the span
  int stages;
  int copies;  // per CTA
};

__device__ __forceinline__ uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void __launch_bounds__(32) pull_blocks(const Probe p) {
  extern __shared__ __align__(1024) uint8_t ring[];
  __shared__ uint64_t full[kMostStages];
  if (threadIdx.x != 0) return;
  for (int s = 0; s < p.stages; ++s) mbarrier_init(&full[s], 1);
  fence_barrier_init();
  const uint64_t seed = mix(blockIdx.x + 1);
  auto issue = [&](int copy) {
    const int s = copy % p.stages;
    const uint64_t block = mix(seed + copy) % p.blocks;
    mbarrier_arrive_expect_tx(&full[s], kBlockBytes);
    bulk_load(ring + s * kBlockBytes, p.buffer + block * kBlockBytes, kBlockBytes, &full[s]);
  };
  for (int copy = 0; copy < p.stages && copy < p.copies; ++copy) issue(copy);
  for (int copy = 0; copy < p.copies; ++copy) {
    const int s = copy % p.stages;
    mbarrier_wait(&full[s], (copy / p.stages) & 1);
    if (copy + p.stages < p.copies) issue(copy + p.stages);
  }
}

// Clusters of `kCluster` CTAs share their blocks, as CUTLASS's multicast pipelines do: every
// CTA issues its 1/kCluster slice of each block, multicast into every CTA of the cluster, so
// each CTA's full barrier expects the whole 32 KiB; a CTA that has its copy of a slot tells
// every CTA (remote arrivals on their empty barriers) that its part of the slot may be
// overwritten. The bytes landing in shared memory are kCluster times the bytes read from L2.
template <int kCluster>
__global__ void __launch_bounds__(32) pull_blocks_multicast(const Probe p) {
  extern __shared__ __align__(1024) uint8_t ring[];
  __shared__ uint64_t full[kMostStages];
  __shared__ uint64_t empty[kMostStages];
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (threadIdx.x == 0) {
    for (int s = 0; s < p.stages; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], kCluster);
    }
    fence_barrier_init();
  }
  __syncwarp();
  cluster_barrier_sync();
  if (threadIdx.x == 0) {
    const uint64_t seed = mix(blockIdx.x / kCluster + 1);
    const uint16_t everyone = (1u << kCluster) - 1;
    constexpr uint32_t kSlice = kBlockBytes / kCluster;
    for (int copy = 0; copy < p.copies; ++copy) {
      const int s = copy % p.stages;
      const int use = copy / p.stages;
      if (use > 0) mbarrier_wait(&empty[s], (use - 1) & 1);
      mbarrier_arrive_expect_tx(&full[s], kBlockBytes);
      const uint64_t block = mix(seed + copy) % p.blocks;
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
          " [%0], [%1], %2, [%3], %4;" ::"r"(smem_address(ring + s * kBlockBytes + rank * kSlice)),
          "l"(p.buffer + block * kBlockBytes + rank * kSlice), "r"(kSlice),
          "r"(smem_address(&full[s])), "h"(everyone)
          : "memory");
      mbarrier_wait(&full[s], use & 1);
      if (copy + p.stages < p.copies) {
        for (int r = 0; r < kCluster; ++r) {
          asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(
                           cluster_shared_address(&empty[s], r))
                       : "memory");
        }
      }
    }
  }
  __syncwarp();
  cluster_barrier_sync();  // no CTA leaves while another may still write into it
}

// Median milliseconds of five timed calls of `launch` (a callable returning cudaError_t),
// after one untimed call that also brings a small span into L2; on a CUDA error, prints it and
// returns a negative value.
template <typename Launch>
static float median_ms(Launch launch, cudaEvent_t start, cudaEvent_t stop) {
  auto failed = [](cudaError_t status) {
    if (status != cudaSuccess) std::fprintf(stderr, "CUDA error: %s\n", cudaGetErrorString(status));
    return status != cudaSuccess;
  };
  if (failed(launch()) || failed(cudaDeviceSynchronize())) return -1;
  std::vector<float> ms;
  for (int rep = 0; rep < 5; ++rep) {
    float elapsed = 0;
    if (failed(cudaEventRecord(start)) || failed(launch()) || failed(cudaEventRecord(stop)) ||
        failed(cudaEventSynchronize(stop)) || failed(cudaEventElapsedTime(&elapsed, start, stop))) {
      return -1;
    }
    ms.push_back(elapsed);
  }
  std::sort(ms.begin(), ms.end());
  return ms[2];
}

// One plain launch of pull_blocks.
static auto plain(const Probe& probe, int ctas) {
  return [probe, ctas] {
    pull_blocks<<<ctas, 32, static_cast<size_t>(probe.stages) * kBlockBytes>>>(probe);
    return cudaGetLastError();
  };
}

// One launch of pull_blocks_multicast<kCluster> in clusters of kCluster CTAs.
template <int kCluster>
static auto multicast(const Probe& probe, int ctas) {
  return [probe, ctas] {
    auto kernel = pull_blocks_multicast<kCluster>;
    const size_t shared = static_cast<size_t>(probe.stages) * kBlockBytes;
    cudaError_t status =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared);
    if (status != cudaSuccess) return status;
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = kCluster;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(ctas));
    config.blockDim = dim3(32);
    config.dynamicSmemBytes = shared;
    config.attrs = &attribute;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, kernel, probe);
  };
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const uint64_t largest = 4ull << 30;
  uint8_t* buffer = nullptr;
  CHECK(cudaMalloc(&buffer, largest));
  CHECK(cudaMemset(buffer, 1, largest));
  CHECK(cudaFuncSetAttribute(pull_blocks, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kMostStages * kBlockBytes));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  std::printf("%d SMs; 32 KiB bulk copies of random blocks into shared memory\n", sms);
  std::printf("%10s %8s %8s %10s %10s\n", "span", "CTAs/SM", "stages", "KiB/SM", "TB/s");
  const uint64_t spans[] = {8ull << 20, 24ull << 20, 40ull << 20, 4ull << 30};
  for (uint64_t span : spans) {
    for (int ctas_per_sm : {1, 2}) {
      for (int stages : {2, 4, 6}) {
        if (ctas_per_sm * stages > 6) continue;  // 227 KiB a CTA, 228 KiB an SM
        const Probe probe{buffer, span / kBlockBytes, stages, 2000};
        const int ctas = sms * ctas_per_sm;
        const float ms = median_ms(plain(probe, ctas), start, stop);
        if (ms < 0) return 1;
        const double bytes = static_cast<double>(ctas) * probe.copies * kBlockBytes;
        std::printf("%8.0f MiB %8d %8d %10d %10.2f\n", span / double(1 << 20), ctas_per_sm,
                    stages, ctas_per_sm * stages * 32, bytes / (ms * 1e-3) / 1e12);
      }
    }
  }
  // Fewer CTAs (one per SM, the rest idle): whether an SM's intake or the L2's output is what
  // stops the full grid.
  std::printf("\n%10s %8s %8s %10s %12s\n", "span", "CTAs", "stages", "TB/s", "GB/s per SM");
  for (int ctas : {sms, sms / 2, sms / 4, sms / 8, 8}) {
    const Probe probe{buffer, (24ull << 20) / kBlockBytes, 4, 2000};
    const float ms = median_ms(plain(probe, ctas), start, stop);
    if (ms < 0) return 1;
    const double rate = static_cast<double>(ctas) * probe.copies * kBlockBytes / (ms * 1e-3);
    std::printf("%8d MiB %8d %8d %10.2f %12.1f\n", 24, ctas, 4, rate / 1e12, rate / ctas / 1e9);
  }
  // Clusters of 2 and 4 CTAs (one per SM) multicasting each block they read.
  std::printf("\n%10s %8s %8s %14s %12s\n", "span", "cluster", "stages", "landed TB/s",
              "L2 TB/s");
  for (int cluster : {2, 4}) {
    const Probe probe{buffer, (24ull << 20) / kBlockBytes, 6, 2000};
    const int ctas = sms / cluster * cluster;
    const float ms = cluster == 2 ? median_ms(multicast<2>(probe, ctas), start, stop)
                                  : median_ms(multicast<4>(probe, ctas), start, stop);
    if (ms < 0) return 1;
    const double landed = static_cast<double>(ctas) * probe.copies * kBlockBytes / (ms * 1e-3);
    std::printf("%8d MiB %8d %8d %14.2f %12.2f\n", 24, cluster, probe.stages, landed / 1e12,
                landed / cluster / 1e12);
  }
  CHECK(cudaFree(buffer));
  return 0;
}
