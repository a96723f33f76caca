// Diagnostic, not part of the library: the fastest any kernel can read what the decode kernel
// reads, with no attention math, so the decode benchmark's rows can be set against a ceiling of
// their own access pattern rather than a contiguous copy.
//
//   nvcc -std=c++17 -O3 -arch=sm_90a -Isrc -o build-gpu/gather_ceiling \
//       scripts/probes/gather_ceiling.cu
//   build-gpu/gather_ceiling [timings per row, default 4] [name parts: only rows holding one]
//
// The layout is the benchmark's (bench/decode.py PagedCache): one K and one V tensor of
// (pages, 4 KV heads, 128 keys, 128 dims) bf16, so one (request, KV head, block) is a
// contiguous 32 KiB of K and another of V, and the cache spans 48.8 GiB of K+V. Each
// (request, KV head) item reads 16 blocks at random pages; a CTA reads one item's share (the
// split), one block (K and V, 64 KiB) per stage, with one thread issuing 1-D bulk copies (what
// the kernel's TMA does) and four warps consuming, at a chosen number of CTAs per SM.
//
// Timed as the benchmark times (bench/common.py time_calls): a CUDA graph holding one launch
// per rotation set, its replays timed with events, per call = replay / sets; each row is
// timed several times in a row (the first timing after setup against later ones), and the
// last replay also records each launch's span from its first CTA's start to its last CTA's end
// (global timer), which leaves out launch gaps. Rows vary the span the pages are drawn from
// (48.8 GiB as in the benchmark, 4 GiB as in kernel_smoke), the bytes in flight, and how a
// block is loaded (one bulk copy; the kernel's two 64-dim TMA boxes, with or without L2
// promotion and the evict-first hint; one 5-D box).
//
// Results (H200, logs in docs/gpu_runs/gather_ceiling/ and
// docs/gpu_runs/decode_floors/): batch 64's blocks read in 64-66 us per call (4.1-4.2 TB/s)
// over 48.8 GiB as over 4 GiB; the kernel's boxes with 256-byte L2 promotion took 68.3 us,
// without 63.9 (so the K/V maps have no promotion); with the kernel's 2 us start and math holds
// mimicked, 67.4-67.9 us, the kernel's own time. Batch 16's reads with the math's holds,
// launched as the library launches decode, take 19.7-19.9 us (3.37-3.40 TB/s); batch 1's 3.4 us.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "probe_common.cuh"

using namespace flashmsa::sm90;

constexpr int kKvHeads = 4;
constexpr int kBlocksPerItem = 16;
constexpr uint32_t kHeadBlockBytes = 128 * 128 * 2;  // 128 keys x 128 dims, bf16: 32 KiB
constexpr uint32_t kStageBytes = 2 * kHeadBlockBytes;  // K and V of one block
constexpr int kMaxStages = 3;

__device__ __forceinline__ void spin_cycles(uint32_t cycles) {
  const long long until = clock64() + cycles;
  while (clock64() < until) {
  }
}

// How a block's 32 KiB of K (or V) is loaded.
enum class Load {
  kBulk,        // one 1-D bulk copy
  kTma,         // the kernel's: two 64-dim x 128-key boxes, 128-byte swizzle (launch.cu)
  kTmaOneBox,   // one box over both 64-dim halves (a 5-D view: dims, half, key, head, page)
};

struct TensorMaps {
  CUtensorMap k, v;
};

struct Launch {
  const uint8_t *k, *v;
  const uint32_t* pages;  // [items][kBlocksPerItem] page numbers
  int splits, num_stages;
  Load load;
  uint64_t cache_hint;
  uint32_t start_delay, k_hold, v_hold;  // SM cycles
  unsigned long long* span;              // (first start, last end), global-timer ns
  unsigned long long* cta_end;           // per CTA, or null
  uint32_t* sink;
};

