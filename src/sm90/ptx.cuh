// Thin wrappers over the sm_90a instructions the kernel uses directly: mbarriers, named
// barriers, proxy fences, register reallocation and wgmma shared-memory descriptors.
#pragma once

#include <stdint.h>

namespace flashmsa::sm90 {

__device__ __forceinline__ uint32_t smem_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// ---- mbarriers -------------------------------------------------------------------------------

// The SM this thread runs on, and the global timer in ns (diagnostics: the timeline build,
// scripts/probes/sm_bandwidth.cu).
__device__ __forceinline__ uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, uint32_t arrive_count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_address(barrier)),
               "r"(arrive_count));
}

// Makes mbarrier.init visible to the async proxy (TMA) before any copy signals the barrier.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbarrier_arrive(uint64_t* barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_address(barrier))
               : "memory");
}

__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                   smem_address(barrier)),
               "r"(bytes)
               : "memory");
}

// Blocks until the phase of the given parity has completed. A fresh barrier counts the phase
// of parity 1 as complete, so a producer's first wait on an "empty" barrier passes at once.
__device__ __forceinline__ void mbarrier_wait(uint64_t* barrier, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_loop:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_loop;\n"
      "}\n" ::"r"(smem_address(barrier)),
      "r"(parity)
      : "memory");
}

// ---- barriers among a subset of warps ----------------------------------------------------------

// Barrier 0 is __syncthreads; ids 1.. are ours (one per consumer warpgroup).
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

// The producing side of a named barrier that others wait on with named_barrier_sync: its
// shared-memory writes before the arrival are visible to them after their wait.
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

// Ordinary shared-memory stores that wgmma or TMA read next must be fenced into the async proxy
// by each writing thread before the barrier that publishes them.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// ---- programmatic dependent launch --------------------------------------------------------------
// Kernels launched with cudaLaunchAttributeProgrammaticStreamSerialization may start while the
// previous kernel of the stream is still running; they must wait here before touching global
// memory. Without that attribute both are no-ops.

__device__ __forceinline__ void wait_for_previous_grid() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Lets the next kernel of the stream be scheduled (it still waits for this one to finish before
// it reads anything: wait_for_previous_grid).
__device__ __forceinline__ void allow_next_grid_launch() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Fetches a TMA descriptor into the descriptor cache ahead of the first copy that uses it.
__device__ __forceinline__ void prefetch_tensor_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- thread-block clusters (distributed shared memory) -----------------------------------------

// Every non-exited thread of the cluster arrives, then waits for the others: release/acquire, so
// shared-memory writes before it are visible to the cluster's reads after it.
__device__ __forceinline__ void cluster_barrier_sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;" ::
          : "memory");
}

// The two halves of a cluster barrier whose arrival and wait are far apart: every thread
// arrives at kernel entry and waits only before it first touches another CTA's shared memory
// (cluster_reduce.cuh: the pushed partials). The arrival is relaxed: what it publishes is the
// mbarrier initialisation, which fence.mbarrier_init.release.cluster orders (a release arrive
// costs a GPU-wide memory barrier, MEMBAR.ALL.GPU, in every thread).
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
}

__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
}

// Adds `bytes` to the transaction count the barrier's current phase waits for, without
// arriving: a receiver announces what remote st.async writes will complete on it.
__device__ __forceinline__ void mbarrier_expect_tx(uint64_t* barrier, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(
                   smem_address(barrier)),
               "r"(bytes)
               : "memory");
}

// Writes into another CTA's shared memory (cluster addresses from cluster_shared_address) whose
// bytes complete on that CTA's mbarrier `remote_barrier`: the receiver waits on its barrier and
// needs no cluster barrier to read them.
__device__ __forceinline__ void store_cluster_async(uint32_t address, float4 value,
                                                    uint32_t remote_barrier) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, "
      "[%5];" ::"r"(address),
      "f"(value.x), "f"(value.y), "f"(value.z), "f"(value.w), "r"(remote_barrier)
      : "memory");
}

