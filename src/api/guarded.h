// The guard of every C entry point: one thread-local last-error text for the whole library
// (flashmsa_last_error), whichever file of src/api/ defines the entry point.
#pragma once

#include <functional>

#include "flashmsa/flashmsa.h"

namespace flashmsa {

// Runs `body`, turning any exception into a status and the thread's last-error text (a
// flashmsa::Error keeps its status and message); success clears the text. Defined in
// flashmsa_api.cpp, next to flashmsa_last_error.
flashmsa_status run_guarded(const std::function<void()>& body);

}  // namespace flashmsa