__device__ __forceinline__ void load_head_block(const Launch& p, const CUtensorMap* map,
                                                const uint8_t* base, uint32_t page, int head,
                                                uint8_t* destination, uint64_t* barrier) {
  const uint32_t dst = smem_address(destination), bar = smem_address(barrier);
  const uint64_t tensor = reinterpret_cast<uint64_t>(map);
  if (p.load == Load::kBulk) {
    bulk_load(destination, base + (uint64_t{page} * kKvHeads + head) * kHeadBlockBytes,
              kHeadBlockBytes, barrier);
  } else if (p.load == Load::kTma) {
    for (int half = 0; half < 2; ++half) {
      asm volatile(
          "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
          ".L2::cache_hint [%0], [%1, {%3, %4, %5, %6}], [%2], %7;"
          ::"r"(dst + half * kHeadBlockBytes / 2), "l"(tensor), "r"(bar), "r"(half * 64),
          "r"(0), "r"(head), "r"(page), "l"(p.cache_hint)
          : "memory");
    }
  } else {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
        ".L2::cache_hint [%0], [%1, {%3, %4, %5, %6, %7}], [%2], %8;"
        ::"r"(dst), "l"(tensor), "r"(bar), "r"(0), "r"(0), "r"(0), "r"(head), "r"(page),
        "l"(p.cache_hint)
        : "memory");
  }
}

// CTA c reads item c / splits, blocks c % splits, + splits, ... K and V have their own barriers,
// as in the kernel: the consumers hold K for k_hold cycles (the scores) and V for v_hold more
// (the softmax and P V) before releasing each; the issuing thread waits start_delay cycles
// first (the plan).
__global__ void read_blocks(const __grid_constant__ Launch p,
                            const __grid_constant__ TensorMaps maps) {
  extern __shared__ __align__(1024) uint8_t stages[];
  __shared__ uint64_t k_full[kMaxStages], k_empty[kMaxStages], v_full[kMaxStages],
      v_empty[kMaxStages];
  const int item = blockIdx.x / p.splits, part = blockIdx.x % p.splits;
  const int head = item % kKvHeads;
  const uint32_t* item_pages = p.pages + item * kBlocksPerItem;
  const int steps = (kBlocksPerItem - part + p.splits - 1) / p.splits;
  const int num_stages = p.num_stages;
  // Rows launched with programmatic dependent launch (Row::pdl) overlap the previous launch's
  // tail as the kernel does; without the launch attribute both are no-ops.
  allow_next_grid_launch();
  wait_for_previous_grid();
  if (threadIdx.x == 0) {
    atomicMin(&p.span[0], static_cast<unsigned long long>(global_timer_ns()));
    for (int s = 0; s < num_stages; ++s) {
      mbarrier_init(&k_full[s], 1);
      mbarrier_init(&v_full[s], 1);
      mbarrier_init(&k_empty[s], blockDim.x - 32);
      mbarrier_init(&v_empty[s], blockDim.x - 32);
    }
    fence_barrier_init();
  }
  __syncthreads();
  uint32_t acc = 0;
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) {
      spin_cycles(p.start_delay);
      for (int i = 0; i < steps; ++i) {
        const int s = i % num_stages;
        const uint32_t phase = (i / num_stages) & 1;
        uint8_t* stage = stages + s * kStageBytes;
        const uint32_t page = item_pages[part + i * p.splits];
        mbarrier_wait(&k_empty[s], phase ^ 1);
        mbarrier_arrive_expect_tx(&k_full[s], kHeadBlockBytes);
        load_head_block(p, &maps.k, p.k, page, head, stage, &k_full[s]);
        mbarrier_wait(&v_empty[s], phase ^ 1);
        mbarrier_arrive_expect_tx(&v_full[s], kHeadBlockBytes);
        load_head_block(p, &maps.v, p.v, page, head, stage + kHeadBlockBytes, &v_full[s]);
      }
    }
  } else {
    for (int i = 0; i < steps; ++i) {
      const int s = i % num_stages;
      const uint32_t phase = (i / num_stages) & 1;
      const uint8_t* stage = stages + s * kStageBytes;
      mbarrier_wait(&k_full[s], phase);
      acc += reinterpret_cast<const uint32_t*>(stage)[threadIdx.x];
      if (p.k_hold) spin_cycles(p.k_hold);
      mbarrier_arrive(&k_empty[s]);
      mbarrier_wait(&v_full[s], phase);
      acc += reinterpret_cast<const uint32_t*>(stage + kHeadBlockBytes)[threadIdx.x];
      if (p.v_hold) spin_cycles(p.v_hold);
      mbarrier_arrive(&v_empty[s]);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned long long now = global_timer_ns();
    atomicMax(&p.span[1], now);
    if (p.cta_end) p.cta_end[blockIdx.x] = now;
  }
  if (acc == 0x9e3779b9u) p.sink[0] = acc;  // keeps the consumers' reads
}

