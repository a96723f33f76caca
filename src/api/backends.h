// The backends behind the C entry points. Each receives arguments that src/api/validate.cpp has
// already checked against everything visible on the host, and throws flashmsa::Error on failure.
#pragma once

#include <stddef.h>

#include "flashmsa/flashmsa.h"
#include "flashmsa/flashmsa_testing.h"
#include "sm90/launch_plan.h"

namespace flashmsa {

// Contract reference on host memory: fp32 accumulation, work spread over the machine's threads.
void run_cpu(const flashmsa_args& args);

// Hopper (sm_90a) kernels. In a build without nvcc plan_sm90 and run_sm90 throw
// FLASHMSA_ERROR_NOT_SUPPORTED.
bool sm90_compiled();
// Checks what only the Hopper kernels require (the device, dtypes, alignment), then plans the
// call's launch (launch_plan.h), before any work starts.
sm90::LaunchPlan plan_sm90(const flashmsa_args& args, const flashmsa_tuning& tuning);
// Launches `plan`, whose workspace args.workspace holds (plan.workspace.bytes of it).
void run_sm90(const flashmsa_args& args, const sm90::LaunchPlan& plan);

}  // namespace flashmsa
