// Diagnostic, not part of the library: how evenly a Hopper GPU's SMs share DRAM bandwidth when
// every SM streams at once, and whether the split follows the GPCs. Decode batch 64's CTAs end
// between 53 and 68 us, and the two CTAs that share an SM end alike (correlation 0.99): if a
// plain streaming kernel shows the same spread, the work has to move to the fast SMs during a
// call, and this says at what level (SM, TPC, GPC) they differ.
//
//   nvcc -std=c++17 -O3 -arch=sm_90a -Isrc -o build-gpu/sm_bandwidth scripts/probes/sm_bandwidth.cu
//   build-gpu/sm_bandwidth [MiB per SM, default 64] [repeats, default 3]
//
// Result (H200, docs/gpu_runs/sm_bandwidth/sm_bandwidth.log): the call
// streams 4.68-4.70 TB/s at every ring depth; with 64 KiB in flight per SM every SM gets
// 35.7-36.4 GB/s, with 128 or 192 KiB a few SMs get 47-49 GB/s while the rest stay at 35.9: more
// in flight adds nothing in all and makes the shares unequal, so a grid of one wave then ends
// with its slow SMs (multi-token prediction's throttle, docs/design.md).
//
// 1. GPCs: clusters of 16, 8, 4 and 2 CTAs (16 is a non-portable size), one CTA per SM, several
//    launches of each; the CTAs of a cluster share a GPC, so SMs met in one cluster are joined
//    (union-find). SMs that no cluster reached stay alone.
// 2. Streaming: one CTA per SM, each reading its own contiguous share of one buffer with 1-D
//    bulk copies (cp.async.bulk, what TMA does for the decode kernel) into a ring of 32 KiB
//    stages: 2, 4 and 6 stages (64, 128 and 192 KiB in flight per SM; two decode CTAs of one
//    64 KiB stage each hold 128). Each CTA records its SM and its time; per ring: the call's
//    GB/s and the per-SM spread (does more in flight even the SMs out?); for 4 stages also the
//    slowest and fastest SMs, the per-GPC means, and over the repeats how alike an SM's rates
//    are from one run to the next (correlation of run 1 with each later run).
// 3. Rows: the same stream at 4 stages, but each 32 KiB stage gathered from rows of 128, 256 or
//    1024 bytes at a 1 KiB stride (one copy per row). 256 of every 1024 bytes is what one KV
//    head of a paged block is (a token's 4 heads x 128 dims x 2 bytes per 1 KiB row): does
//    that pattern read slower than whole rows, and is 4.0 TB/s in reach for decode at all?
//    First run (H200): all three row sizes take
//    the same time per copy (about 27-34 million copies per second per SM), so one bulk copy
//    per row measures the copy instruction's issue rate, not DRAM. The question needs the
//    decode kernel's own load: a TMA tensor map whose box is 128 rows of 128 or 256 bytes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <numeric>
#include <vector>

#include "probe_common.cuh"

using namespace flashmsa::sm90;

// ---- 1. GPC map ---------------------------------------------------------------------------

__global__ void record_cluster_sms(uint32_t* sm_of_cta) { sm_of_cta[blockIdx.x] = sm_id(); }

// ---- 2. streaming -------------------------------------------------------------------------

constexpr int kMaxStages = 6;
constexpr uint32_t kStageBytes = 32 * 1024;

// One thread issues, the block's other threads wait on the stages and touch one word of each
// (so a stage is "consumed" before it is refilled, as a consumer would).
// Rows of row_bytes at a kRowStride stride fill each stage (row_bytes = kStageBytes: one
// contiguous copy); a CTA's share spans bytes_per_cta and it reads row_bytes of each stride.
constexpr uint32_t kRowStride = 1024;