// The tensor maps of `load` over one K or V tensor (pages, heads, 128 keys, 128 dims), 128-byte
// swizzle as the kernel's; L2 promotion and cache hints are per row.
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

static bool encode_map(EncodeTiled encode, CUtensorMap* map, void* base, uint64_t pages,
                       Load load, CUtensorMapL2promotion promotion) {
  std::memset(map, 0, sizeof(*map));
  if (load == Load::kBulk) return true;
  const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
  CUresult status;
  if (load == Load::kTma) {
    const cuuint64_t dims[4] = {128, 128, kKvHeads, pages};
    const cuuint64_t strides[3] = {256, 256 * 128, 256 * 128 * kKvHeads};
    const cuuint32_t box[4] = {64, 128, 1, 1};
    status = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, base, dims, strides, box,
                    element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                    promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  } else {
    const cuuint64_t dims[5] = {64, 2, 128, kKvHeads, pages};
    const cuuint64_t strides[4] = {128, 256, 256 * 128, 256 * 128 * kKvHeads};
    const cuuint32_t box[5] = {64, 2, 128, 1, 1};
    status = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 5, base, dims, strides, box,
                    element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                    promotion, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  }
  if (status != CUDA_SUCCESS) std::fprintf(stderr, "cuTensorMapEncodeTiled: %d\n", status);
  return status == CUDA_SUCCESS;
}

constexpr uint64_t kEvictNormal = 0x1000000000000000ull;  // kernel_traits.h's cache hints
constexpr uint64_t kEvictFirst = 0x12F0000000000000ull;
constexpr auto kPromote256 = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
constexpr auto kPromoteNone = CU_TENSOR_MAP_L2_PROMOTION_NONE;

struct Row {
  const char* name;
  int batch, splits, stages, ctas_per_sm;
  double span_gib;  // K+V span the pages are drawn from
  Load load = Load::kBulk;
  CUtensorMapL2promotion promotion = kPromote256;
  uint64_t cache_hint = kEvictNormal;
  uint32_t start_delay = 0, k_hold = 0, v_hold = 0;  // SM cycles (1.8-1.98 GHz on the H200)
  bool pdl = false;  // programmatic dependent launch, as the library launches decode
};

static double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// Each set: every request owns 256 pages (KV 32768) drawn at random from the span's first
// span_pages, disjoint within the set; each (request, head) item reads 16 distinct of its
// request's pages.
static std::vector<uint32_t> page_sets(std::mt19937_64& rng, int sets, int batch,
                                       uint64_t span_pages) {
  const int items = batch * kKvHeads;
  std::vector<uint32_t> host(static_cast<uint64_t>(sets) * items * kBlocksPerItem);
  std::vector<uint32_t> pool(span_pages);
  for (int set = 0; set < sets; ++set) {
    for (uint64_t p = 0; p < span_pages; ++p) pool[p] = static_cast<uint32_t>(p);
    const uint64_t owned = std::min<uint64_t>(256, span_pages / batch);
    for (uint64_t p = 0; p < owned * batch; ++p) {  // partial Fisher-Yates
      std::swap(pool[p], pool[p + rng() % (span_pages - p)]);
    }
    for (int item = 0; item < items; ++item) {
      const int request = item / kKvHeads;
      std::vector<uint32_t> mine(pool.begin() + request * owned,
                                 pool.begin() + (request + 1) * owned);
      for (int b = 0; b < kBlocksPerItem; ++b) {
        std::swap(mine[b], mine[b + rng() % (owned - b)]);
        host[(static_cast<uint64_t>(set) * items + item) * kBlocksPerItem + b] = mine[b];
      }
    }
  }
  return host;
}

