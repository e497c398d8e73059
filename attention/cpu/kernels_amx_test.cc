// The AMX tile kernels (kernels_amx.h): the emulated TDPBF16PS against the instruction's
// definition (and against the instruction, bit for bit, where the CPU has it), and
// ScoreTileAmx / AccumulateTileAmx against double sums of the same bf16 values on shapes
// below, at and above the 16-row blocks, the 32-component and 32-key steps and the 2 x 2
// tile blocking, on the emulated tiles everywhere and on the hardware's where usable.
#include "attention/cpu/kernels_amx.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention/cpu/kernels.h"
#include "attention/cpu/kernels_bf16.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"

namespace gpe {
namespace attention {
namespace {

uint16_t Bf(float x) { return encodings::sequence::ToBFloat16(x).bits; }
double Fl(uint16_t h) {
  encodings::sequence::BFloat16 b;
  b.bits = h;
  return encodings::sequence::ToFloat(b);
}

// The modes a test runs in: emulated always, the hardware's tiles where usable.
std::vector<bool> Modes() {
  std::vector<bool> m = {true};
  if (cpu::AmxHardwareUsable()) m.push_back(false);
  return m;
}

class EmulationScope {
 public:
  explicit EmulationScope(bool on) { cpu::SetAmxEmulationForTest(on); }
  ~EmulationScope() { cpu::SetAmxEmulationForTest(false); }
};

TEST(Amx, EmulatedTileDotFollowsTheDefinition) {
  // Normal inputs: each C entry is c + the sum of 32 exact bf16 products, rounded after
  // each addition: within 32 float roundings of the double sum (2e-6 relative to the sum
  // of magnitudes). Then the order of those roundings exactly, on constructed cases;
  // subnormal bf16 inputs count as 0 (exactly: C unchanged), subnormal results are
  // flushed to 0.
  std::mt19937_64 rng(1);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<uint16_t> a(16 * 32), b(16 * 32);
  std::vector<float> c(256), c0(256);
  for (auto& x : a) x = Bf(n(rng));
  for (auto& x : b) x = Bf(n(rng));
  for (auto& x : c0) x = n(rng);
  c = c0;
  cpu::TileDotBf16Emulated(c.data(), a.data(), b.data());
  for (int m = 0; m < 16; ++m) {
    for (int j = 0; j < 16; ++j) {
      double want = c0[m * 16 + j], mag = std::abs(want);
      for (int k = 0; k < 32; ++k) {
        const double t = Fl(a[m * 32 + k]) * Fl(b[(k / 2) * 32 + 2 * j + k % 2]);
        want += t;
        mag += std::abs(t);
      }
      EXPECT_NEAR(c[m * 16 + j], want, 2e-6 * mag) << m << " " << j;
    }
  }
  // The order of the roundings, exactly (the SDM's: even and odd products summed apart
  // from 0, then added to C). C = 1 and two even products of 2^-24: E = 2^-23, C = 1 +
  // 2^-23 (adding each product to C in turn would leave 1, each sum a tie to even). One
  // even and one odd product of 2^-24: E + O = 2^-23, the same. Even products 1, 2^-24,
  // -1 in order of k with C = 0: E = 1 after the second (a tie to even), 0 after the
  // third (the exact sum is 2^-24).
  auto single = [](std::vector<std::pair<int, float>> a_entries,
                   std::vector<std::pair<int, float>> b_entries, float start) {
    std::vector<uint16_t> ta(16 * 32, 0), tb(16 * 32, 0);
    for (auto [i, x] : a_entries) ta[i] = Bf(x);  // row 0
    for (auto [i, x] : b_entries) tb[i] = Bf(x);  // column 0: entries k * 32 + (0 or 1)
    std::vector<float> tc(256, 0.0f);
    tc[0] = start;
    cpu::TileDotBf16Emulated(tc.data(), ta.data(), tb.data());
    return tc[0];
  };
  const float t12 = std::ldexp(1.0f, -12);
  EXPECT_EQ(single({{0, t12}, {2, t12}}, {{0, t12}, {32, t12}}, 1.0f), 1.0f + std::ldexp(1.0f, -23));
  EXPECT_EQ(single({{0, t12}, {1, t12}}, {{0, t12}, {1, t12}}, 1.0f), 1.0f + std::ldexp(1.0f, -23));
  EXPECT_EQ(single({{0, 1.0f}, {2, t12}, {4, -1.0f}}, {{0, 1.0f}, {32, t12}, {64, 1.0f}}, 0.0f),
            0.0f);
  // Subnormal inputs: bf16 0x0001 (2^-133) and 0x8040 against 1e30: zero contributions.
  std::vector<uint16_t> sub(16 * 32, 0x0001), big(16 * 32, Bf(1e30f));
  sub[5] = 0x8040;
  c = c0;
  cpu::TileDotBf16Emulated(c.data(), sub.data(), big.data());
  EXPECT_EQ(c, c0);
  // Subnormal results: 2^-70 * 2^-70 = 2^-140 with C = 0 flushes to +0.
  std::vector<uint16_t> tiny(16 * 32, Bf(std::ldexp(1.0f, -70)));
  std::fill(c.begin(), c.end(), 0.0f);
  cpu::TileDotBf16Emulated(c.data(), tiny.data(), tiny.data());
  for (float x : c) EXPECT_EQ(x, 0.0f);
}

TEST(Amx, HardwareTileDotEqualsTheEmulation) {
  if (!cpu::AmxHardwareUsable()) {
    GTEST_SKIP() << "no usable AMX-BF16 on this CPU (the emulation is tested above)";
  }
  std::mt19937_64 rng(2);
  std::uniform_int_distribution<int> bits(0, 0xFFFF);
  for (int round = 0; round < 50; ++round) {
    std::vector<uint16_t> a(16 * 32), b(16 * 32);
    std::vector<float> c(256);
    for (auto& x : a) {
      x = static_cast<uint16_t>(bits(rng));
      if ((x & 0x7F80) == 0x7F80) x &= 0xBFFF;  // finite (NaN payloads aside)
    }
    for (auto& x : b) {
      x = static_cast<uint16_t>(bits(rng));
      if ((x & 0x7F80) == 0x7F80) x &= 0xBFFF;
    }
    for (auto& x : c) x = static_cast<float>(bits(rng)) - 32768.0f;
    std::vector<float> hw = c, emu = c;
    cpu::TileDotBf16Hardware(hw.data(), a.data(), b.data());
    cpu::TileDotBf16Emulated(emu.data(), a.data(), b.data());
    for (int i = 0; i < 256; ++i) {
      if (std::isnan(hw[i]) && std::isnan(emu[i])) continue;
      ASSERT_EQ(std::memcmp(&hw[i], &emu[i], sizeof(float)), 0)
          << "round " << round << " at " << i << ": " << hw[i] << " vs " << emu[i];
    }
  }
}

TEST(Amx, ScoreTileMatchesDoubleSums) {
  if (!cpu::HasBf16DotProduct()) GTEST_SKIP() << "no AVX512_BF16 (the tails' kernels)";
  std::mt19937_64 rng(3);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (bool emulate : Modes()) {
    EmulationScope scope(emulate);
    for (int64_t d : {32, 64, 96, 128, 80, 31}) {
      for (int64_t mq : {1, 15, 16, 17, 31, 32, 33, 48, 100}) {
        for (int64_t num_panels : {1, 2, 3}) {
          const int64_t ldq = (d + 1) / 2 * 2, nk = num_panels * cpu::kPanel - 5;
          const int64_t lds = num_panels * cpu::kPanel + 3;
          std::vector<uint16_t> q(mq * ldq, 0), keys(nk * d);
          for (int64_t r = 0; r < mq; ++r) {
            for (int64_t c = 0; c < d; ++c) q[r * ldq + c] = Bf(n(rng));
          }
          for (auto& x : keys) x = Bf(n(rng));
          std::vector<uint16_t> panels(num_panels * ldq * cpu::kPanel);
          cpu::PackKeyPanelsBf16(keys.data(), nk, d, d, panels.data());
          std::vector<float> s(mq * lds, -7.0f);
          cpu::ScoreTileAmx(q.data(), ldq, mq, d, panels.data(), num_panels, s.data(), lds);
          const std::string at = std::string(emulate ? "emulated" : "hardware") + " d " +
                                 std::to_string(d) + " mq " + std::to_string(mq) + " panels " +
                                 std::to_string(num_panels);
          for (int64_t r = 0; r < mq; ++r) {
            for (int64_t j = 0; j < lds; ++j) {
              const float got = s[r * lds + j];
              if (j >= num_panels * cpu::kPanel) {
                ASSERT_EQ(got, -7.0f) << at;
                continue;
              }
              double want = 0.0, mag = 0.0;
              for (int64_t c = 0; j < nk && c < d; ++c) {
                const double t = Fl(q[r * ldq + c]) * Fl(keys[j * d + c]);
                want += t;
                mag += std::abs(t);
              }
              // Float sums of d <= 128 exact products: 128 roundings at most.
              ASSERT_NEAR(got, want, 1e-5 * mag + 1e-30) << at << " r " << r << " j " << j;
            }
          }
        }
      }
    }
  }
}

TEST(Amx, AccumulateTileMatchesDoubleSums) {
  if (!cpu::HasBf16DotProduct()) GTEST_SKIP() << "no AVX512_BF16 (the tails' kernels)";
  std::mt19937_64 rng(4);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (bool emulate : Modes()) {
    EmulationScope scope(emulate);
    for (int64_t dp : {16, 32, 48, 128}) {
      for (int64_t nk : {1, 31, 32, 33, 64, 100, 128}) {
        for (int64_t mq : {1, 15, 16, 17, 33, 96}) {
          const int64_t ldp = (nk + 1) / 2 * 2 + 2, ldo = dp + 5;
          std::vector<uint16_t> p(mq * ldp, 0), vals(nk * dp);
          for (int64_t r = 0; r < mq; ++r) {
            for (int64_t j = 0; j < nk; ++j) p[r * ldp + j] = Bf(u(rng));
          }
          for (auto& x : vals) x = Bf(n(rng));
          std::vector<uint16_t> pairs((nk + 1) / 2 * 2 * dp);
          cpu::PackValuePairsBf16(vals.data(), nk, dp, dp, dp, pairs.data());
          std::vector<float> alpha(mq), o(mq * ldo);
          for (int64_t r = 0; r < mq; ++r) alpha[r] = r % 3 == 0 ? 1.0f : u(rng);
          for (auto& x : o) x = n(rng);
          const std::vector<float> o0 = o;
          cpu::AccumulateTileAmx(p.data(), ldp, mq, nk, pairs.data(), dp, alpha.data(), o.data(),
                                 ldo);
          const std::string at = std::string(emulate ? "emulated" : "hardware") + " dp " +
                                 std::to_string(dp) + " nk " + std::to_string(nk) + " mq " +
                                 std::to_string(mq);
          for (int64_t r = 0; r < mq; ++r) {
            for (int64_t c = 0; c < ldo; ++c) {
              const float got = o[r * ldo + c];
              if (c >= dp) {
                ASSERT_EQ(got, o0[r * ldo + c]) << at;
                continue;
              }
              double want = double(alpha[r]) * o0[r * ldo + c], mag = std::abs(want);
              for (int64_t j = 0; j < nk; ++j) {
                const double t = Fl(p[r * ldp + j]) * Fl(vals[j * dp + c]);
                want += t;
                mag += std::abs(t);
              }
              // The rescaling and float sums of nk + 1 terms.
              ASSERT_NEAR(got, want, 2e-5 * mag + 1e-30) << at << " r " << r << " c " << c;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace attention
}  // namespace gpe
