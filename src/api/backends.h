// The backends behind the C entry points. Each receives arguments that src/api/validate.cpp has
// already checked against everything visible on the host, and throws flashmsa::Error on failure.
#pragma once

#include <stddef.h>

#include "flashmsa/flashmsa.h"

namespace flashmsa {

// Contract reference on host memory: fp32 accumulation, work spread over the machine's threads.
void run_cpu(const flashmsa_args& args);

// Hopper (sm_90a) kernels. In a build without nvcc these throw FLASHMSA_ERROR_NOT_SUPPORTED.
bool sm90_compiled();
size_t sm90_workspace_bytes(const flashmsa_args& args);
void run_sm90(const flashmsa_args& args);

}  // namespace flashmsa
