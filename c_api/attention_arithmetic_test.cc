// gpe_attention_options.bf16_arithmetic and .float32_arithmetic through gpe.h (since
// 0.10.0): each value reaches the CPU kernels. The split float32 modes and the AMX tiles
// run on the emulated tiles here (attention/cpu/kernels_amx.h; on an AMX CPU the test
// runs them on the hardware too, as the kernels' own tests do): their outputs differ
// from EXACT's / DOT_PRODUCTS' in some bits (another arithmetic ran) and stay within
// their accuracy; without usable tiles they equal EXACT / DOT_PRODUCTS bit for bit. The
// backward recomputes the forward with the same arithmetic; AUTO is what the one-time probe
// picks. Out-of-range values and an in-between struct size are refused; 0.10.0's earlier
// size (ending at cuda_stream) is read as AUTO / EXACT.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "attention/cpu/cpu_attention.h"
#include "attention/cpu/kernels_amx.h"
#include "c_api/include/gpe/gpe.h"
#include "c_api/test_util.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::Draw;
using gpe::c_api_test::HasMessage;
using gpe::c_api_test::Tensor;

constexpr int64_t kB = 1, kS = 80, kHq = 4, kHk = 2, kD = 64;

class EmulationScope {
 public:
  explicit EmulationScope(bool on) { gpe::attention::cpu::SetAmxEmulationForTest(on); }
  ~EmulationScope() { gpe::attention::cpu::SetAmxEmulationForTest(false); }
};

// o of a causal GQA forward with the options' arithmetic; float32 (bits 32) or bfloat16
// (bits 16, the uint16 patterns in the floats' low halves) inputs.
std::vector<float> Forward(const gpe_attention_options& opt, int bits) {
  std::vector<int64_t> qs = {kB, kS, kHq, kD}, ks = {kB, kS, kHk, kD};
  const std::vector<float> q = Draw<float>(kB * kS * kHq * kD, 1),
                           k = Draw<float>(kB * kS * kHk * kD, 2),
                           v = Draw<float>(kB * kS * kHk * kD, 3);
  std::vector<float> o(q.size());
  if (bits == 32) {
    DLTensor tq = Tensor(q.data(), kDLFloat, 32, &qs), tk = Tensor(k.data(), kDLFloat, 32, &ks),
             tv = Tensor(v.data(), kDLFloat, 32, &ks), to = Tensor(o.data(), kDLFloat, 32, &qs);
    EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, nullptr), GPE_OK)
        << gpe_last_error_message();
    return o;
  }
  auto to16 = [](const std::vector<float>& x) {
    std::vector<uint16_t> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = gpe::encodings::sequence::ToBFloat16(x[i]).bits;
    return y;
  };
  const std::vector<uint16_t> q16 = to16(q), k16 = to16(k), v16 = to16(v);
  std::vector<uint16_t> o16(q.size());
  DLTensor tq = Tensor(q16.data(), kDLBfloat, 16, &qs), tk = Tensor(k16.data(), kDLBfloat, 16, &ks),
           tv = Tensor(v16.data(), kDLBfloat, 16, &ks), to = Tensor(o16.data(), kDLBfloat, 16, &qs);
  EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, nullptr), GPE_OK)
      << gpe_last_error_message();
  for (size_t i = 0; i < o.size(); ++i) {
    gpe::encodings::sequence::BFloat16 b;
    b.bits = o16[i];
    o[i] = gpe::encodings::sequence::ToFloat(b);
  }
  return o;
}

gpe_attention_options Options(int32_t bf16, int32_t float32) {
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  opt.causal = 1;
  opt.num_threads = 2;
  opt.bf16_arithmetic = bf16;
  opt.float32_arithmetic = float32;
  return opt;
}

// Largest |a - b|, and how many entries differ in their bits.
std::pair<double, int> Compare(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0.0;
  int differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
    differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  }
  return {err, differ};
}

TEST(AttentionArithmetic, Float32SplitModesReachTheKernels) {
  const std::vector<float> exact = Forward(Options(0, GPE_FLOAT32_ARITHMETIC_EXACT), 32);
  if (!gpe::attention::CpuAmxUsable()) {
    // No tiles (and the emulation off): the split modes are EXACT bit for bit.
    for (int32_t f : {GPE_FLOAT32_ARITHMETIC_SPLIT_BF16X6, GPE_FLOAT32_ARITHMETIC_SPLIT_BF16X3}) {
      EXPECT_EQ(Compare(Forward(Options(0, f), 32), exact).second, 0) << f;
    }
  }
  if (!gpe::attention::CpuHasBf16DotProducts()) GTEST_SKIP() << "no AVX512_BF16: no tile emulation";
  EmulationScope emulate(true);
  const int64_t dots = gpe::attention::cpu::AmxEmulatedDotsForTest();
  // Six terms: float32's accuracy (O(1) outputs: within 1e-5 of float32 FMAs'); three
  // terms: 2^-16 per product (within 1e-3 here), and further than six.
  const auto [err6, differ6] = Compare(Forward(Options(0, GPE_FLOAT32_ARITHMETIC_SPLIT_BF16X6), 32), exact);
  const auto [err3, differ3] = Compare(Forward(Options(0, GPE_FLOAT32_ARITHMETIC_SPLIT_BF16X3), 32), exact);
  EXPECT_GT(gpe::attention::cpu::AmxEmulatedDotsForTest(), dots) << "no tile ran";
  EXPECT_GT(differ6, 0);
  EXPECT_LT(err6, 1e-5);
  EXPECT_GT(err3, err6);
  EXPECT_LT(err3, 1e-3);
}

