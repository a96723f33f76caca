// The guard of every C entry point: one thread-local last-error text for the whole library
// (flashmsa_last_error), whichever file of src/api/ defines the entry point; and the export
// macro they are defined with.
#pragma once

#include <functional>

#include "flashmsa/flashmsa.h"

// What the library exports: the C entry points, with default visibility in a library built with
// hidden visibility.
#define FLASHMSA_API extern "C" __attribute__((visibility("default")))

namespace flashmsa {

// Runs `body`, turning any exception into a status and the thread's last-error text (a
// flashmsa::Error keeps its status and message); success clears the text. Defined in
// flashmsa_api.cpp, next to flashmsa_last_error.
flashmsa_status run_guarded(const std::function<void()>& body);

}  // namespace flashmsa
