// A C++ user's program on GroupPE's C ABI (c_api/install/cmake_consumer): the library's version
// against the header's, RoPE through a gpe_rope handle against the rotation written out,
// attention with RoPE inside the kernel against the same attention on rotated rows, and
// one bad input reported with its status and message. Exits non-zero on any mismatch.
#include <gpe/gpe.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

DLTensor Tensor(void* data, DLDataTypeCode code, int bits, std::vector<int64_t>& shape) {
  DLTensor t{};
  t.data = data;
  t.device.device_type = kDLCPU;
  t.ndim = static_cast<int32_t>(shape.size());
  t.dtype.code = static_cast<uint8_t>(code);
  t.dtype.bits = static_cast<uint8_t>(bits);
  t.dtype.lanes = 1;
  t.shape = shape.data();
  return t;
}

bool Fail(const char* what) {
  std::fprintf(stderr, "%s: %s\n", what, gpe_last_error_message());
  return false;
}

// RoPE (half-split pairs, base 10000) on [1, 3, 1, 4] rows at positions 0, 1, 2 (the
// defaults): pair i of a row at position p turns by p * 10000^(-2i / 4).
bool RopeMatchesRotation() {
  gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
  o.head_dim = 4;
  o.rotary_dim = 4;
  gpe_rope* rope = nullptr;
  if (gpe_rope_create(&o, &rope) != GPE_OK) return Fail("gpe_rope_create");
  std::vector<double> x = {1, 2, 3, 4, -1, 0.5, 2, -3, 0.25, 1, -2, 1}, y(x.size());
  std::vector<int64_t> shape = {1, 3, 1, 4};
  DLTensor tx = Tensor(x.data(), kDLFloat, 64, shape), ty = Tensor(y.data(), kDLFloat, 64, shape);
  gpe_rope_tokens tokens = GPE_ROPE_TOKENS_INIT;
  const gpe_status s = gpe_rope_forward(rope, &tokens, &tx, &ty);
  gpe_rope_destroy(rope);
  if (s != GPE_OK) return Fail("gpe_rope_forward");
  for (int p = 0; p < 3; ++p) {
    for (int i = 0; i < 2; ++i) {
      const double a = p * std::pow(10000.0, -2.0 * i / 4.0);
      const double* r = x.data() + 4 * p;
      const double want0 = r[i] * std::cos(a) - r[i + 2] * std::sin(a);
      const double want1 = r[i] * std::sin(a) + r[i + 2] * std::cos(a);
      // Angles below 3 rad: a few ulps apart at most, so 1e-12 absolute.
      if (std::fabs(y[4 * p + i] - want0) > 1e-12 || std::fabs(y[4 * p + i + 2] - want1) > 1e-12) {
        std::fprintf(stderr, "RoPE row %d pair %d differs from the rotation\n", p, i);
        return false;
      }
    }
  }
  return true;
}

// Causal attention on [1, 5, 2, 8] float32 with RoPE (rope_dim 8) inside the kernel,
// against the same attention on rows rotated beforehand by a gpe_rope handle.
bool FusedRopeMatchesRotatedRows() {
  const int64_t s = 5, h = 2, d = 8, n = s * h * d;
  std::vector<float> q(n), k(n), v(n), o1(n), o2(n), qr(n), kr(n);
  for (int64_t i = 0; i < n; ++i) {
    q[i] = std::sin(0.37f * i);
    k[i] = std::cos(0.21f * i);
    v[i] = std::sin(0.11f * i + 1.0f);
  }
  std::vector<int64_t> shape = {1, s, h, d};
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, shape), tk = Tensor(k.data(), kDLFloat, 32, shape),
           tv = Tensor(v.data(), kDLFloat, 32, shape), to1 = Tensor(o1.data(), kDLFloat, 32, shape),
           to2 = Tensor(o2.data(), kDLFloat, 32, shape), tqr = Tensor(qr.data(), kDLFloat, 32, shape),
           tkr = Tensor(kr.data(), kDLFloat, 32, shape);
  gpe_attention_options fused = GPE_ATTENTION_OPTIONS_INIT;
  fused.causal = 1;
  fused.rope_dim = d;
  if (gpe_attention_forward(&fused, &tq, &tk, &tv, &to1, nullptr) != GPE_OK) {
    return Fail("gpe_attention_forward (RoPE inside)");
  }
  gpe_rope_options ro = GPE_ROPE_OPTIONS_INIT;
  ro.head_dim = d;
  ro.rotary_dim = d;
  gpe_rope* rope = nullptr;
  if (gpe_rope_create(&ro, &rope) != GPE_OK) return Fail("gpe_rope_create");
  gpe_rope_tokens tokens = GPE_ROPE_TOKENS_INIT;
  const bool rotated = gpe_rope_forward(rope, &tokens, &tq, &tqr) == GPE_OK &&
                       gpe_rope_forward(rope, &tokens, &tk, &tkr) == GPE_OK;
  gpe_rope_destroy(rope);
  if (!rotated) return Fail("gpe_rope_forward");
  gpe_attention_options plain = GPE_ATTENTION_OPTIONS_INIT;
  plain.causal = 1;
  if (gpe_attention_forward(&plain, &tqr, &tkr, &tv, &to2, nullptr) != GPE_OK) {
    return Fail("gpe_attention_forward (rotated rows)");
  }
  // float32 rounding of the rotation and of 8-term dot products over 5 keys: 1e-5.
  for (int64_t i = 0; i < n; ++i) {
    if (std::fabs(o1[i] - o2[i]) > 1e-5f) {
      std::fprintf(stderr, "attention element %lld: %g vs %g\n", static_cast<long long>(i), o1[i], o2[i]);
      return false;
    }
  }
  return true;
}

}  // namespace

int main() {
  if (gpe_version() != GPE_VERSION_NUMBER) {
    std::fprintf(stderr, "header %d but library %d\n", GPE_VERSION_NUMBER, gpe_version());
    return 1;
  }
  if (!RopeMatchesRotation() || !FusedRopeMatchesRotatedRows()) return 1;
  gpe_rope_options bad = GPE_ROPE_OPTIONS_INIT;
  bad.head_dim = 4;
  bad.rotary_dim = 3;  // odd: refused
  gpe_rope* rope = nullptr;
  if (gpe_rope_create(&bad, &rope) != GPE_ERROR_INVALID_ARGUMENT ||
      gpe_last_error_message()[0] == '\0' || rope != nullptr) {
    std::fprintf(stderr, "an odd rotary_dim was not refused with a message\n");
    return 1;
  }
  std::printf("GroupPE %s from CMake: RoPE and attention match; bad input says \"%s\"\n",
              gpe_version_string(), gpe_last_error_message());
  return 0;
}
