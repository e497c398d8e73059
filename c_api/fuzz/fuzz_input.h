// Helpers shared by the C ABI's fuzz targets: reading typed values from the fuzzer's
// bytes, and the invariants every call must keep (a known status; a message on failure).
#ifndef GPE_C_API_FUZZ_FUZZ_INPUT_H_
#define GPE_C_API_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "gpe/gpe.h"

namespace gpe::fuzz {

// Reads little pieces of the input; past the end every read gives zero.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  template <typename T>
  T Read() {
    T v;
    std::memset(&v, 0, sizeof v);
    const size_t n = size_ - pos_ < sizeof v ? size_ - pos_ : sizeof v;
    std::memcpy(&v, data_ + pos_, n);
    pos_ += n;
    return v;
  }
  // A value in [0, n), n > 0.
  uint32_t Below(uint32_t n) { return Read<uint32_t>() % n; }
  // Mostly small sizes, sometimes anything (negative, huge): what validation must handle.
  int64_t Size(int64_t small) {
    const uint8_t mode = Read<uint8_t>();
    if (mode < 200) return static_cast<int64_t>(Read<uint16_t>() % (small + 1));
    if (mode < 230) return -static_cast<int64_t>(Read<uint16_t>());
    return Read<int64_t>();
  }
  // A double that is often ordinary and sometimes NaN, infinite, huge or tiny.
  double Real() {
    switch (Read<uint8_t>() % 8) {
      case 0: return std::numeric_limits<double>::quiet_NaN();
      case 1: return std::numeric_limits<double>::infinity();
      case 2: return Read<double>();
      default: return static_cast<double>(Read<int16_t>()) / 1024.0;
    }
  }
  bool empty() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Every status is one gpe.h defines, and every failure leaves a message.
inline void CheckStatus(gpe_status s) {
  if (s < GPE_OK || s > GPE_ERROR_VERSION_MISMATCH) __builtin_trap();
  if (s == GPE_ERROR_INTERNAL) __builtin_trap();  // a bug by gpe.h's own definition
  if (s != GPE_OK && gpe_last_error_message()[0] == '\0') __builtin_trap();
}

}  // namespace gpe::fuzz

#endif  // GPE_C_API_FUZZ_FUZZ_INPUT_H_