__global__ void stream_share(const uint8_t* data, uint64_t bytes_per_cta, int num_stages,
                             uint32_t row_bytes, uint32_t* sm_of_cta, uint64_t* ns_of_cta,
                             uint32_t* sink) {
  extern __shared__ __align__(1024) uint8_t stages[];
  __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
  const uint8_t* share = data + blockIdx.x * bytes_per_cta;
  const bool rows = row_bytes < kStageBytes;
  const uint32_t rows_per_stage = kStageBytes / row_bytes;
  const uint64_t span_per_stage = rows ? uint64_t{rows_per_stage} * kRowStride : kStageBytes;
  const uint64_t steps = bytes_per_cta / span_per_stage;
  if (threadIdx.x == 0) {
    for (int s = 0; s < num_stages; ++s) {
      mbarrier_init(&full[s], 1);
      mbarrier_init(&empty[s], blockDim.x - 32);
    }
    fence_barrier_init();
  }
  __syncthreads();
  const uint64_t start = global_timer_ns();
  uint32_t acc = 0;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    for (uint64_t i = 0; i < steps; ++i) {
      const int s = static_cast<int>(i % num_stages);
      const uint32_t phase = static_cast<uint32_t>((i / num_stages) & 1);
      if (lane == 0) {
        mbarrier_wait(&empty[s], phase ^ 1);
        mbarrier_arrive_expect_tx(&full[s], kStageBytes);
      }
      __syncwarp();
      if (!rows) {
        if (lane == 0) {
          bulk_load(stages + s * kStageBytes, share + i * kStageBytes, kStageBytes, &full[s]);
        }
      } else {
        for (uint32_t r = lane; r < rows_per_stage; r += 32) {
          bulk_load(stages + s * kStageBytes + r * row_bytes,
                    share + i * span_per_stage + uint64_t{r} * kRowStride, row_bytes, &full[s]);
        }
      }
    }
  } else {
    for (uint64_t i = 0; i < steps; ++i) {
      const int s = static_cast<int>(i % num_stages);
      const uint32_t phase = static_cast<uint32_t>((i / num_stages) & 1);
      mbarrier_wait(&full[s], phase);
      acc += reinterpret_cast<const uint32_t*>(stages + s * kStageBytes)[threadIdx.x];
      mbarrier_arrive(&empty[s]);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    ns_of_cta[blockIdx.x] = global_timer_ns() - start;
    sm_of_cta[blockIdx.x] = sm_id();
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the consumers' reads
}

// ---- host ---------------------------------------------------------------------------------

static int find(std::vector<int>& parent, int x) {
  while (parent[x] != x) x = parent[x] = parent[parent[x]];
  return x;
}

static double correlation(const std::vector<double>& a, const std::vector<double>& b) {
  const double ma = std::accumulate(a.begin(), a.end(), 0.0) / a.size();
  const double mb = std::accumulate(b.begin(), b.end(), 0.0) / b.size();
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    cov += (a[i] - ma) * (b[i] - mb);
    va += (a[i] - ma) * (a[i] - ma);
    vb += (b[i] - mb) * (b[i] - mb);
  }
  return va > 0 && vb > 0 ? cov / std::sqrt(va * vb) : 0.0;
}

// One launch between two events: its milliseconds in *ms; 1 on a CUDA error (printed).
template <typename Launch>
static int time_launch_ms(Launch launch, float* ms) {
  cudaEvent_t begin, end;
  CHECK(cudaEventCreate(&begin));
  CHECK(cudaEventCreate(&end));
  CHECK(cudaEventRecord(begin));
  launch();
  CHECK(cudaGetLastError());
  CHECK(cudaEventRecord(end));
  CHECK(cudaEventSynchronize(end));
  CHECK(cudaEventElapsedTime(ms, begin, end));
  CHECK(cudaEventDestroy(begin));
  CHECK(cudaEventDestroy(end));
  return 0;
}

