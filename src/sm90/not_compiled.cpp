// The Hopper backend of a CPU-only build (no nvcc, or FLASHMSA_CUDA=OFF): it reports that it is
// absent, so CUDA calls fail with FLASHMSA_ERROR_NOT_SUPPORTED instead of at link time.
#include "api/backends.h"
#include "common/error.h"

namespace flashmsa {

bool sm90_compiled() { return false; }

size_t sm90_workspace_bytes(const flashmsa_args&) { return 0; }

void run_sm90(const flashmsa_args&) {
  fail_not_supported("device: this build has no CUDA kernels (built without nvcc)");
}

}  // namespace flashmsa