__device__ __forceinline__ void store_cluster_async(uint32_t address, float value,
                                                    uint32_t remote_barrier) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];" ::"r"(
                   address),
               "f"(value), "r"(remote_barrier)
               : "memory");
}

// Pins where a value is computed: an empty asm that reads and writes it stops the front end
// from recomputing it later from its operands (constant-bank loads among them). ptxas sees no
// instruction and may still move a plain parameter load (tried/scale-early: the V scale's load
// went back below the loop), so the SASS is what tells whether a value stayed.
__device__ __forceinline__ void keep_in_register(uint32_t& x) { asm volatile("" : "+r"(x)); }
__device__ __forceinline__ void keep_in_register(int& x) { asm volatile("" : "+r"(x)); }
template <typename T>
__device__ __forceinline__ void keep_in_register(T*& x) {
  asm volatile("" : "+l"(x));
}

// The address of the same shared-memory location in the cluster's CTA `rank`.
__device__ __forceinline__ uint32_t cluster_shared_address(const void* pointer, uint32_t rank) {
  uint32_t address;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(address)
               : "r"(smem_address(pointer)), "r"(rank));
  return address;
}

__device__ __forceinline__ float load_cluster_shared(uint32_t address) {
  float value;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(value) : "r"(address) : "memory");
  return value;
}

__device__ __forceinline__ float4 load_cluster_shared4(uint32_t address) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(address)
               : "memory");
  return v;
}

// ---- register reallocation between warpgroups ----------------------------------------------------

template <int kRegisters>
__device__ __forceinline__ void registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

template <int kRegisters>
__device__ __forceinline__ void registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

// One 4-byte asynchronous copy (cp.async) from global into shared memory, of which the first
// `source_bytes` (0..4) are read and the rest written as zeros.
__device__ __forceinline__ void copy_word_async(void* destination, const void* source,
                                                int source_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(smem_address(destination)),
               "l"(source), "r"(source_bytes)
               : "memory");
}

// Arrives on `barrier` once this thread's asynchronous copies so far have landed (the arrival
// counts toward the barrier's expected count: .noinc).
__device__ __forceinline__ void arrive_when_copied(uint64_t* barrier) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(
                   smem_address(barrier))
               : "memory");
}

// ---- wgmma shared-memory matrix descriptors ------------------------------------------------------
//
// Operands live in 128-byte-swizzled panels: rows of 128 bytes (64 16-bit values), 8 rows form
// one 1024-byte swizzle atom. Bits: [0,14) start address >> 4, [16,30) leading byte offset >> 4,
// [32,46) stride byte offset >> 4, [62,64) layout (1 = 128-byte swizzle).

__device__ __forceinline__ uint64_t make_descriptor(uint32_t smem_byte_address,
                                                    uint32_t leading_byte_offset,
                                                    uint32_t stride_byte_offset) {
  return static_cast<uint64_t>((smem_byte_address & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>(leading_byte_offset >> 4) << 16) |
         (static_cast<uint64_t>(stride_byte_offset >> 4) << 32) | (1ull << 62);
}

// K-major operand (rows = M or N, contiguous = the reduction dim): consecutive 8-row atoms are
// 1024 bytes apart; the leading offset is unused by the 128-byte swizzle and set to 1 (16 B).
__device__ __forceinline__ uint64_t kmajor_descriptor(uint32_t smem_byte_address) {
  return make_descriptor(smem_byte_address, 16, 1024);
}

// MN-major operand (V as the B operand of P.V: rows = keys = the reduction dim, contiguous =
// head dim = N): the next 64-wide head-dim panel is `panel_bytes` away (leading offset), the
// next 8 keys 1024 bytes (stride offset).
__device__ __forceinline__ uint64_t mnmajor_descriptor(uint32_t smem_byte_address,
                                                       uint32_t panel_bytes) {
  return make_descriptor(smem_byte_address, panel_bytes, 1024);
}

}  // namespace flashmsa::sm90
