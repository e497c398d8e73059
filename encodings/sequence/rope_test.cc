#include "encodings/sequence/rope.h"
#include "group/angle.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "gtest/gtest.h"
#include "group/so_planes.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

constexpr double kPi = 3.14159265358979323846;

std::vector<double> Normal(int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

// Independent reference theta_i = exp(-(2i/r) ln base).
std::vector<double> RefThetas(int64_t r, double base) {
  std::vector<double> t(r / 2);
  for (int64_t i = 0; i < r / 2; ++i) t[i] = std::exp(-2.0 * i / r * std::log(base));
  return t;
}

// Reference rotation of one head vector, straight from the published formula, in long
// double (p * theta formed in 64-bit-mantissa arithmetic: exact enough for |p| < 2^40).
// scale[i] multiplies plane i (attention factor times xPos scale).
std::vector<double> RefRotate(const std::vector<double>& x, int64_t rotary_dim,
                              PlanePairing pairing, const std::vector<int64_t>& pos_of_plane,
                              const std::vector<double>& thetas, const std::vector<double>& scale,
                              int sign = 1) {
  std::vector<double> y = x;
  const int64_t h = rotary_dim / 2;
  for (int64_t i = 0; i < h; ++i) {
    const int64_t i1 = pairing == PlanePairing::kInterleaved ? 2 * i : i;
    const int64_t i2 = pairing == PlanePairing::kInterleaved ? 2 * i + 1 : i + h;
    const long double a = sign * static_cast<long double>(pos_of_plane[i]) * thetas[i];
    const long double c = std::cos(a), s = std::sin(a);
    y[i1] = static_cast<double>(scale[i] * (x[i1] * c - x[i2] * s));
    y[i2] = static_cast<double>(scale[i] * (x[i1] * s + x[i2] * c));
  }
  return y;
}

Rope MakeRope(int64_t d, int64_t r, PlanePairing pairing, RopeFrequencies f) {
  RopeOptions o;
  o.head_dim = d;
  o.rotary_dim = r;
  o.pairing = pairing;
  absl::StatusOr<Rope> rope = Rope::Create(o, std::move(f));
  EXPECT_TRUE(rope.ok()) << rope.status();
  return *rope;
}

// ---------------------------------------------------------------------------------
// Schedules against hand-computed references.
// ---------------------------------------------------------------------------------

// Schedule values are a few double operations (pow/exp/log): agreement to 1e-14
// relative is ~50 ulp, far below any difference a wrong formula would make.
constexpr double kSchedTol = 1e-14;

TEST(RopeSchedules, DefaultAndLinear) {
  const std::vector<double> ref = RefThetas(64, 10000.0);
  const RopeFrequencies d = *DefaultRopeFrequencies(64, 10000.0);
  const RopeFrequencies l = *LinearRopeFrequencies(64, 10000.0, 4.0);
  ASSERT_EQ(d.thetas.size(), 32u);
  EXPECT_EQ(d.thetas[0], 1.0);
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_NEAR(d.thetas[i], ref[i], kSchedTol * ref[i]);
    EXPECT_NEAR(l.thetas[i], ref[i] / 4.0, kSchedTol * ref[i]);
  }
  EXPECT_EQ(d.attention_factor, 1.0);
  EXPECT_EQ(l.attention_factor, 1.0);
}

TEST(RopeSchedules, DynamicNtk) {
  // L <= L0: unchanged. L = 4 L0 with factor 2: base' = base * (2*4 - 1)^(r/(r-2)).
  const RopeFrequencies same = *DynamicNtkRopeFrequencies(64, 10000.0, 2.0, 2048, 2048);
  const RopeFrequencies grown = *DynamicNtkRopeFrequencies(64, 10000.0, 2.0, 2048, 8192);
  const std::vector<double> ref = RefThetas(64, 10000.0);
  const std::vector<double> ref2 = RefThetas(64, 10000.0 * std::pow(7.0, 64.0 / 62.0));
  for (size_t i = 0; i < ref.size(); ++i) {
    EXPECT_NEAR(same.thetas[i], ref[i], kSchedTol * ref[i]);
    EXPECT_NEAR(grown.thetas[i], ref2[i], kSchedTol * ref2[i]);
  }
  EXPECT_FALSE(DynamicNtkRopeFrequencies(2, 10000.0, 2.0, 2048, 8192).ok());
  EXPECT_FALSE(DynamicNtkRopeFrequencies(64, 10000.0, 2.0, 0, 8192).ok());
}

TEST(RopeSchedules, YarnRampEndpoints) {
  // r = 128, base 1e4, L0 = 4096: corr(32) = 20.94 -> low = 20, corr(1) = 45.03 -> high
  // = 46 (computed by hand from r ln(L0 / (2 pi b)) / (2 ln base)).
  YarnOptions o;
  o.factor = 4.0;
  o.original_max_position = 4096;
  const RopeFrequencies f = *YarnRopeFrequencies(128, 10000.0, o);
  const std::vector<double> ref = RefThetas(128, 10000.0);
  for (int i = 0; i < 64; ++i) {
    const double ramp = std::min(std::max((i - 20.0) / 26.0, 0.0), 1.0);
    const double want = ref[i] / 4.0 * ramp + ref[i] * (1.0 - ramp);
    EXPECT_NEAR(f.thetas[i], want, kSchedTol * ref[i]) << i;
  }
  // Endpoints: extrapolated (unchanged) up to low, fully interpolated from high on.
  EXPECT_NEAR(f.thetas[20], ref[20], kSchedTol * ref[20]);
  EXPECT_NEAR(f.thetas[46], ref[46] / 4.0, kSchedTol * ref[46]);
  EXPECT_GT(f.thetas[21], ref[21] / 4.0 * 1.01);
  EXPECT_LT(f.thetas[21], ref[21] * 0.99);
  EXPECT_NEAR(f.attention_factor, 0.1 * std::log(4.0) + 1.0, 1e-15);
  o.attention_factor = 1.5;
  EXPECT_EQ(YarnRopeFrequencies(128, 10000.0, o)->attention_factor, 1.5);
  o.attention_factor.reset();
  // DeepSeek: (0.1 * 0.707 ln 4 + 1) / (0.1 * 0.5 ln 4 + 1).
  o.mscale = 0.707;
  o.mscale_all_dim = 0.5;
  EXPECT_NEAR(YarnRopeFrequencies(128, 10000.0, o)->attention_factor,
              (0.0707 * std::log(4.0) + 1.0) / (0.05 * std::log(4.0) + 1.0), 1e-15);
  o.mscale_all_dim.reset();
  EXPECT_FALSE(YarnRopeFrequencies(128, 10000.0, o).ok());
  o.mscale.reset();
  // truncate = false: ramp from corr(32) = 20.944 to corr(1) = 45.027 unrounded.
  o.truncate = false;
  const RopeFrequencies u = *YarnRopeFrequencies(128, 10000.0, o);
  const double lo = 128 * std::log(4096 / (2 * kPi * 32)) / (2 * std::log(10000.0));
  const double hi = 128 * std::log(4096 / (2 * kPi * 1)) / (2 * std::log(10000.0));
  for (int i = 0; i < 64; ++i) {
    const double ramp = std::min(std::max((i - lo) / (hi - lo), 0.0), 1.0);
    EXPECT_NEAR(u.thetas[i], ref[i] / 4.0 * ramp + ref[i] * (1.0 - ramp), 1e-13 * ref[i]) << i;
  }
  EXPECT_LT(u.thetas[21], ref[21]);  // 21 > 20.944: already ramping
  o.truncate = true;
  o.beta_fast = 0.5;  // below beta_slow
  EXPECT_FALSE(YarnRopeFrequencies(128, 10000.0, o).ok());
  o.beta_fast = 32.0;
  o.factor = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(YarnRopeFrequencies(128, 10000.0, o).ok());
}

