// The Hopper backend of a CPU-only build (no nvcc, or FLASHMSA_CUDA=OFF): it reports that it is
// absent, so CUDA calls fail with FLASHMSA_ERROR_NOT_SUPPORTED instead of at link time.
#include "api/backends.h"
#include "common/error.h"

namespace flashmsa {

bool sm90_compiled() { return false; }

sm90::LaunchPlan plan_sm90(const flashmsa_args&, const flashmsa_tuning&) {
  fail_not_supported("device: this build has no CUDA kernels (built without nvcc)");
}

void run_sm90(const flashmsa_args&, const sm90::LaunchPlan&) {
  fail_not_supported("device: this build has no CUDA kernels (built without nvcc)");
}

}  // namespace flashmsa
