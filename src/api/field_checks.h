// The field checks of the C entry points' validation (validate.cpp, merge_states.cpp): each
// throws flashmsa::Error (FLASHMSA_ERROR_INVALID_ARGUMENT) with a message naming the field.
#pragma once

#include <stdint.h>
#include <string.h>

#include <sstream>
#include <string>

#include "common/error.h"

namespace flashmsa {

// Builds "field: expected <expected>, got <value>".
template <typename T>
[[noreturn]] inline void fail_field(const std::string& field, const std::string& expected,
                                    const T& value) {
  std::ostringstream message;
  message << field << ": expected " << expected << ", got " << value;
  fail_invalid(message.str());
}

inline void require_pointer(const void* pointer, const std::string& field,
                            const std::string& why) {
  if (pointer == nullptr) fail_invalid(field + ": must not be NULL " + why);
}

inline void require_null(const void* pointer, const std::string& field, const std::string& why) {
  if (pointer != nullptr) fail_invalid(field + ": must be NULL " + why);
}

inline void require_non_negative(int64_t value, const std::string& field) {
  if (value < 0) fail_field(field, "a size >= 0", value);
}

inline void require_flag(int32_t value, const std::string& field) {
  if (value != 0 && value != 1) fail_field(field, "0 or 1", value);
}

// The raw integer in an enum field. A C caller (ctypes, say) may store any int there, and
// loading an out-of-range value through the C++ enum type is undefined behaviour, so the
// validation reads enum fields through this and only the backends use them as enums.
template <typename Enum>
int raw_enum(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized on supported ABIs");
  int value;
  memcpy(&value, &field, sizeof(value));
  return value;
}

}  // namespace flashmsa
