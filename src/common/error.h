// Errors inside the library are C++ exceptions carrying a status and a message; the C entry
// points (src/api/) catch them and turn them into a status code plus flashmsa_last_error().
#pragma once

#include <stdexcept>
#include <string>

#include "flashmsa/flashmsa.h"

namespace flashmsa {

class Error : public std::runtime_error {
 public:
  Error(flashmsa_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  flashmsa_status status() const { return status_; }

 private:
  flashmsa_status status_;
};

[[noreturn]] inline void fail_invalid(const std::string& message) {
  throw Error(FLASHMSA_ERROR_INVALID_ARGUMENT, message);
}

[[noreturn]] inline void fail_not_supported(const std::string& message) {
  throw Error(FLASHMSA_ERROR_NOT_SUPPORTED, message);
}

}  // namespace flashmsa