int main(int argc, char** argv) {
  const uint64_t mib_per_sm = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 64;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  std::printf("%s: %d SMs\n", prop.name, sms);

  // 1. GPC map. One CTA per SM: shared memory past half an SM's.
  std::vector<int> parent(sms);
  std::iota(parent.begin(), parent.end(), 0);
  {
    const int smem = static_cast<int>(prop.sharedMemPerMultiprocessor / 2 + 1024);
    CHECK(cudaFuncSetAttribute(record_cluster_sms, cudaFuncAttributeNonPortableClusterSizeAllowed,
                               1));
    CHECK(cudaFuncSetAttribute(record_cluster_sms,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    uint32_t* sm_of_cta = nullptr;
    CHECK(cudaMalloc(&sm_of_cta, sms * sizeof(uint32_t)));
    std::vector<uint32_t> host(sms);
    for (int cluster : {16, 8, 4, 2}) {
      const int ctas = (sms / cluster) * cluster;
      cudaLaunchAttribute attribute;
      attribute.id = cudaLaunchAttributeClusterDimension;
      attribute.val.clusterDim.x = cluster;
      attribute.val.clusterDim.y = 1;
      attribute.val.clusterDim.z = 1;
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(ctas);
      config.blockDim = dim3(32);
      config.dynamicSmemBytes = smem;
      config.attrs = &attribute;
      config.numAttrs = 1;
      for (int launch = 0; launch < 8; ++launch) {
        CHECK(cudaLaunchKernelEx(&config, record_cluster_sms, sm_of_cta));
        CHECK(cudaMemcpy(host.data(), sm_of_cta, ctas * sizeof(uint32_t),
                         cudaMemcpyDeviceToHost));
        for (int c = 0; c < ctas; c += cluster) {
          for (int r = 1; r < cluster; ++r) {
            parent[find(parent, host[c + r])] = find(parent, host[c]);
          }
        }
      }
    }
    CHECK(cudaFree(sm_of_cta));
  }
  std::map<int, std::vector<int>> gpcs;
  for (int sm = 0; sm < sms; ++sm) gpcs[find(parent, sm)].push_back(sm);
  std::vector<int> gpc_of_sm(sms);
  int g = 0;
  std::printf("GPC groups (SMs met in one cluster): %zu\n", gpcs.size());
  for (auto& [root, members] : gpcs) {
    std::printf("  gpc %d (%zu SMs):", g, members.size());
    for (int sm : members) {
      std::printf(" %d", sm);
      gpc_of_sm[sm] = g;
    }
    std::printf("\n");
    ++g;
  }

  // 2. Streaming, one CTA per SM.
  const uint64_t bytes_per_cta = mib_per_sm << 20;
  uint8_t* data = nullptr;
  uint32_t *sm_of_cta = nullptr, *sink = nullptr;
  uint64_t* ns_of_cta = nullptr;
  CHECK(cudaMalloc(&data, bytes_per_cta * sms));
  CHECK(cudaMemset(data, 1, bytes_per_cta * sms));
  CHECK(cudaMalloc(&sm_of_cta, sms * sizeof(uint32_t)));
  CHECK(cudaMalloc(&ns_of_cta, sms * sizeof(uint64_t)));
  CHECK(cudaMalloc(&sink, sizeof(uint32_t)));
  CHECK(cudaFuncSetAttribute(stream_share, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kMaxStages * kStageBytes));
  std::vector<std::vector<double>> rate_by_run;  // [run][sm] GB/s, 4 stages
  for (int num_stages : {4, 2, 6}) {
    const int smem = num_stages * kStageBytes;
    for (int run = 0; run < repeats + 1; ++run) {  // run 0 warms up
      float ms = 0;
      if (time_launch_ms([&] {
            stream_share<<<sms, 160, smem>>>(data, bytes_per_cta, num_stages, kStageBytes,
                                             sm_of_cta, ns_of_cta, sink);
          }, &ms) != 0) {
        return 1;
      }
      std::vector<uint32_t> sm(sms);
      std::vector<uint64_t> ns(sms);
      CHECK(cudaMemcpy(sm.data(), sm_of_cta, sms * sizeof(uint32_t), cudaMemcpyDeviceToHost));
      CHECK(cudaMemcpy(ns.data(), ns_of_cta, sms * sizeof(uint64_t), cudaMemcpyDeviceToHost));
      if (run == 0) continue;
      std::vector<double> rate(sms, 0.0);
      std::vector<int> seen(sms, 0);
      for (int c = 0; c < sms; ++c) {
        rate[sm[c]] = static_cast<double>(bytes_per_cta) / ns[c];
        ++seen[sm[c]];
      }
      const bool doubled = std::any_of(seen.begin(), seen.end(), [](int n) { return n > 1; });
      std::vector<double> sorted = rate;
      std::sort(sorted.begin(), sorted.end());
      std::printf("%d stages (%3d KiB in flight per SM), run %d: %.1f GB/s over the call "
                  "(%.3f ms); per SM min %.1f median %.1f max %.1f GB/s%s\n",
                  num_stages, num_stages * 32, run,
                  static_cast<double>(bytes_per_cta) * sms / (ms * 1e6), ms, sorted.front(),
                  sorted[sms / 2], sorted.back(),
                  doubled ? " (an SM ran two CTAs: its rate is not per SM)" : "");
      if (num_stages == 4) rate_by_run.push_back(rate);
    }
  }
  // Per SM (mean over the runs), slowest and fastest; per GPC; persistence across runs.
  std::vector<double> mean(sms, 0.0);
  for (auto& r : rate_by_run)
    for (int s = 0; s < sms; ++s) mean[s] += r[s] / rate_by_run.size();
  std::vector<int> order(sms);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return mean[a] < mean[b]; });
  std::printf("4 stages, mean over the runs; slowest SMs (GB/s, gpc):");
  for (int i = 0; i < 16; ++i) std::printf(" %d:%.1f,g%d", order[i], mean[order[i]], gpc_of_sm[order[i]]);
  std::printf("\nfastest SMs (GB/s, gpc):");
  for (int i = sms - 1; i >= sms - 16; --i) std::printf(" %d:%.1f,g%d", order[i], mean[order[i]], gpc_of_sm[order[i]]);
  std::printf("\nper GPC (mean GB/s per SM, min, max):\n");
  for (int gpc = 0; gpc < g; ++gpc) {
    double sum = 0, lo = 1e30, hi = 0;
    int n = 0;
    for (int s = 0; s < sms; ++s) {
      if (gpc_of_sm[s] != gpc) continue;
      sum += mean[s];
      lo = std::min(lo, mean[s]);
      hi = std::max(hi, mean[s]);
      ++n;
    }
    std::printf("  gpc %d: %.1f (%.1f .. %.1f) over %d SMs\n", gpc, sum / n, lo, hi, n);
  }
  for (size_t r = 1; r < rate_by_run.size(); ++r) {
    std::printf("correlation of SM rates, run 1 with run %zu: %.2f\n", r + 1,
                correlation(rate_by_run[0], rate_by_run[r]));
  }
  // 3. Rows at a 1 KiB stride, 4 stages: GB/s of the bytes read.
  for (uint32_t row_bytes : {1024u, 256u, 128u}) {
    const uint64_t read_per_cta = bytes_per_cta / kRowStride * row_bytes;
    for (int run = 0; run < repeats + 1; ++run) {  // run 0 warms up
      float ms = 0;
      if (time_launch_ms([&] {
            stream_share<<<sms, 160, 4 * kStageBytes>>>(data, bytes_per_cta, 4, row_bytes,
                                                        sm_of_cta, ns_of_cta, sink);
          }, &ms) != 0) {
        return 1;
      }
      if (run == 0) continue;
      std::printf("rows of %4u B every %u B, 4 stages, run %d: %.1f GB/s read over the call "
                  "(%.3f ms)\n", row_bytes, kRowStride, run,
                  static_cast<double>(read_per_cta) * sms / (ms * 1e6), ms);
    }
  }
  CHECK(cudaFree(data));
  CHECK(cudaFree(sm_of_cta));
  CHECK(cudaFree(ns_of_cta));
  CHECK(cudaFree(sink));
  return 0;
}