TEST(RopeSchedules, Llama3BandEdges) {
  // r = 128, base 5e5, L0 = 8192, low 1, high 4: wavelengths 2 pi / theta_i are < 2048
  // for i <= 28 (kept) and > 8192 for i >= 35 (divided by 8), computed by hand.
  const RopeFrequencies f = *Llama3RopeFrequencies(128, 500000.0, Llama3Options{});
  const std::vector<double> ref = RefThetas(128, 500000.0);
  for (int i = 0; i <= 28; ++i) EXPECT_NEAR(f.thetas[i], ref[i], kSchedTol * ref[i]) << i;
  for (int i = 35; i < 64; ++i) EXPECT_NEAR(f.thetas[i], ref[i] / 8.0, kSchedTol * ref[i]) << i;
  for (int i = 29; i <= 34; ++i) {
    const double w = 2.0 * kPi / ref[i];
    const double t = (8192.0 / w - 1.0) / 3.0;
    ASSERT_GT(t, 0.0);
    ASSERT_LT(t, 1.0);
    EXPECT_NEAR(f.thetas[i], (1.0 - t) * ref[i] / 8.0 + t * ref[i], kSchedTol * ref[i]) << i;
  }
  Llama3Options bad;
  bad.high_freq_factor = 0.5;
  EXPECT_FALSE(Llama3RopeFrequencies(128, 500000.0, bad).ok());
}

TEST(RopeSchedules, LongRope) {
  LongRopeOptions o;
  o.original_max_position = 4096;
  o.max_position = 131072;
  for (int i = 0; i < 4; ++i) {
    o.short_factor.push_back(1.0 + i);
    o.long_factor.push_back(2.0 + 3 * i);
  }
  const std::vector<double> ref = RefThetas(8, 10000.0);
  const RopeFrequencies s = *LongRopeFrequencies(8, 10000.0, o, 4096);
  const RopeFrequencies l = *LongRopeFrequencies(8, 10000.0, o, 4097);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(s.thetas[i], ref[i] / o.short_factor[i], kSchedTol * ref[i]);
    EXPECT_NEAR(l.thetas[i], ref[i] / o.long_factor[i], kSchedTol * ref[i]);
  }
  // s = 32: sqrt(1 + ln 32 / ln 4096) = sqrt(1 + 5/12).
  EXPECT_NEAR(s.attention_factor, std::sqrt(17.0 / 12.0), 1e-15);
  o.max_position = 4096;
  EXPECT_EQ(LongRopeFrequencies(8, 10000.0, o, 10)->attention_factor, 1.0);
  o.long_factor.pop_back();
  EXPECT_FALSE(LongRopeFrequencies(8, 10000.0, o, 10).ok());
  o.long_factor.push_back(-1.0);
  EXPECT_FALSE(LongRopeFrequencies(8, 10000.0, o, 10).ok());
}

TEST(RopeSchedules, RejectsBadParameters) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(DefaultRopeFrequencies(7, 10000.0).ok());
  EXPECT_FALSE(DefaultRopeFrequencies(0, 10000.0).ok());
  EXPECT_FALSE(DefaultRopeFrequencies(8, nan).ok());
  EXPECT_FALSE(DefaultRopeFrequencies(8, inf).ok());
  EXPECT_FALSE(DefaultRopeFrequencies(8, 0.5).ok());
  EXPECT_FALSE(LinearRopeFrequencies(8, 10000.0, 0.0).ok());
  EXPECT_FALSE(LinearRopeFrequencies(8, 10000.0, inf).ok());
  EXPECT_FALSE(AxialRopeFrequencies(8, 3).ok());
  EXPECT_FALSE(MRopePlaneAxes({16, -1, 24}).ok());
  // Sections whose sum no RoPE can have are refused before the plane table is allocated
  // (eight sections of 2^29 asked for 16 GiB: the attention fuzzer ran out of memory),
  // and so are sections that do not sum to the planes the caller has.
  const int64_t big = int64_t{1} << 29;
  EXPECT_FALSE(MRopePlaneAxes({big, big, big, big, big, big, big, big}).ok());
  EXPECT_FALSE(MRopePlaneAxes({16, 24, 24}, false, 63).ok());
  EXPECT_TRUE(MRopePlaneAxes({16, 24, 24}, false, 64).ok());
}

// ---------------------------------------------------------------------------------
// Apply against the reference.
// ---------------------------------------------------------------------------------

struct Token {
  int64_t offset;    // element offset of head 0
  int64_t position;
};

// Element offsets and positions of every token of a tensor, from its description.
std::vector<Token> Tokens(const RopeTensor& t, const std::vector<int64_t>& offsets) {
  std::vector<Token> out;
  if (t.layout == RopeLayout::kTHD) {
    for (int64_t b = 0; b < t.batch; ++b) {
      for (int64_t k = t.cu_seqlens[b]; k < t.cu_seqlens[b + 1]; ++k) {
        out.push_back({k * t.seq_stride, offsets[b] + (k - t.cu_seqlens[b])});
      }
    }
  } else {
    for (int64_t b = 0; b < t.batch; ++b) {
      for (int64_t s = 0; s < t.seq_len; ++s) {
        out.push_back({b * t.batch_stride + s * t.seq_stride, offsets[b] + s});
      }
    }
  }
  return out;
}

struct ApplyCase {
  PlanePairing pairing;
  RopeLayout layout;
};

class RopeApplyTest : public ::testing::TestWithParam<ApplyCase> {};