TEST(AttentionArithmetic, Bf16ModesReachTheKernels) {
  if (!gpe::attention::CpuHasBf16DotProducts()) {
    GTEST_SKIP() << "no AVX512_BF16: every bf16 mode widens to float32";
  }
  const std::vector<float> dots = Forward(Options(GPE_BF16_ARITHMETIC_DOT_PRODUCTS, 0), 16);
  const std::vector<float> widen = Forward(Options(GPE_BF16_ARITHMETIC_WIDEN, 0), 16);
  // AUTO is one of the two, as the one-time probe decides.
  const std::vector<float> automatic = Forward(Options(GPE_BF16_ARITHMETIC_AUTO, 0), 16);
  EXPECT_EQ(Compare(automatic, gpe::attention::CpuBf16AutoUsesDotProducts() ? dots : widen).second, 0);
  // The dot products round q, k and P to bf16: bf16 outputs move by an ulp or two.
  const auto [err, differ] = Compare(dots, widen);
  EXPECT_GT(differ, 0);
  EXPECT_LT(err, 2e-2);
  if (!gpe::attention::CpuAmxUsable()) {
    EXPECT_EQ(Compare(Forward(Options(GPE_BF16_ARITHMETIC_AMX_TILES, 0), 16), dots).second, 0);
  }
  EmulationScope emulate(true);
  const int64_t n = gpe::attention::cpu::AmxEmulatedDotsForTest();
  const std::vector<float> amx = Forward(Options(GPE_BF16_ARITHMETIC_AMX_TILES, 0), 16);
  EXPECT_GT(gpe::attention::cpu::AmxEmulatedDotsForTest(), n) << "no tile ran";
  EXPECT_LT(Compare(amx, dots).first, 2e-2);
}

// The backward without o and lse recomputes them with the call's arithmetic: with the
// split forward its gradients differ from EXACT's in some bits, by float32 rounding only.
TEST(AttentionArithmetic, BackwardRecomputesWithTheSameArithmetic) {
  if (!gpe::attention::CpuHasBf16DotProducts()) GTEST_SKIP() << "no AVX512_BF16: no tile emulation";
  EmulationScope emulate(true);
  std::vector<int64_t> qs = {kB, kS, kHq, kD}, ks = {kB, kS, kHk, kD};
  const std::vector<float> q = Draw<float>(kB * kS * kHq * kD, 1),
                           k = Draw<float>(kB * kS * kHk * kD, 2),
                           v = Draw<float>(kB * kS * kHk * kD, 3),
                           g = Draw<float>(kB * kS * kHq * kD, 4);
  auto dq = [&](int32_t f) {
    std::vector<float> out(q.size());
    const gpe_attention_options opt = Options(0, f);
    DLTensor tq = Tensor(q.data(), kDLFloat, 32, &qs), tk = Tensor(k.data(), kDLFloat, 32, &ks),
             tv = Tensor(v.data(), kDLFloat, 32, &ks), tg = Tensor(g.data(), kDLFloat, 32, &qs),
             tdq = Tensor(out.data(), kDLFloat, 32, &qs);
    EXPECT_EQ(gpe_attention_backward(&opt, &tq, &tk, &tv, nullptr, nullptr, &tg, &tdq, nullptr,
                                     nullptr),
              GPE_OK)
        << gpe_last_error_message();
    return out;
  };
  const auto [err, differ] =
      Compare(dq(GPE_FLOAT32_ARITHMETIC_SPLIT_BF16X6), dq(GPE_FLOAT32_ARITHMETIC_EXACT));
  EXPECT_GT(differ, 0);
  EXPECT_LT(err, 1e-4);  // gradients of O(1) from scores moved by float32 rounding
}

gpe_status RunForward(const gpe_attention_options& opt) {
  std::vector<int64_t> shape = {1, 4, 2, 8};
  const std::vector<float> x = Draw<float>(64, 5);
  std::vector<float> o(64);
  DLTensor t = Tensor(x.data(), kDLFloat, 32, &shape), to = Tensor(o.data(), kDLFloat, 32, &shape);
  return gpe_attention_forward(&opt, &t, &t, &t, &to, nullptr);
}

TEST(AttentionArithmetic, BadValuesAndSizesAreRefused) {
  for (auto [bf16, f32] : {std::pair<int32_t, int32_t>{4, 0}, {-1, 0}, {0, 3}, {0, -1}}) {
    EXPECT_EQ(RunForward(Options(bf16, f32)), GPE_ERROR_INVALID_ARGUMENT) << bf16 << " " << f32;
    EXPECT_TRUE(HasMessage(bf16 != 0 ? "bf16_arithmetic must be a GPE_BF16_ARITHMETIC_"
                                     : "float32_arithmetic must be a GPE_FLOAT32_ARITHMETIC_"))
        << gpe_last_error_message();
  }
  // 0.10.0's first builds ended at cuda_stream: accepted, the arithmetic fields unread
  // (garbage past the caller's struct is not looked at).
  gpe_attention_options old = Options(77, 77);
  old.struct_size = static_cast<uint32_t>(offsetof(gpe_attention_options, bf16_arithmetic));
  EXPECT_EQ(RunForward(old), GPE_OK) << gpe_last_error_message();
  // A size ending between the two new fields was never released (refused; here already
  // as a size that is not a multiple of the struct's alignment).
  gpe_attention_options mid = Options(0, 0);
  mid.struct_size = static_cast<uint32_t>(offsetof(gpe_attention_options, float32_arithmetic));
  EXPECT_EQ(RunForward(mid), GPE_ERROR_INVALID_ARGUMENT);
}

}  // namespace
