// Host-side checks of a flashmsa_args (contract section 8), shared by every entry point.
#pragma once

#include "flashmsa/flashmsa.h"

namespace flashmsa {

// Checks `args` against everything visible on the host, in a fixed order, and throws
// flashmsa::Error naming the first offending field: FLASHMSA_ERROR_INVALID_ARGUMENT for wrong or
// contradicting values, FLASHMSA_ERROR_NOT_SUPPORTED for valid shapes this library does not
// implement (head_dim other than 128). Never reads the memory the pointers point at: index
// values, sequence lengths and page ids may live on the device and are made safe by the backends.
void validate_args(const flashmsa_args* args);

// Bytes each NVFP4 scale tensor needs for these shapes (0 for other K/V dtypes).
int64_t nvfp4_scale_bytes_required(const flashmsa_args& args);

}  // namespace flashmsa