int main(int argc, char** argv) {
  const int timings = argc > 1 ? std::atoi(argv[1]) : 4;
  constexpr int kReps = 20;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s: %d SMs, %.1f GiB\n", prop.name, prop.multiProcessorCount,
              prop.totalGlobalMem / double(1 << 30));
  void* encode_function = nullptr;
  cudaDriverEntryPointQueryResult found;
  CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &encode_function, 12000,
                                         cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || encode_function == nullptr) {
    std::fprintf(stderr, "no cuTensorMapEncodeTiled\n");
    return 1;
  }
  const auto encode = reinterpret_cast<EncodeTiled>(encode_function);

  // The benchmark's cache: 200063 pages of K and of V (48.8 GiB together).
  constexpr uint64_t kPages = 200063;
  const uint64_t tensor_bytes = kPages * kKvHeads * kHeadBlockBytes;
  uint8_t *k = nullptr, *v = nullptr;
  CHECK(cudaMalloc(&k, tensor_bytes));
  CHECK(cudaMalloc(&v, tensor_bytes));
  CHECK(cudaMemset(k, 1, tensor_bytes));
  CHECK(cudaMemset(v, 2, tensor_bytes));
  uint32_t* sink = nullptr;
  CHECK(cudaMalloc(&sink, sizeof(uint32_t)));
  CHECK(cudaFuncSetAttribute(read_blocks, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kMaxStages * kStageBytes));

  // The ceilings (no plan, no math); the kernel's loads (TMA boxes, promotion, cache hint);
  // then the reads with the kernel's other costs mimicked: a start of about 2 us before the
  // first issue, and K / V held for the math.
  const Load tma = Load::kTma, one_box = Load::kTmaOneBox;
  const Row base_rows[] = {
      {"b64 bulk", 64, 1, 1, 2, 48.8},
      {"b64 bulk 4GiB", 64, 1, 1, 2, 4.0},
      {"b64 tma 256B evict-first (kernel)", 64, 1, 1, 2, 48.8, tma, kPromote256, kEvictFirst},
      {"b64 tma 256B normal", 64, 1, 1, 2, 48.8, tma, kPromote256, kEvictNormal},
      {"b64 tma none evict-first", 64, 1, 1, 2, 48.8, tma, kPromoteNone, kEvictFirst},
      {"b64 tma none normal", 64, 1, 1, 2, 48.8, tma, kPromoteNone, kEvictNormal},
      {"b64 one-box 256B evict-first", 64, 1, 1, 2, 48.8, one_box, kPromote256, kEvictFirst},
      {"b64 one-box none evict-first", 64, 1, 1, 2, 48.8, one_box, kPromoteNone, kEvictFirst},
      {"b64 bulk 3/SM", 64, 1, 1, 3, 48.8},
      {"b64 tma kernel 3/SM", 64, 1, 1, 3, 48.8, tma, kPromote256, kEvictFirst},
      {"b128 bulk", 128, 1, 1, 2, 48.8},
      {"b128 tma kernel", 128, 1, 1, 2, 48.8, tma, kPromote256, kEvictFirst},
      {"b128 one-box none evict-first", 128, 1, 1, 2, 48.8, one_box, kPromoteNone, kEvictFirst},
      {"b16 split2 bulk", 16, 2, 1, 2, 48.8},
      {"b16 split2 tma kernel", 16, 2, 1, 2, 48.8, tma, kPromote256, kEvictFirst},
      {"b16 split4 tma kernel", 16, 4, 1, 2, 48.8, tma, kPromote256, kEvictFirst},
      {"b1 split16 bulk", 1, 16, 1, 2, 48.8},
      {"b1 split16 tma kernel", 1, 16, 1, 2, 48.8, tma, kPromote256, kEvictFirst},
      // The kernel's loads since ca69aeb (no promotion), with its start and math mimicked.
      {"b64 none start 2us hold .2/.3", 64, 1, 1, 2, 48.8, tma, kPromoteNone, kEvictFirst, 4000,
       400, 600},
      {"b64 none start 1us hold .2/.3", 64, 1, 1, 2, 48.8, tma, kPromoteNone, kEvictFirst, 2000,
       400, 600},
      {"b64 none hold .2/.3", 64, 1, 1, 2, 48.8, tma, kPromoteNone, kEvictFirst, 0, 400, 600},
      {"b64 none 3/SM start 2us hold .2/.3", 64, 1, 1, 3, 48.8, tma, kPromoteNone, kEvictFirst,
       4000, 400, 600},
      {"b64 none split2 start 2us hold .2/.3", 64, 2, 1, 2, 48.8, tma, kPromoteNone,
       kEvictFirst, 4000, 400, 600},
      {"b64 none 2 stages 1/SM start 2us hold", 64, 1, 2, 1, 48.8, tma, kPromoteNone,
       kEvictFirst, 4000, 400, 600},
      {"b16 split2 none", 16, 2, 1, 2, 48.8, tma, kPromoteNone, kEvictFirst},
      {"b16 split2 none start 2us hold .2/.3", 16, 2, 1, 2, 48.8, tma, kPromoteNone, kEvictFirst,
       4000, 400, 600},
      {"b16 split4 none start 2us hold .2/.3", 16, 4, 1, 2, 48.8, tma, kPromoteNone, kEvictFirst,
       4000, 400, 600},
      {"b1 split16 none start 2us hold .2/.3", 1, 16, 1, 2, 48.8, tma, kPromoteNone, kEvictFirst,
       4000, 400, 600},
      {"b1 split16 none start 1us hold .2/.3", 1, 16, 1, 2, 48.8, tma, kPromoteNone, kEvictFirst,
       2000, 400, 600},
      // Floors of batch 1 and 16: the reads with the kernel's math holds
      // and starts of 0, 0.5 and 1 us (each CTA's first page is read from global memory after
      // its start either way, as the kernel reads its index entries).
      {"b1 split16 none", 1, 16, 1, 2, 48.8, tma, kPromoteNone, kEvictFirst},
      {"b1 split16 none hold .2/.3", 1, 16, 1, 2, 48.8, tma, kPromoteNone, kEvictFirst, 0, 400,
       600},
      {"b1 split16 none start .5us hold .2/.3", 1, 16, 1, 2, 48.8, tma, kPromoteNone, kEvictFirst,
       1000, 400, 600},
      {"b16 split2 none hold .2/.3", 16, 2, 1, 2, 48.8, tma, kPromoteNone, kEvictFirst, 0, 400,
       600},
      {"b16 split2 none start .5us hold .2/.3", 16, 2, 1, 2, 48.8, tma, kPromoteNone,
       kEvictFirst, 1000, 400, 600},
      {"b16 split2 none start 1us hold .2/.3", 16, 2, 1, 2, 48.8, tma, kPromoteNone, kEvictFirst,
       2000, 400, 600},
  };
  // The floor rows again, launched as the library launches decode (programmatic dependent
  // launch: the next launch's CTAs start while this one ends), whose per-call time has less
  // launch gap; named "<row> pdl". Then batch 64's first row again, for drift over the run.
  const char* const kPdlRows[] = {"b1 split16 none", "b1 split16 none hold .2/.3",
                                  "b1 split16 none start .5us hold .2/.3",
                                  "b1 split16 none start 1us hold .2/.3", "b16 split2 none",
                                  "b16 split2 none hold .2/.3",
                                  "b16 split2 none start .5us hold .2/.3",
                                  "b16 split2 none start 1us hold .2/.3"};
  std::vector<Row> rows(std::begin(base_rows), std::end(base_rows));
  std::deque<std::string> pdl_names;  // stable storage for the rows' names
  for (const char* name : kPdlRows) {
    const auto found = std::find_if(std::begin(base_rows), std::end(base_rows),
                                    [&](const Row& r) { return std::strcmp(r.name, name) == 0; });
    if (found == std::end(base_rows)) {
      std::fprintf(stderr, "no row %s\n", name);
      return 1;
    }
    Row row = *found;
    row.name = pdl_names.emplace_back(std::string(name) + " pdl").c_str();
    row.pdl = true;
    rows.push_back(row);
  }
  rows.push_back(Row{"b64 bulk (again)", 64, 1, 1, 2, 48.8});
  // Rows whose name holds one of argv[2...] (all without them).
  auto selected = [&](const char* name) {
    for (int a = 2; a < argc; ++a) {
      if (std::strstr(name, argv[a])) return true;
    }
    return argc <= 2;
  };
  std::mt19937_64 rng(12345);
  for (const Row& row : rows) {
    if (!selected(row.name)) continue;
    const int items = row.batch * kKvHeads;
    const uint64_t bytes_per_call = static_cast<uint64_t>(items) * kBlocksPerItem * kStageBytes;
    // Rotation sets as bench/common.py rotation_sets: reuse distance above 2x L2 (60 MiB).
    const int sets = static_cast<int>(std::min<uint64_t>(
        32, std::max<uint64_t>(1, (2 * (60ull << 20) + bytes_per_call - 1) / bytes_per_call)));
    const uint64_t span_pages = std::min<uint64_t>(
        kPages, static_cast<uint64_t>(row.span_gib * (1ull << 30) /
                                      (2.0 * kKvHeads * kHeadBlockBytes)));
    const std::vector<uint32_t> host = page_sets(rng, sets, row.batch, span_pages);
    TensorMaps maps;
    if (!encode_map(encode, &maps.k, k, kPages, row.load, row.promotion) ||
        !encode_map(encode, &maps.v, v, kPages, row.load, row.promotion)) {
      return 1;
    }
    const int ctas = items * row.splits;
    uint32_t* pages = nullptr;
    unsigned long long *span = nullptr, *cta_end = nullptr;
    CHECK(cudaMalloc(&pages, host.size() * sizeof(uint32_t)));
    CHECK(cudaMemcpy(pages, host.data(), host.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
    CHECK(cudaMalloc(&span, sets * 2 * sizeof(unsigned long long)));
    CHECK(cudaMalloc(&cta_end, ctas * sizeof(unsigned long long)));
    // Dynamic shared memory that allows just ctas_per_sm CTAs on an SM.
    const int smem_per_sm = static_cast<int>(prop.sharedMemPerMultiprocessor);
    const int smem = std::max<int>(row.stages * kStageBytes,
                                   std::min<int>(kMaxStages * kStageBytes,
                                                 smem_per_sm / (row.ctas_per_sm + 1) + 1024));

    cudaStream_t stream;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int set = 0; set < sets; ++set) {
      const Launch launch{k, v, pages + static_cast<uint64_t>(set) * items * kBlocksPerItem,
                          row.splits, row.stages, row.load, row.cache_hint, row.start_delay,
                          row.k_hold, row.v_hold, span + 2 * set,
                          set == 0 ? cta_end : nullptr, sink};
      cudaLaunchAttribute programmatic;
      programmatic.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      programmatic.val.programmaticStreamSerializationAllowed = 1;
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(ctas);
      config.blockDim = dim3(160);
      config.dynamicSmemBytes = smem;
      config.stream = stream;
      config.attrs = &programmatic;
      config.numAttrs = row.pdl ? 1 : 0;
      CHECK(cudaLaunchKernelEx(&config, read_blocks, launch, maps));
    }
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    int occupancy = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occupancy, read_blocks, 160, smem));
    std::printf("%-38s %4d CTAs (%d/SM) %2d sets %5.1f MiB/call:", row.name, ctas, occupancy,
                sets, bytes_per_call / double(1 << 20));
    cudaEvent_t begin, end;
    CHECK(cudaEventCreate(&begin));
    CHECK(cudaEventCreate(&end));
    CHECK(cudaGraphLaunch(exec, stream));  // warm-up replay, as time_calls does
    CHECK(cudaStreamSynchronize(stream));
    for (int t = 0; t < timings; ++t) {
      std::vector<double> us;
      for (int r = 0; r < kReps; ++r) {
        CHECK(cudaEventRecord(begin, stream));
        CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaEventRecord(end, stream));
        CHECK(cudaEventSynchronize(end));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, begin, end));
        us.push_back(ms * 1e3 / sets);
      }
      const double m = median(us);
      std::printf(" %7.2f us %4.0f GB/s |", m, bytes_per_call / m / 1e3);
    }
    // Spans of one more replay (no launch gaps), and the CTAs' ends of its first launch.
    std::vector<unsigned long long> init(2 * sets);
    for (int set = 0; set < sets; ++set) init[2 * set] = ~0ull, init[2 * set + 1] = 0;
    CHECK(cudaMemcpy(span, init.data(), init.size() * sizeof(init[0]), cudaMemcpyHostToDevice));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(init.data(), span, init.size() * sizeof(init[0]), cudaMemcpyDeviceToHost));
    std::vector<unsigned long long> ends(ctas);
    CHECK(cudaMemcpy(ends.data(), cta_end, ctas * sizeof(ends[0]), cudaMemcpyDeviceToHost));
    std::vector<double> spans, end_us;
    for (int set = 0; set < sets; ++set) spans.push_back((init[2 * set + 1] - init[2 * set]) / 1e3);
    for (unsigned long long e : ends) end_us.push_back((e - init[0]) / 1e3);
    std::sort(end_us.begin(), end_us.end());
    const double s = median(spans);
    std::printf(" span %.2f us %4.0f GB/s; CTA ends %.1f / %.1f / %.1f us\n", s,
                bytes_per_call / s / 1e3, end_us.front(), end_us[ctas / 2], end_us.back());
    CHECK(cudaEventDestroy(begin));
    CHECK(cudaEventDestroy(end));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaStreamDestroy(stream));
    CHECK(cudaFree(pages));
    CHECK(cudaFree(span));
    CHECK(cudaFree(cta_end));
  }
  CHECK(cudaFree(k));
  CHECK(cudaFree(v));
  CHECK(cudaFree(sink));
  return 0;
}
