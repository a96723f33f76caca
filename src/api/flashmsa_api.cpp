// The C entry points: validate -> dispatch to a backend. C++ exceptions stop here and become a
// status plus the thread's last-error text; nothing below this file ever exits the process.
#include <cmath>
#include <exception>
#include <string>

#include "api/backends.h"
#include "api/guarded.h"
#include "api/validate.h"
#include "common/error.h"
#include "flashmsa/flashmsa.h"
#include "flashmsa/flashmsa_testing.h"

namespace flashmsa {
namespace {

thread_local std::string last_error;

// Runs `body`, turning any exception into a status and the thread's last-error text. A
// successful call clears the text so that flashmsa_last_error() describes this call.
template <typename Body>
flashmsa_status guarded(Body&& body) {
  try {
    body();
    last_error.clear();
    return FLASHMSA_OK;
  } catch (const Error& error) {
    last_error = error.what();
    return error.status();
  } catch (const std::exception& error) {
    last_error = std::string("internal error: ") + error.what();
    return FLASHMSA_ERROR_INTERNAL;
  } catch (...) {
    last_error = "internal error: unknown exception";
    return FLASHMSA_ERROR_INTERNAL;
  }
}

void require_cuda_build() {
  if (!sm90_compiled()) {
    fail_not_supported(
        "device: FLASHMSA_DEVICE_CUDA requested, but this library was built without CUDA "
        "(CPU tensors only)");
  }
}

// What every entry point does first: the arguments, then (CUDA) the launch plan, once each.
sm90::LaunchPlan validate_and_plan(const flashmsa_args* args, const flashmsa_tuning* tuning) {
  validate_args(args);
  if (args->device == FLASHMSA_DEVICE_CPU) return sm90::LaunchPlan{};
  require_cuda_build();
  return plan_sm90(*args, tuning != nullptr ? *tuning : sm90::default_tuning());
}

// One call: validation, the plan, scratch memory from args->workspace or else workspace_fn,
// the launch.
void sparse_attention(const flashmsa_args* args, const flashmsa_tuning* tuning,
                      flashmsa_workspace_fn workspace_fn, void* context) {
  const sm90::LaunchPlan plan = validate_and_plan(args, tuning);
  if (args->device == FLASHMSA_DEVICE_CPU) {
    run_cpu(*args);
    return;
  }
  flashmsa_args call = *args;
  const size_t required = plan.workspace.bytes;
  if (call.workspace_bytes < required) {
    if (workspace_fn == nullptr) {
      fail_invalid("workspace_bytes: expected at least " + std::to_string(required) +
                   " (flashmsa_workspace_bytes), got " + std::to_string(call.workspace_bytes));
    }
    call.workspace = workspace_fn(required, context);
    if (call.workspace == nullptr) {
      fail_invalid("workspace: the workspace function gave no memory for " +
                   std::to_string(required) + " bytes");
    }
    call.workspace_bytes = required;
  }
  run_sm90(call, plan);
}

}  // namespace
}  // namespace flashmsa

FLASHMSA_API void flashmsa_args_init(flashmsa_args* args) {
  if (args == nullptr) return;
  *args = flashmsa_args{};  // zero sizes and strides, NULL pointers, flags off
  args->device = FLASHMSA_DEVICE_CPU;
  args->device_index = 0;
  args->stream = nullptr;
  args->q_dtype = FLASHMSA_DTYPE_BF16;
  args->kv_dtype = FLASHMSA_DTYPE_BF16;
  args->q_offset_mode = FLASHMSA_Q_OFFSET_END_ALIGNED;
  args->softmax_scale = static_cast<float>(1.0 / std::sqrt(128.0));
  args->k_global_scale = 1.0f;
  args->v_global_scale = 1.0f;
  args->lse_temperature_scale = 1.0f;
  args->k_global_scale_device = nullptr;
  args->v_global_scale_device = nullptr;
  args->nvfp4_scale_layout = FLASHMSA_NVFP4_SCALES_SWIZZLED;
  args->k_token_scale = nullptr;
  args->v_token_scale = nullptr;
}

FLASHMSA_API flashmsa_status flashmsa_workspace_bytes(const flashmsa_args* args, size_t* bytes) {
  return flashmsa::guarded([&] {
    if (bytes == nullptr) flashmsa::fail_invalid("bytes: must not be NULL");
    *bytes = 0;
    *bytes = flashmsa::validate_and_plan(args, nullptr).workspace.bytes;
  });
}

FLASHMSA_API flashmsa_status flashmsa_sparse_attention(const flashmsa_args* args) {
  return flashmsa::guarded([&] { flashmsa::sparse_attention(args, nullptr, nullptr, nullptr); });
}

FLASHMSA_API flashmsa_status flashmsa_sparse_attention_with_workspace_fn(
    const flashmsa_args* args, flashmsa_workspace_fn workspace_fn, void* context) {
  return flashmsa::guarded(
      [&] { flashmsa::sparse_attention(args, nullptr, workspace_fn, context); });
}

// Test-only entry points (flashmsa_testing.h).

FLASHMSA_API void flashmsa_tuning_init(flashmsa_tuning* tuning) {
  if (tuning == nullptr) return;
  tuning->splits = tuning->decode_kernel = tuning->one_consumer = tuning->tiles_outer =
      tuning->evict_first = tuning->l2_promotion = tuning->speculate = tuning->deep_pipeline =
          tuning->ctas_per_sm = tuning->stages = tuning->prefill_stages = tuning->throttle =
              tuning->pace = tuning->cluster = tuning->push = tuning->warp_plan =
                  tuning->token_warps = FLASHMSA_TUNING_DEFAULT;
}

FLASHMSA_API flashmsa_status flashmsa_sparse_attention_tuned(const flashmsa_args* args,
                                                             const flashmsa_tuning* tuning,
                                                             flashmsa_workspace_fn workspace_fn,
                                                             void* context) {
  return flashmsa::guarded(
      [&] { flashmsa::sparse_attention(args, tuning, workspace_fn, context); });
}

FLASHMSA_API const char* flashmsa_last_error(void) { return flashmsa::last_error.c_str(); }

FLASHMSA_API int flashmsa_has_cuda(void) { return flashmsa::sm90_compiled() ? 1 : 0; }

FLASHMSA_API int flashmsa_abi_version(void) { return FLASHMSA_ABI_VERSION; }

// The guard above, for the entry points that live in other files of src/api/ (api/guarded.h).
flashmsa_status flashmsa::run_guarded(const std::function<void()>& body) {
  return guarded(body);
}