// Every layout with padded strides, partial rotary, offsets, a non-unit attention
// factor, float and double, in place and out of place, against RefRotate.
TEST_P(RopeApplyTest, MatchesReference) {
  const ApplyCase pc = GetParam();
  const int64_t d = 10, r = 6, heads = 3, batch = 3, seq = 5;
  RopeFrequencies f = *DefaultRopeFrequencies(r, 100.0);
  f.attention_factor = 1.25;
  const Rope rope = MakeRope(d, r, pc.pairing, f);
  const std::vector<int64_t> cu = {0, 5, 5, 6};  // lengths 5, 0, 1
  RopeTensor t;
  t.layout = pc.layout;
  t.heads = heads;
  t.head_dim = d;
  t.head_stride = d + 2;  // padding between heads and between tokens
  if (pc.layout == RopeLayout::kTHD) {
    t.batch = 3;
    t.seq_len = 6;
    t.seq_stride = heads * t.head_stride + 1;
    t.cu_seqlens = cu;
  } else {
    t.batch = batch;
    t.seq_len = seq;
    const int64_t token = heads * t.head_stride + 1;
    if (pc.layout == RopeLayout::kBSHD) {
      t.seq_stride = token;
      t.batch_stride = seq * token + 3;
    } else {
      t.batch_stride = token;
      t.seq_stride = batch * token + 3;
    }
  }
  ASSERT_TRUE(ValidateRopeTensor(t).ok());
  const std::vector<int64_t> offsets = {7, -3, 1000};
  const int64_t extent = 700;  // >= the span of every layout below
  std::mt19937_64 rng(11);
  const std::vector<double> x = Normal(extent, rng);
  std::vector<double> out(extent, -9.0), inplace = x;
  const absl::Status st = rope.Forward<double>(t, {{}, offsets}, x.data(), out.data());
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_TRUE(rope.Forward<double>(t, {{}, offsets}, inplace.data(), inplace.data()).ok());
  std::vector<float> xf(x.begin(), x.end()), outf(extent, -9.0f);
  ASSERT_TRUE(rope.Forward<float>(t, {{}, offsets}, xf.data(), outf.data()).ok());
  std::vector<bool> touched(extent, false);
  for (const Token& tok : Tokens(t, offsets)) {
    for (int64_t hd = 0; hd < heads; ++hd) {
      const int64_t o = tok.offset + hd * t.head_stride;
      const std::vector<double> xv(x.begin() + o, x.begin() + o + d);
      const std::vector<double> want =
          RefRotate(xv, r, pc.pairing, std::vector<int64_t>(r / 2, tok.position), f.thetas,
                    std::vector<double>(r / 2, 1.25));
      for (int64_t c = 0; c < d; ++c) {
        touched[o + c] = true;
        // Double: table and rotation each round once (~2 ulp of |x| ~ 4): 1e-14.
        EXPECT_NEAR(out[o + c], want[c], 1e-14) << tok.position << " " << c;
        EXPECT_EQ(inplace[o + c], out[o + c]);
        // Float: cos/sin rounded to float (6e-8 rel) times |x| <~ 5, plus two products
        // and a sum in float: 2e-6 absolute covers it with margin; a wrong angle fails.
        EXPECT_NEAR(outf[o + c], want[c], 2e-6);
      }
    }
  }
  // Padding is untouched.
  for (int64_t k = 0; k < extent; ++k) {
    if (!touched[k]) {
      EXPECT_EQ(out[k], -9.0);
      EXPECT_EQ(inplace[k], x[k]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, RopeApplyTest,
    ::testing::Values(ApplyCase{PlanePairing::kHalfSplit, RopeLayout::kBSHD},
                      ApplyCase{PlanePairing::kInterleaved, RopeLayout::kBSHD},
                      ApplyCase{PlanePairing::kHalfSplit, RopeLayout::kSBHD},
                      ApplyCase{PlanePairing::kInterleaved, RopeLayout::kSBHD},
                      ApplyCase{PlanePairing::kHalfSplit, RopeLayout::kTHD},
                      ApplyCase{PlanePairing::kInterleaved, RopeLayout::kTHD}));

// The same data in bshd, sbhd (permuted) and thd (packed) gives the same rotated
// rows, bit for bit (same table arithmetic per position). Position ids path too.
TEST(RopeLayouts, AgreeOnPermutedData) {
  const int64_t b = 2, s = 4, h = 3, d = 8;
  const Rope rope = MakeRope(d, d, PlanePairing::kHalfSplit, *DefaultRopeFrequencies(d));
  std::mt19937_64 rng(3);
  const std::vector<double> x = Normal(b * s * h * d, rng);  // bshd
  std::vector<double> xs(x.size());
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t si = 0; si < s; ++si)
      for (int64_t k = 0; k < h * d; ++k) xs[(si * b + bi) * h * d + k] = x[(bi * s + si) * h * d + k];
  const std::vector<int64_t> ids = {5, 6, 7, 8, 100, 101, 102, 103};  // t = b * s + s
  const std::vector<int64_t> offsets = {5, 100};
  const std::vector<int64_t> cu = {0, 4, 8};
  std::vector<double> y1 = x, y2 = xs, y3 = x, y4 = x;
  ASSERT_TRUE(rope.Forward<double>(RopeTensor::Contiguous(RopeLayout::kBSHD, b, s, h, d),
                                   {ids, {}}, y1.data(), y1.data()).ok());
  ASSERT_TRUE(rope.Forward<double>(RopeTensor::Contiguous(RopeLayout::kSBHD, b, s, h, d),
                                   {ids, {}}, y2.data(), y2.data()).ok());
  ASSERT_TRUE(rope.Forward<double>(RopeTensor::Contiguous(RopeLayout::kTHD, 2, 8, h, d, cu),
                                   {{}, offsets}, y3.data(), y3.data()).ok());
  ASSERT_TRUE(rope.Forward<double>(RopeTensor::Contiguous(RopeLayout::kBSHD, b, s, h, d),
                                   {{}, offsets}, y4.data(), y4.data()).ok());
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t si = 0; si < s; ++si)
      for (int64_t k = 0; k < h * d; ++k) {
        const int64_t i = (bi * s + si) * h * d + k;
        EXPECT_EQ(y1[i], y2[(si * b + bi) * h * d + k]);
        EXPECT_EQ(y1[i], y3[i]);
        EXPECT_EQ(y1[i], y4[i]);
      }
  EXPECT_NE(y1[h * d], x[h * d]);  // the rotation did something
}

TEST(RopeLayouts, VarlenEmptyAndSingleTokenSequences) {
  const int64_t h = 2, d = 4;
  const Rope rope = MakeRope(d, d, PlanePairing::kInterleaved, *DefaultRopeFrequencies(d, 10.0));
  const std::vector<int64_t> cu = {0, 0, 1, 1, 3};  // lengths 0, 1, 0, 2
  const RopeTensor t = RopeTensor::Contiguous(RopeLayout::kTHD, 4, 3, h, d, cu);
  std::mt19937_64 rng(4);
  const std::vector<double> x = Normal(3 * h * d, rng);
  std::vector<double> y(x.size());
  ASSERT_TRUE(rope.Forward<double>(t, {{}, {9, 0, 4, 2}}, x.data(), y.data()).ok());
  // Token 0 is sequence 1's only token: position 0 -> identity. Tokens 1, 2 are
  // sequence 3's at positions 2, 3.
  for (int64_t k = 0; k < h * d; ++k) EXPECT_EQ(y[k], x[k]);
  const std::vector<double> thetas = *&DefaultRopeFrequencies(d, 10.0)->thetas;
  for (int64_t tok = 1; tok < 3; ++tok) {
    for (int64_t hd = 0; hd < h; ++hd) {
      const int64_t o = (tok * h + hd) * d;
      const std::vector<double> want =
          RefRotate(std::vector<double>(x.begin() + o, x.begin() + o + d), d,
                    PlanePairing::kInterleaved, std::vector<int64_t>(d / 2, tok + 1), thetas,
                    std::vector<double>(d / 2, 1.0));
      for (int64_t c = 0; c < d; ++c) EXPECT_NEAR(y[o + c], want[c], 1e-14);
    }
  }
  // All sequences empty.
  const std::vector<int64_t> cu0 = {0, 0, 0};
  EXPECT_TRUE(rope.Forward<double>(RopeTensor::Contiguous(RopeLayout::kTHD, 2, 0, h, d, cu0),
                                   {}, y.data(), y.data()).ok());
  // Not monotone, wrong end, wrong count.
  const std::vector<int64_t> bad1 = {0, 2, 1, 3}, bad2 = {0, 1, 2, 4}, bad3 = {0, 3};
  EXPECT_FALSE(ValidateRopeTensor(RopeTensor::Contiguous(RopeLayout::kTHD, 3, 3, h, d, bad1)).ok());
  EXPECT_FALSE(ValidateRopeTensor(RopeTensor::Contiguous(RopeLayout::kTHD, 3, 3, h, d, bad2)).ok());
  EXPECT_FALSE(ValidateRopeTensor(RopeTensor::Contiguous(RopeLayout::kTHD, 3, 3, h, d, bad3)).ok());
}

// A float32 result at position 1e6 matches a float64 reference to 1e-6 relative: the
// angle is reduced exactly in double, only cos/sin (6e-8) and the float products round.
// Relative to the pair's norm (a component may cancel to ~0).
TEST(RopePrecision, Float32AtOneMillion) {
  const int64_t d = 128;
  for (PlanePairing pairing : {PlanePairing::kHalfSplit, PlanePairing::kInterleaved}) {
    const RopeFrequencies f = *DefaultRopeFrequencies(d, 10000.0);
    const Rope rope = MakeRope(d, d, pairing, f);
    std::mt19937_64 rng(5);
    const std::vector<double> x = Normal(d, rng);
    std::vector<float> xf(x.begin(), x.end());
    const std::vector<double> xr(xf.begin(), xf.end());  // the float input, exactly
    const std::vector<int64_t> ids = {1000000};
    ASSERT_TRUE(rope.Forward<float>(RopeTensor::Contiguous(RopeLayout::kBSHD, 1, 1, 1, d),
                                    {ids, {}}, xf.data(), xf.data()).ok());
    const std::vector<double> want = RefRotate(xr, d, pairing, std::vector<int64_t>(d / 2, 1000000),
                                               f.thetas, std::vector<double>(d / 2, 1.0));
    for (int64_t i = 0; i < d / 2; ++i) {
      const int64_t i1 = pairing == PlanePairing::kInterleaved ? 2 * i : i;
      const int64_t i2 = pairing == PlanePairing::kInterleaved ? 2 * i + 1 : i + d / 2;
      const double norm = std::hypot(xr[i1], xr[i2]);
      EXPECT_LE(std::abs(xf[i1] - want[i1]), 1e-6 * norm) << i;
      EXPECT_LE(std::abs(xf[i2] - want[i2]), 1e-6 * norm) << i;
    }
  }
}

// ---------------------------------------------------------------------------------
// 16-bit storage.
// ---------------------------------------------------------------------------------

TEST(RopeHalf, ConversionsRoundTripAndRoundToNearestEven) {
  // Every non-NaN pattern survives widening and narrowing unchanged.
  for (uint32_t b = 0; b < 65536; ++b) {
    const Float16 h{static_cast<uint16_t>(b)};
    const BFloat16 g{static_cast<uint16_t>(b)};
    if (std::isnan(ToFloat(h))) {
      EXPECT_TRUE(std::isnan(ToFloat(ToFloat16(ToFloat(h)))));
    } else {
      EXPECT_EQ(ToFloat16(ToFloat(h)).bits, b);
    }
    if (std::isnan(ToFloat(g))) {
      EXPECT_TRUE(std::isnan(ToFloat(ToBFloat16(ToFloat(g)))));
    } else {
      EXPECT_EQ(ToBFloat16(ToFloat(g)).bits, b);
    }
  }
  EXPECT_EQ(ToFloat16(1.0f).bits, 0x3C00);
  EXPECT_EQ(ToFloat16(65504.0f).bits, 0x7BFF);
  EXPECT_EQ(ToFloat16(65520.0f).bits, 0x7C00);              // tie above max -> inf
  EXPECT_EQ(ToFloat16(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(ToFloat16(std::ldexp(1.0f, -25)).bits, 0x0000);  // tie -> even (0)
  EXPECT_EQ(ToFloat16(std::ldexp(3.0f, -25)).bits, 0x0002);  // tie 1.5 ulp -> even (2)
  EXPECT_EQ(ToFloat16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3C00);   // tie -> even
  EXPECT_EQ(ToFloat16(1.0f + std::ldexp(3.0f, -11)).bits, 0x3C02);   // tie -> even
  EXPECT_EQ(ToBFloat16(1.0f + std::ldexp(1.0f, -8)).bits, 0x3F80);   // tie -> even
  EXPECT_EQ(ToBFloat16(1.0f + std::ldexp(3.0f, -8)).bits, 0x3F82);   // tie -> even
  EXPECT_EQ(ToBFloat16(-2.0f).bits, 0xC000);
  // Random floats: the narrowed value is within half a 16-bit ulp (normal range).
  std::mt19937_64 rng(13);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  for (int k = 0; k < 2000; ++k) {
    const float x = std::ldexp(mant(rng), static_cast<int>(rng() % 28) - 12);  // < 2^15
    int e;
    std::frexp(x, &e);
    if (x == 0.0f || e < -13) continue;
    EXPECT_LE(std::abs(ToFloat(ToFloat16(x)) - x), std::ldexp(1.0f, e - 12)) << x;
    EXPECT_LE(std::abs(ToFloat(ToBFloat16(x)) - x), std::ldexp(1.0f, e - 9)) << x;
  }
}

template <class H>
void CheckHalfApply(double half_ulp) {
  const int64_t d = 12, r = 8, n = 6, heads = 2;
  for (PlanePairing pairing : {PlanePairing::kHalfSplit, PlanePairing::kInterleaved}) {
    const RopeFrequencies f = *DefaultRopeFrequencies(r, 10000.0);
    const Rope rope = MakeRope(d, r, pairing, f);
    std::mt19937_64 rng(14);
    const std::vector<double> x0 = Normal(n * heads * d, rng);
    std::vector<H> x(x0.size());
    for (size_t k = 0; k < x0.size(); ++k) {
      if constexpr (std::is_same_v<H, BFloat16>) {
        x[k] = ToBFloat16(static_cast<float>(x0[k]));
      } else {
        x[k] = ToFloat16(static_cast<float>(x0[k]));
      }
    }
    std::vector<H> y = x;
    const std::vector<int64_t> ids = {0, 1, 999999, 1000000, -5, 1 << 30};
    const RopeTensor t = RopeTensor::Contiguous(RopeLayout::kBSHD, 1, n, heads, d);
    ASSERT_TRUE(rope.Forward<H>(t, {ids, {}}, y.data(), y.data()).ok());
    for (int64_t tok = 0; tok < n; ++tok) {
      for (int64_t hd = 0; hd < heads; ++hd) {
        const int64_t o = (tok * heads + hd) * d;
        std::vector<double> xv(d);
        for (int64_t c = 0; c < d; ++c) xv[c] = ToFloat(x[o + c]);
        const std::vector<double> want = RefRotate(xv, r, pairing, std::vector<int64_t>(r / 2, ids[tok]),
                                                   f.thetas, std::vector<double>(r / 2, 1.0));
        for (int64_t c = 0; c < d; ++c) {
          // Float32 rotation (~1e-6 absolute for |x| <~ 5) then one rounding to the
          // 16-bit type (half an ulp, relative half_ulp). Pass-through is bit-exact.
          const double got = ToFloat(y[o + c]);
          if (c >= r) {
            EXPECT_EQ(y[o + c].bits, x[o + c].bits);
          } else {
            EXPECT_LE(std::abs(got - want[c]), half_ulp * std::abs(want[c]) + 1e-6) << c;
          }
        }
      }
    }
  }
}

TEST(RopeHalf, BFloat16AndFloat16MatchReference) {
  CheckHalfApply<BFloat16>(std::ldexp(1.0, -8));
  CheckHalfApply<Float16>(std::ldexp(1.0, -11));
}

// ---------------------------------------------------------------------------------
// Group properties.
// ---------------------------------------------------------------------------------

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

std::vector<double> RotateOne(const Rope& rope, std::vector<double> x, int64_t p,
                              RopeRole role = RopeRole::kQuery) {
  const std::vector<int64_t> ids = {p};
  EXPECT_TRUE(rope.Forward<double>(
                      RopeTensor::Contiguous(RopeLayout::kBSHD, 1, 1, 1,
                                             static_cast<int64_t>(x.size())),
                      {ids, {}}, x.data(), x.data(), role)
                  .ok());
  return x;
}

TEST(RopeProperties, RelativityAndNormOnRandomInputs) {
  std::mt19937_64 rng(6);
  for (PlanePairing pairing : {PlanePairing::kHalfSplit, PlanePairing::kInterleaved}) {
    const Rope rope = MakeRope(12, 10, pairing, *DefaultRopeFrequencies(10, 10000.0));
    for (int trial = 0; trial < 50; ++trial) {
      const std::vector<double> q = Normal(12, rng), k = Normal(12, rng);
      const int64_t i = static_cast<int64_t>(rng() % 2000000) - 1000000;
      const int64_t j = static_cast<int64_t>(rng() % 2000000) - 1000000;
      // Scores of size ~|q||k| ~ 12 with 24 products each exact to ~1e-16: 1e-12.
      EXPECT_NEAR(Dot(RotateOne(rope, q, i), RotateOne(rope, k, j)),
                  Dot(q, RotateOne(rope, k, j - i)), 1e-12);
      EXPECT_NEAR(Dot(RotateOne(rope, q, i), RotateOne(rope, q, i)), Dot(q, q), 1e-12);
    }
  }
}

TEST(RopeProperties, EqualsCommutingPlanes) {
  std::mt19937_64 rng(7);
  const int64_t d = 14, r = 10, n = 9;
  for (PlanePairing pairing : {PlanePairing::kHalfSplit, PlanePairing::kInterleaved}) {
    YarnOptions yo;
    yo.factor = 8.0;
    yo.original_max_position = 64;
    yo.attention_factor = 1.0;  // CommutingPlanes is the unscaled representation
    const RopeFrequencies f = *YarnRopeFrequencies(r, 10000.0, yo);
    const Rope rope = MakeRope(d, r, pairing, f);
    const group::CommutingPlanes planes = *group::CommutingPlanes::Create(d, r, f.thetas, pairing);
    std::vector<int64_t> ids(n);
    for (int64_t& p : ids) p = static_cast<int64_t>(rng() >> 33);  // up to 2^31
    const std::vector<double> x = Normal(n * d, rng);
    std::vector<double> a(n * d), b(n * d);
    ASSERT_TRUE(rope.Forward<double>(RopeTensor::Contiguous(RopeLayout::kBSHD, 1, n, 1, d),
                                     {ids, {}}, x.data(), a.data()).ok());
    ASSERT_TRUE(planes.Apply<double>(ids, x.data(), d, b.data(), d).ok());
    // Same reduced angle, same cos/sin, same products: equal to rounding (1e-15 abs).
    for (int64_t k = 0; k < n * d; ++k) EXPECT_NEAR(a[k], b[k], 1e-15);
  }
}

// Interleaved RoPE on x equals half-split RoPE on x with coordinates permuted
// (2i -> i, 2i + 1 -> i + r/2): the pairings are the same representation in two bases.
// Bit-identical: same table values, same operations per pair.
TEST(RopeProperties, PairingsAreConjugateByPermutation) {
  const int64_t d = 10, r = 8, n = 7;
  const RopeFrequencies f = *DefaultRopeFrequencies(r, 300.0);
  const Rope inter = MakeRope(d, r, PlanePairing::kInterleaved, f);
  const Rope half = MakeRope(d, r, PlanePairing::kHalfSplit, f);
  std::mt19937_64 rng(15);
  const std::vector<double> x = Normal(n * d, rng);
  std::vector<double> xp(x.size());
  auto perm = [&](int64_t c) { return c >= r ? c : (c % 2 == 0 ? c / 2 : c / 2 + r / 2); };
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < d; ++c) xp[t * d + perm(c)] = x[t * d + c];
  std::vector<double> y = x, yp = xp;
  const RopeTensor t = RopeTensor::Contiguous(RopeLayout::kBSHD, 1, n, 1, d);
  const std::vector<int64_t> offsets = {123456};
  ASSERT_TRUE(inter.Forward<double>(t, {{}, offsets}, y.data(), y.data()).ok());
  ASSERT_TRUE(half.Forward<double>(t, {{}, offsets}, yp.data(), yp.data()).ok());
  for (int64_t tk = 0; tk < n; ++tk)
    for (int64_t c = 0; c < d; ++c) EXPECT_EQ(yp[tk * d + perm(c)], y[tk * d + c]);
}

// Threads split tokens (apply) and table rows (build): results are bit-identical.
TEST(RopeProperties, ThreadsGiveIdenticalResults) {
  const int64_t d = 16, n = 37, h = 3;
  RopeOptions o;
  o.head_dim = d;
  o.rotary_dim = 12;
  o.pairing = PlanePairing::kInterleaved;
  const RopeFrequencies f = *DefaultRopeFrequencies(12);
  const Rope one = *Rope::Create(o, f);
  o.num_threads = 4;
  const Rope four = *Rope::Create(o, f);
  std::mt19937_64 rng(16);
  const std::vector<float> x = [&] {
    std::vector<double> v = Normal(n * h * d, rng);
    return std::vector<float>(v.begin(), v.end());
  }();
  std::vector<float> a(x.size()), b(x.size());
  const RopeTensor t = RopeTensor::Contiguous(RopeLayout::kSBHD, 1, n, h, d);
  const std::vector<int64_t> offsets = {1 << 25};
  ASSERT_TRUE(one.Forward<float>(t, {{}, offsets}, x.data(), a.data()).ok());
  ASSERT_TRUE(four.Forward<float>(t, {{}, offsets}, x.data(), b.data()).ok());
  for (size_t k = 0; k < x.size(); ++k) EXPECT_EQ(a[k], b[k]);
}

// Tables map distinct positions to rows in ascending order two ways: by buckets when the
// positions span less than 4x the token count (dense, as default positions), else by a
// sort. Unsorted, repeated dense positions (buckets) and the same plus one far larger
// position (the sort; its extra row comes last, so the shared rows are the same rows)
// rotate the shared tokens bit for bit alike, float and double.
TEST(RopeProperties, BucketAndSortedRowAssignmentsAgree) {
  const int64_t d = 16, h = 2;
  RopeOptions o;
  o.head_dim = d;
  o.rotary_dim = d;
  const Rope rope = *Rope::Create(o, *DefaultRopeFrequencies(d));
  const std::vector<int64_t> dense = {7, 3, 7, 20, 4, 3, 19, 5, 6, 21, 2, 8};  // span 19 < 48
  std::vector<int64_t> sparse = dense;
  sparse.push_back(int64_t{1} << 40);
  std::mt19937_64 rng(17);
  const int64_t n = static_cast<int64_t>(sparse.size());
  const std::vector<double> xd = Normal(n * h * d, rng);
  const std::vector<float> xf(xd.begin(), xd.end());
  const RopeTensor ts = RopeTensor::Contiguous(RopeLayout::kBSHD, 1, n, h, d);
  const RopeTensor td = RopeTensor::Contiguous(RopeLayout::kBSHD, 1, n - 1, h, d);
  std::vector<float> af(xf.size()), bf(xf.size());
  std::vector<double> ad(xd.size()), bd(xd.size());
  ASSERT_TRUE(rope.Forward<float>(td, {dense, {}}, xf.data(), af.data()).ok());
  ASSERT_TRUE(rope.Forward<float>(ts, {sparse, {}}, xf.data(), bf.data()).ok());
  ASSERT_TRUE(rope.Forward<double>(td, {dense, {}}, xd.data(), ad.data()).ok());
  ASSERT_TRUE(rope.Forward<double>(ts, {sparse, {}}, xd.data(), bd.data()).ok());
  for (int64_t k = 0; k < (n - 1) * h * d; ++k) {
    ASSERT_EQ(af[k], bf[k]) << k;
    ASSERT_EQ(ad[k], bd[k]) << k;
  }
}

// ---------------------------------------------------------------------------------
// Backward.
// ---------------------------------------------------------------------------------

TEST(RopeBackward, MatchesFiniteDifferencesAndFusesInPlace) {
  std::mt19937_64 rng(8);
  const int64_t b = 2, s = 3, h = 2, d = 6, r = 4;
  for (PlanePairing pairing : {PlanePairing::kHalfSplit, PlanePairing::kInterleaved}) {
    RopeOptions o;
    o.head_dim = d;
    o.rotary_dim = r;
    o.pairing = pairing;
    o.xpos.enabled = true;  // the gradient includes the xPos and attention factors
    o.xpos.centre = 40;
    o.xpos.scale_base = 8.0;
    RopeFrequencies f = *DefaultRopeFrequencies(r, 50.0);
    f.attention_factor = 0.8;
    const Rope rope = *Rope::Create(o, f);
    const RopeTensor t = RopeTensor::Contiguous(RopeLayout::kBSHD, b, s, h, d);
    const std::vector<int64_t> offsets = {3, 77};
    const int64_t n = b * s * h * d;
    const std::vector<double> x = Normal(n, rng), w = Normal(n, rng);
    double loss_scale = 0.0;  // sum |w_k y_k|: the size of the loss's rounding error
    auto loss = [&](const std::vector<double>& xv) {
      std::vector<double> y(n);
      EXPECT_TRUE(rope.Forward<double>(t, {{}, offsets}, xv.data(), y.data(), RopeRole::kKey).ok());
      loss_scale = 0.0;
      for (int64_t k = 0; k < n; ++k) loss_scale += std::abs(w[k] * y[k]);
      return Dot(w, y);
    };
    std::vector<double> dx(n), fused = w;
    ASSERT_TRUE(rope.Backward<double>(t, {{}, offsets}, w.data(), dx.data(), RopeRole::kKey).ok());
    ASSERT_TRUE(rope.Backward<double>(t, {{}, offsets}, fused.data(), fused.data(), RopeRole::kKey).ok());
    const double eps = 1e-6;
    for (int64_t k = 0; k < n; ++k) {
      std::vector<double> xp = x, xm = x;
      xp[k] += eps;
      xm[k] -= eps;
      // The loss is linear in x, so central differences have no truncation error; only
      // the rounding of the two losses (~n ulp of sum |w y| each, n = 72 terms) divided
      // by 2 eps remains. 4 * n * 2^-52 * sum|w y| / (2 eps) bounds it.
      const double fd = (loss(xp) - loss(xm)) / (2 * eps);
      const double tol = 4.0 * n * 2.2e-16 * loss_scale / (2 * eps);
      EXPECT_NEAR(dx[k], fd, tol) << k;
      EXPECT_EQ(fused[k], dx[k]);
    }
  }
}

// ---------------------------------------------------------------------------------
// xPos.
// ---------------------------------------------------------------------------------

TEST(RopeXpos, ScoreDependsOnlyOnOffsetAndScalesAreAsPublished) {
  const int64_t d = 8;
  std::mt19937_64 rng(9);
  const std::vector<double> q = Normal(d, rng), k = Normal(d, rng);
  // Centres 0, 1e6 and 2^60 (positions past 2^53: the offset p - centre must be formed
  // exactly, not from p and the centre each rounded to double).
  for (int64_t centre : {int64_t{0}, int64_t{1000000}, int64_t{1} << 60}) {
    RopeOptions o;
    o.head_dim = d;
    o.rotary_dim = d;
    o.pairing = PlanePairing::kInterleaved;
    o.xpos.enabled = true;
    o.xpos.centre = centre;
    const RopeFrequencies f = *DefaultRopeFrequencies(d);
    const Rope rope = *Rope::Create(o, f);
    // Score of query i, key j from the published formula, no centring.
    auto ref_score = [&](int64_t i, int64_t j) {
      std::vector<double> sq(d / 2), sk(d / 2);
      for (int64_t p = 0; p < d / 2; ++p) {
        const double zeta = (2.0 * p / d + 0.4) / 1.4;
        sq[p] = std::pow(zeta, (i - j) / 512.0);  // zeta^(i/B) zeta^(-j/B) combined
        sk[p] = 1.0;
      }
      return Dot(RefRotate(q, d, o.pairing, std::vector<int64_t>(d / 2, i), f.thetas, sq),
                 RefRotate(k, d, o.pairing, std::vector<int64_t>(d / 2, j), f.thetas, sk));
    };
    for (int trial = 0; trial < 20; ++trial) {
      const int64_t i = centre + static_cast<int64_t>(rng() % 4000) - 2000;
      const int64_t j = centre + static_cast<int64_t>(rng() % 4000) - 2000;
      const int64_t shift = static_cast<int64_t>(rng() % 1000);
      const double sc = Dot(RotateOne(rope, q, i, RopeRole::kQuery), RotateOne(rope, k, j, RopeRole::kKey));
      const double shifted = Dot(RotateOne(rope, q, i + shift, RopeRole::kQuery),
                                 RotateOne(rope, k, j + shift, RopeRole::kKey));
      // Scales up to zeta_0^(-4000/512) ~ 2e4 on q and k; scores up to ~1e5, each
      // exact to ~1e-16 relative per term: 1e-9 relative to the score size.
      const double tol = 1e-9 * (1.0 + std::abs(sc));
      EXPECT_NEAR(sc, shifted, tol) << i << " " << j;
      if (centre < (int64_t{1} << 53)) {
        EXPECT_NEAR(sc, ref_score(i, j), tol);
      } else {
        // The reference's long double angle loses p theta past 2^53; the score depends on
        // i - j only, so it equals the one at the same offsets about centre 0, for which
        // the reference holds (checked in the first pass).
        RopeOptions o0 = o;
        o0.xpos.centre = 0;
        const Rope rope0 = *Rope::Create(o0, f);
        const double at0 = Dot(RotateOne(rope0, q, i - centre, RopeRole::kQuery),
                               RotateOne(rope0, k, j - centre, RopeRole::kKey));
        EXPECT_NEAR(sc, at0, tol) << i - centre << " " << j - centre;
      }
    }
    // Float32 with positions near 1e6 stays finite thanks to the centre.
    const std::vector<int64_t> ids = {centre + 3000};
    std::vector<float> xf(q.begin(), q.end());
    ASSERT_TRUE(rope.Forward<float>(RopeTensor::Contiguous(RopeLayout::kBSHD, 1, 1, 1, d),
                                    {ids, {}}, xf.data(), xf.data(), RopeRole::kKey).ok());
    for (float v : xf) EXPECT_TRUE(std::isfinite(v));
  }
}

// Issue 24: a float32 key at p = 5e4 (centre 0, B = 512, gamma = 0.4) has plane 0 scaled
// by zeta_0^(-5e4/512) = e^122 > FLT_MAX: the call returned OK with [nan, -inf, 4e32, ...].
// It is now refused, naming the reach (88.7 B / ln(1 / zeta_0) = 36,260 positions from
// the centre), and leaves x as it was; the side of the centre where scales shrink, and a
// float64 table (reach 709.8 B / ln(1 / zeta_0) ~ 2.9e5), still work.
TEST(RopeXpos, ScalesBeyondTheTableTypeAreRefusedAtTheCall) {
  const int64_t d = 8;
  RopeOptions o;
  o.head_dim = d;
  o.rotary_dim = d;
  o.xpos.enabled = true;
  const Rope rope = *Rope::Create(o, *DefaultRopeFrequencies(d));
  const RopeTensor t = RopeTensor::Contiguous(RopeLayout::kBSHD, 1, 1, 1, d);
  auto forward_f = [&](int64_t p, RopeRole role, std::vector<float>* x) {
    const std::vector<int64_t> ids = {p};
    return rope.Forward<float>(t, {ids, {}}, x->data(), x->data(), role);
  };
  const std::vector<float> ones(d, 1.0f);
  for (const auto& [p, role] : {std::pair<int64_t, RopeRole>{50000, RopeRole::kKey},
                                {-50000, RopeRole::kQuery}, {36300, RopeRole::kKey}}) {
    std::vector<float> x = ones;
    const absl::Status s = forward_f(p, role, &x);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << p;
    EXPECT_NE(s.message().find("36260"), std::string::npos) << s;
    EXPECT_NE(s.message().find("xpos.centre"), std::string::npos) << s;
    EXPECT_EQ(x, ones);
  }
  for (const auto& [p, role] : {std::pair<int64_t, RopeRole>{30000, RopeRole::kKey},
                                {50000, RopeRole::kQuery}, {-50000, RopeRole::kKey}}) {
    std::vector<float> x = ones;
    ASSERT_TRUE(forward_f(p, role, &x).ok()) << p;
    for (float v : x) EXPECT_TRUE(std::isfinite(v)) << p;
  }
  std::vector<double> xd(d, 1.0);
  const std::vector<int64_t> ids = {50000};
  ASSERT_TRUE(rope.Forward<double>(t, {ids, {}}, xd.data(), xd.data(), RopeRole::kKey).ok());
  for (double v : xd) EXPECT_TRUE(std::isfinite(v));
  // float16 tensors: the float table holds scales up to e^88.7, but float16 ends at 65504
  // = e^11.09, reached at 11.09 B / ln(1 / zeta_0) ~ 4,530 positions from the centre: a
  // key at 5000 gave inf outputs for inputs of 1 (OK returned). Refused now, x left as it
  // was; a key at 4000 (scale ~1.6e4) stays finite.
  const Float16 one = ToFloat16(1.0f);
  std::vector<Float16> h(d, one);
  const std::vector<int64_t> far = {5000}, near = {4000};
  const absl::Status s = rope.Forward<Float16>(t, {far, {}}, h.data(), h.data(), RopeRole::kKey);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("float16"), std::string::npos) << s;
  for (const Float16& v : h) EXPECT_EQ(std::memcmp(&v, &one, sizeof(one)), 0);
  ASSERT_TRUE(rope.Forward<Float16>(t, {near, {}}, h.data(), h.data(), RopeRole::kKey).ok());
  for (const Float16& v : h) EXPECT_TRUE(std::isfinite(ToFloat(v)));
}

// Default RoPE over all d components with attention factor m.
Rope RopeWithAttentionFactor(int64_t d, double m) {
  RopeOptions o;
  o.head_dim = d;
  o.rotary_dim = d;
  RopeFrequencies f = *DefaultRopeFrequencies(d);
  f.attention_factor = m;
  return *Rope::Create(o, f);
}

// The attention factor m scales every table entry, xPos or not: a float32 table of
// m = 1e39 (YaRN's attention_factor, or a huge mscale) held inf and gave inf and NaN
// outputs with OK where float64 gave finite ones. Refused now, before anything is written,
// as xPos scales past the table's range are; float16 tensors refuse m past 65504.
TEST(RopeAttentionFactor, FactorsBeyondTheTensorTypeAreRefusedAtTheCall) {
  const int64_t d = 8;
  const RopeTensor t = RopeTensor::Contiguous(RopeLayout::kBSHD, 1, 2, 1, d);
  const std::vector<int64_t> ids = {0, 1};
  auto make = [&](double m) { return RopeWithAttentionFactor(d, m); };
  const std::vector<float> ones(2 * d, 1.0f);
  {
    const Rope huge = make(1e39);
    std::vector<float> x = ones;
    const absl::Status s = huge.Forward<float>(t, {ids, {}}, x.data(), x.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("attention factor"), std::string::npos) << s;
    EXPECT_EQ(x, ones);
    EXPECT_EQ(huge.MakeTable<float>(t, {ids, {}}).status().code(),
              absl::StatusCode::kInvalidArgument);
    std::vector<double> xd(2 * d, 1.0);  // a double table holds it
    ASSERT_TRUE(huge.Forward<double>(t, {ids, {}}, xd.data(), xd.data()).ok());
    for (double v : xd) EXPECT_TRUE(std::isfinite(v));
  }
  {
    const Rope large = make(1e38);  // inside float32's range: finite for inputs of 1
    std::vector<float> x = ones;
    ASSERT_TRUE(large.Forward<float>(t, {ids, {}}, x.data(), x.data()).ok());
    for (float v : x) EXPECT_TRUE(std::isfinite(v));
  }
  const Float16 one = ToFloat16(1.0f);
  {
    const Rope past_half = make(1e5);  // past float16's 65504
    std::vector<Float16> h(2 * d, one);
    const absl::Status s = past_half.Forward<Float16>(t, {ids, {}}, h.data(), h.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("float16"), std::string::npos) << s;
    for (const Float16& v : h) EXPECT_EQ(std::memcmp(&v, &one, sizeof(one)), 0);
  }
  {
    const Rope within_half = make(1e4);
    std::vector<Float16> h(2 * d, ToFloat16(0.5f));
    ASSERT_TRUE(within_half.Forward<Float16>(t, {ids, {}}, h.data(), h.data()).ok());
    for (const Float16& v : h) EXPECT_TRUE(std::isfinite(ToFloat(v)));
  }
}

// Each type's largest value is itself a valid attention factor (its entries are at most
// m, finite); only m above it is refused, compared exactly: float16 tensors take
// m = 65504, float32 tables FLT_MAX and float64 tables DBL_MAX, and the next double up is
// refused, with a message telling m from the bound.
TEST(RopeAttentionFactor, TheLargestValueOfEachTypeIsAccepted) {
  const int64_t d = 8;
  const RopeTensor t = RopeTensor::Contiguous(RopeLayout::kBSHD, 1, 2, 1, d);
  const std::vector<int64_t> ids = {0, 1};
  auto make = [&](double m) { return RopeWithAttentionFactor(d, m); };
  const double inf = std::numeric_limits<double>::infinity();
  {
    const Rope at = make(65504.0);
    // Inputs of 0.5: |x cos - y sin| <= 0.5 m sqrt(2) stays finite.
    std::vector<Float16> h(2 * d, ToFloat16(0.5f));
    ASSERT_TRUE(at.Forward<Float16>(t, {ids, {}}, h.data(), h.data()).ok());
    for (const Float16& v : h) EXPECT_TRUE(std::isfinite(ToFloat(v)));
    EXPECT_EQ(ToFloat(h[0]), 32752.0f);  // token 0: 0.5 m cos 0
    const Rope past = make(std::nextafter(65504.0, inf));
    std::vector<Float16> g(2 * d, ToFloat16(1.0f));
    const absl::Status s = past.Forward<Float16>(t, {ids, {}}, g.data(), g.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("65504.00000000001"), std::string::npos) << s;
  }
  const double fmax = static_cast<double>(std::numeric_limits<float>::max());
  EXPECT_TRUE(make(fmax).MakeTable<float>(t, {ids, {}}).ok());
  EXPECT_EQ(make(std::nextafter(fmax, inf)).MakeTable<float>(t, {ids, {}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  const double dmax = std::numeric_limits<double>::max();
  absl::StatusOr<RopeTable<double>> top = make(dmax).MakeTable<double>(t, {ids, {}});
  EXPECT_TRUE(top.ok()) << top.status();
  EXPECT_TRUE(make(std::nextafter(dmax, 0.0)).MakeTable<double>(t, {ids, {}}).ok());
}

// ---------------------------------------------------------------------------------
// Axial and M-RoPE.
// ---------------------------------------------------------------------------------

TEST(RopeMultiAxis, MRopeTextTokensReduceTo1D) {
  const int64_t d = 128, n = 5;
  for (bool interleaved : {false, true}) {
    RopeOptions o;
    o.head_dim = d;
    o.rotary_dim = d;
    o.num_axes = 3;
    // Qwen2-VL's contiguous [16, 24, 24]; Qwen3-VL's interleaved [24, 20, 20].
    o.plane_axes = interleaved ? *MRopePlaneAxes({24, 20, 20}, true) : *MRopePlaneAxes({16, 24, 24});
    const RopeFrequencies f = *DefaultRopeFrequencies(d, 1000000.0);
    const Rope mrope = *Rope::Create(o, f);
    const Rope rope1 = MakeRope(d, d, PlanePairing::kHalfSplit, f);
    std::mt19937_64 rng(10);
    const std::vector<double> x = Normal(n * d, rng);
    const std::vector<int64_t> ids1 = {0, 4, 9, 1 << 20, 12345};
    std::vector<int64_t> ids3;
    for (int a = 0; a < 3; ++a) ids3.insert(ids3.end(), ids1.begin(), ids1.end());
    std::vector<double> y3(n * d), y1(n * d);
    const RopeTensor t = RopeTensor::Contiguous(RopeLayout::kBSHD, 1, n, 1, d);
    ASSERT_TRUE(mrope.Forward<double>(t, {ids3, {}}, x.data(), y3.data()).ok());
    ASSERT_TRUE(rope1.Forward<double>(t, {ids1, {}}, x.data(), y1.data()).ok());
    for (int64_t k = 0; k < n * d; ++k) EXPECT_EQ(y3[k], y1[k]);
    // A vision token (distinct ids) differs: the axes are really used.
    ids3[n] = 77;
    ASSERT_TRUE(mrope.Forward<double>(t, {ids3, {}}, x.data(), y3.data()).ok());
    bool differs = false;
    for (int64_t k = 0; k < d; ++k) differs |= y3[k] != y1[k];
    EXPECT_TRUE(differs);
  }
  // Qwen2-VL contiguous sections; Qwen3-VL interleaving T H W T H W ...
  const std::vector<int> c = *MRopePlaneAxes({2, 1, 1});
  EXPECT_EQ(c, (std::vector<int>{0, 0, 1, 2}));
  const std::vector<int> il = *MRopePlaneAxes({4, 2, 2}, true);
  EXPECT_EQ(il, (std::vector<int>{0, 1, 2, 0, 1, 2, 0, 0}));
  EXPECT_FALSE(MRopePlaneAxes({16, 24, 24}, true).ok());  // H needs 24 of every 3rd of 64
}

TEST(RopeMultiAxis, Axial2DMatchesReferenceAndIsRelativePerAxis) {
  const int64_t d = 16;
  RopeOptions o;
  o.head_dim = d;
  o.rotary_dim = d;
  o.pairing = PlanePairing::kInterleaved;
  o.num_axes = 2;
  o.plane_axes = *AxialPlaneAxes(d / 2, 2);
  const RopeFrequencies f = *AxialRopeFrequencies(d, 2, 100.0);
  // Each axis: default frequencies of rotary dim 8 (theta_j = 100^(-2j/8)).
  const std::vector<double> block = RefThetas(8, 100.0);
  for (int j = 0; j < 4; ++j) {
    EXPECT_NEAR(f.thetas[j], block[j], kSchedTol);
    EXPECT_NEAR(f.thetas[4 + j], block[j], kSchedTol);
  }
  const Rope rope = *Rope::Create(o, f);
  std::mt19937_64 rng(12);
  const std::vector<double> q = Normal(d, rng), k = Normal(d, rng);
  auto rot = [&](std::vector<double> x, int64_t row, int64_t col) {
    const std::vector<int64_t> ids = {row, col};  // axis-major, one token
    EXPECT_TRUE(rope.Forward<double>(RopeTensor::Contiguous(RopeLayout::kBSHD, 1, 1, 1, d),
                                     {ids, {}}, x.data(), x.data()).ok());
    return x;
  };
  const std::vector<double> y = rot(q, 3, -5);
  std::vector<int64_t> pos_of_plane = {3, 3, 3, 3, -5, -5, -5, -5};
  const std::vector<double> want =
      RefRotate(q, d, o.pairing, pos_of_plane, f.thetas, std::vector<double>(d / 2, 1.0));
  for (int64_t c = 0; c < d; ++c) EXPECT_NEAR(y[c], want[c], 1e-14);
  // 2D relativity: the score depends only on (row, col) differences. 1e-12 as above.
  EXPECT_NEAR(Dot(rot(q, 3, 9), rot(k, -4, 20)), Dot(q, rot(k, -7, 11)), 1e-12);
}

// ---------------------------------------------------------------------------------
// Bad input.
// ---------------------------------------------------------------------------------

TEST(RopeErrors, RejectsBadInput) {
  const RopeFrequencies f = *DefaultRopeFrequencies(8);
  RopeOptions o;
  o.head_dim = 8;
  o.rotary_dim = 7;
  EXPECT_FALSE(Rope::Create(o, f).ok());  // odd rotary_dim
  o.rotary_dim = 10;
  EXPECT_FALSE(Rope::Create(o, f).ok());  // rotary_dim > head_dim
  o.rotary_dim = 6;
  EXPECT_FALSE(Rope::Create(o, f).ok());  // 4 thetas for 3 planes
  o.rotary_dim = 8;
  RopeFrequencies g = f;
  g.thetas[1] = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(Rope::Create(o, g).ok());
  g = f;
  g.attention_factor = 0.0;
  EXPECT_FALSE(Rope::Create(o, g).ok());
  o.num_axes = 2;
  EXPECT_FALSE(Rope::Create(o, f).ok());  // no plane_axes
  o.plane_axes = {0, 1, 2, 0};
  EXPECT_FALSE(Rope::Create(o, f).ok());  // axis out of range
  o.num_axes = 1;
  o.plane_axes.clear();
  o.xpos.enabled = true;
  o.xpos.scale_base = -1.0;
  EXPECT_FALSE(Rope::Create(o, f).ok());
  o.xpos.enabled = false;
  const Rope rope = *Rope::Create(o, f);

  std::vector<float> x(2 * 3 * 2 * 8, 1.0f), y(x.size());
  const RopeTensor t = RopeTensor::Contiguous(RopeLayout::kBSHD, 2, 3, 2, 8);
  const std::vector<int64_t> ids(6, 1), two(2, 0), three(3, 0);
  EXPECT_TRUE(rope.Forward<float>(t, {ids, {}}, x.data(), y.data()).ok());
  EXPECT_FALSE(rope.Forward<float>(t, {ids, two}, x.data(), y.data()).ok());  // both
  EXPECT_FALSE(rope.Forward<float>(t, {three, {}}, x.data(), y.data()).ok());  // count
  EXPECT_FALSE(rope.Forward<float>(t, {{}, three}, x.data(), y.data()).ok());  // offsets
  EXPECT_FALSE(rope.Forward<float>(t, {ids, {}}, x.data(), x.data() + 1).ok());  // overlap
  EXPECT_FALSE(rope.Forward<float>(t, {ids, {}}, nullptr, y.data()).ok());
  const std::vector<int64_t> huge = {std::numeric_limits<int64_t>::max(), 0};
  EXPECT_FALSE(rope.Forward<float>(t, {{}, huge}, x.data(), y.data()).ok());  // overflow
  RopeTensor bad = t;
  bad.head_dim = 6;
  EXPECT_FALSE(rope.Forward<float>(bad, {ids, {}}, x.data(), y.data()).ok());
  bad = t;
  bad.head_stride = 4;  // heads overlap
  EXPECT_FALSE(ValidateRopeTensor(bad).ok());
  bad = t;
  bad.seq_len = -1;
  EXPECT_FALSE(ValidateRopeTensor(bad).ok());
  bad = t;
  bad.cu_seqlens = two;
  EXPECT_FALSE(ValidateRopeTensor(bad).ok());  // cu_seqlens on bshd
  // No heads, so no bytes, but more tokens than a table could hold (2^62; 4 x 2^62 would
  // overflow int64): refused before any per-token table, not a crash.
  for (const auto& [b, s] : {std::pair<int64_t, int64_t>{int64_t{1} << 31, int64_t{1} << 31},
                             std::pair<int64_t, int64_t>{4, int64_t{1} << 62}}) {
    bad = t;
    bad.batch = b;
    bad.seq_len = s;
    bad.heads = 0;
    EXPECT_EQ(rope.MakeTable<float>(bad, {}).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_FALSE(rope.Forward<float>(bad, {}, x.data(), y.data()).ok());
  }
  // A table for another tensor is refused.
  const RopeTable<float> table = *rope.MakeTable<float>(t, {ids, {}});
  const RopeTensor other = RopeTensor::Contiguous(RopeLayout::kBSHD, 1, 3, 2, 8);
  EXPECT_FALSE(rope.Apply<float>(table, other, x.data(), y.data()).ok());
}

// The float table's stepped rows (MakeTable: angle addition from an exact anchor every
// 16 rows) equal the exact rounding of m (cos, sin)(p theta_i), bit for bit: read back
// through Forward on rows [1 .. 1 | 0 .. 0] (half-split: y1 = cos, y2 = sin exactly), for
// runs of consecutive positions near 0 and across 2^31, gaps, repeats, an attention
// factor other than 1, and both 1 and 3 threads (the chunks anchor where they start).
TEST(RopeTable, SteppedFloatTableEqualsTheExactRounding) {
  const int64_t d = 128, planes = d / 2;
  RopeFrequencies f = *DefaultRopeFrequencies(d, 10000.0);
  f.attention_factor = 1.2345;
  std::vector<int64_t> ids;
  for (int64_t p = 0; p < 3000; ++p) ids.push_back(p);
  for (int64_t p = (int64_t{1} << 31) - 1500; p < (int64_t{1} << 31) + 1500; ++p) ids.push_back(p);
  for (int64_t p : {7, 7, 9, 12, 13, 14, -5, -4}) ids.push_back(p);  // repeats, gaps, negatives
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int threads : {1, 3}) {
    RopeOptions o;
    o.head_dim = d;
    o.rotary_dim = d;
    o.pairing = PlanePairing::kHalfSplit;
    o.num_threads = threads;
    const Rope rope = *Rope::Create(o, f);
    const RopeTensor t = RopeTensor::Contiguous(RopeLayout::kBSHD, 1, n, 1, d);
    std::vector<float> x(static_cast<size_t>(n * d), 0.0f), y(x.size());
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < planes; ++i) x[r * d + i] = 1.0f;
    }
    ASSERT_TRUE(rope.Forward<float>(t, {ids, {}}, x.data(), y.data()).ok());
    int64_t mismatches = 0;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < planes; ++i) {
        const group::SinCos sc = group::SinCosOfMultiple(ids[r], rope.thetas()[i]);
        const float want_c = static_cast<float>(f.attention_factor * sc.cos);
        const float want_s = static_cast<float>(f.attention_factor * sc.sin);
        mismatches += y[r * d + i] != want_c;
        mismatches += y[r * d + planes + i] != want_s;
      }
    }
    EXPECT_EQ(mismatches, 0) << threads << " threads";
  }
}

}  // namespace
}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
