// Tests of gpe_rope_* (gpe.h, "RoPE"): results equal the C++ API (encodings/sequence/
// rope.h) bit for bit for every schedule, pairing, layout and dtype (the C layer only
// describes tensors, so any difference is a wiring bug); in-place, out-of-place and
// differently strided outputs agree; the backward pass matches central finite
// differences in double; bad input returns a status and a message.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "encodings/sequence/rope.h"
#include "c_api/test_util.h"
#include "gpe/gpe.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::CentralDifference;
using gpe::c_api_test::HasMessage;
using gpe::c_api_test::Random;
using gpe::c_api_test::Tensor;

namespace seq = gpe::encodings::sequence;

// The C options for each schedule, and the same frequencies from the C++ API.
struct Schedule {
  gpe_rope_options c;
  seq::RopeFrequencies f;
};

std::vector<Schedule> Schedules(int64_t head_dim, int64_t r, int32_t pairing) {
  std::vector<Schedule> out;
  gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
  o.head_dim = head_dim;
  o.rotary_dim = r;
  o.pairing = pairing;
  o.base = 500000.0;
  out.push_back({o, *seq::DefaultRopeFrequencies(r, 500000.0)});
  o.schedule = GPE_ROPE_LINEAR;
  o.factor = 4.0;
  out.push_back({o, *seq::LinearRopeFrequencies(r, 500000.0, 4.0)});
  o.schedule = GPE_ROPE_DYNAMIC_NTK;
  o.original_max_position = 2048;
  o.current_length = 8000;
  out.push_back({o, *seq::DynamicNtkRopeFrequencies(r, 500000.0, 4.0, 2048, 8000)});
  o.schedule = GPE_ROPE_YARN;
  o.factor = 16.0;
  o.beta_fast = 32.0;
  o.beta_slow = 1.0;
  o.has_mscale = 1;
  o.mscale = 0.707;
  o.mscale_all_dim = 1.0;
  seq::YarnOptions y;
  y.factor = 16.0;
  y.original_max_position = 2048;
  y.mscale = 0.707;
  y.mscale_all_dim = 1.0;
  out.push_back({o, *seq::YarnRopeFrequencies(r, 500000.0, y)});
  o.has_mscale = 0;
  o.yarn_truncate = 0;
  y.mscale.reset();
  y.mscale_all_dim.reset();
  y.truncate = false;
  out.push_back({o, *seq::YarnRopeFrequencies(r, 500000.0, y)});
  static std::vector<double> short_f, long_f;
  short_f.assign(r / 2, 1.0);
  long_f.clear();
  for (int64_t i = 0; i < r / 2; ++i) {
    short_f[i] = 1.0 + 0.01 * i;
    long_f.push_back(1.0 + 0.5 * i);
  }
  o.schedule = GPE_ROPE_LONGROPE;
  o.short_factor = short_f.data();
  o.short_factor_len = r / 2;
  o.long_factor = long_f.data();
  o.long_factor_len = r / 2;
  o.max_position = 131072;
  o.current_length = 9000;  // > L0: the long factors
  seq::LongRopeOptions l;
  l.short_factor = short_f;
  l.long_factor = long_f;
  l.original_max_position = 2048;
  l.max_position = 131072;
  out.push_back({o, *seq::LongRopeFrequencies(r, 500000.0, l, 9000)});
  o.schedule = GPE_ROPE_LLAMA3;
  o.factor = 8.0;
  o.low_freq_factor = 1.0;
  o.high_freq_factor = 4.0;
  o.original_max_position = 8192;
  seq::Llama3Options l3;
  out.push_back({o, *seq::Llama3RopeFrequencies(r, 500000.0, l3)});
  return out;
}

seq::Rope CppRope(const gpe_rope_options& o, seq::RopeFrequencies f) {
  seq::RopeOptions ro;
  ro.head_dim = o.head_dim;
  ro.rotary_dim = o.rotary_dim;
  ro.pairing = o.pairing == GPE_PAIRING_INTERLEAVED ? seq::PlanePairing::kInterleaved
                                                    : seq::PlanePairing::kHalfSplit;
  return *seq::Rope::Create(ro, std::move(f));
}

TEST(RopeC, FrequenciesEqualCppSchedules) {
  for (const Schedule& s : Schedules(64, 48, GPE_PAIRING_HALF_SPLIT)) {
    gpe_rope* rope = nullptr;
    ASSERT_EQ(gpe_rope_create(&s.c, &rope), GPE_OK) << gpe_last_error_message();
    std::vector<double> thetas(24);
    double m = 0.0;
    ASSERT_EQ(gpe_rope_frequencies(rope, thetas.data(), 24, &m), GPE_OK);
    EXPECT_EQ(thetas, s.f.thetas) << "schedule " << s.c.schedule;
    EXPECT_EQ(m, s.f.attention_factor) << "schedule " << s.c.schedule;
    int64_t hd = 0, rd = 0, axes = 0;
    ASSERT_EQ(gpe_rope_shape(rope, &hd, &rd, &axes), GPE_OK);
    EXPECT_EQ(hd, 64);
    EXPECT_EQ(rd, 48);
    EXPECT_EQ(axes, 1);
    gpe_rope_destroy(rope);
  }
}

// Runs gpe_rope_forward on a [2, 5, 3, 20] bshd / sbhd or [10, 3, 20] thd float64
// tensor and compares with seq::Rope::Forward on the same memory: equality is exact.
TEST(RopeC, ForwardEqualsCppApiForEveryScheduleLayoutAndPairing) {
  std::mt19937_64 rng(1);
  const int64_t b = 2, s = 5, h = 3, d = 20, r = 16;
  for (int32_t pairing : {GPE_PAIRING_INTERLEAVED, GPE_PAIRING_HALF_SPLIT}) {
    for (const Schedule& sc : Schedules(d, r, pairing)) {
      gpe_rope* rope = nullptr;
      ASSERT_EQ(gpe_rope_create(&sc.c, &rope), GPE_OK) << gpe_last_error_message();
      const seq::Rope cpp = CppRope(sc.c, sc.f);
      for (int32_t layout : {GPE_ROPE_LAYOUT_BSHD, GPE_ROPE_LAYOUT_SBHD, GPE_ROPE_LAYOUT_THD}) {
        std::vector<double> x = Random(&rng, b * s * h * d), out(x.size()), want(x.size());
        std::vector<int64_t> shape = layout == GPE_ROPE_LAYOUT_THD
                                         ? std::vector<int64_t>{b * s, h, d}
                                         : layout == GPE_ROPE_LAYOUT_BSHD
                                               ? std::vector<int64_t>{b, s, h, d}
                                               : std::vector<int64_t>{s, b, h, d};
        std::vector<int64_t> cu = {0, 3, 10};  // thd: sequences of 3 and 7 tokens
        std::vector<int64_t> offsets = {1000, 123456789};
        std::vector<int64_t> cshape = {3}, oshape = {2};
        DLTensor tx = Tensor(x.data(), kDLFloat, 64, &shape);
        DLTensor to = Tensor(out.data(), kDLFloat, 64, &shape);
        DLTensor tcu = Tensor(cu.data(), kDLInt, 64, &cshape);
        DLTensor toff = Tensor(offsets.data(), kDLInt, 64, &oshape);
        gpe_rope_tokens tok = GPE_ROPE_TOKENS_INIT;
        tok.layout = layout;
        tok.offsets = &toff;
        if (layout == GPE_ROPE_LAYOUT_THD) tok.cu_seqlens = &tcu;
        ASSERT_EQ(gpe_rope_forward(rope, &tok, &tx, &to), GPE_OK) << gpe_last_error_message();
        seq::RopeTensor t = seq::RopeTensor::Contiguous(
            layout == GPE_ROPE_LAYOUT_THD    ? seq::RopeLayout::kTHD
            : layout == GPE_ROPE_LAYOUT_BSHD ? seq::RopeLayout::kBSHD
                                             : seq::RopeLayout::kSBHD,
            layout == GPE_ROPE_LAYOUT_THD ? 2 : b, layout == GPE_ROPE_LAYOUT_THD ? b * s : s, h,
            d, layout == GPE_ROPE_LAYOUT_THD ? absl::Span<const int64_t>(cu)
                                             : absl::Span<const int64_t>());
        seq::RopePositions pos;
        pos.offsets = offsets;
        ASSERT_TRUE(cpp.Forward<double>(t, pos, x.data(), want.data()).ok());
        EXPECT_EQ(out, want) << "schedule " << sc.c.schedule << " layout " << layout;
        // In place gives the same bits.
        ASSERT_EQ(gpe_rope_forward(rope, &tok, &tx, &tx), GPE_OK);
        EXPECT_EQ(x, want);
      }
      gpe_rope_destroy(rope);
    }
  }
}

// Every dtype, with position ids, against the C++ API; and an output whose strides
// differ from the input's (a padded [2, 4, 3, 24] buffer) gives the same values.
template <class T>
void CheckDtype(DLDataTypeCode code, int bits, T (*from)(double)) {
  std::mt19937_64 rng(bits + code);
  const int64_t b = 2, s = 4, h = 3, d = 16;
  gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
  o.head_dim = d;
  o.rotary_dim = 12;
  gpe_rope* rope = nullptr;
  ASSERT_EQ(gpe_rope_create(&o, &rope), GPE_OK);
  const seq::Rope cpp = CppRope(o, *seq::DefaultRopeFrequencies(12, 10000.0));
  std::vector<double> xd = Random(&rng, b * s * h * d);
  std::vector<T> x(xd.size()), out(xd.size()), want(xd.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = from(xd[i]);
  std::vector<int64_t> ids(b * s);
  for (int64_t& p : ids) p = static_cast<int64_t>(rng() % 100000) - 50000;
  std::vector<int64_t> shape = {b, s, h, d}, ishape = {b * s};
  DLTensor tx = Tensor(x.data(), code, bits, &shape);
  DLTensor to = Tensor(out.data(), code, bits, &shape);
  DLTensor tids = Tensor(ids.data(), kDLInt, 64, &ishape);
  gpe_rope_tokens tok = GPE_ROPE_TOKENS_INIT;
  tok.position_ids = &tids;
  tok.role = GPE_ROPE_KEY;
  ASSERT_EQ(gpe_rope_forward(rope, &tok, &tx, &to), GPE_OK) << gpe_last_error_message();
  seq::RopePositions pos;
  pos.ids = ids;
  const seq::RopeTensor t = seq::RopeTensor::Contiguous(seq::RopeLayout::kBSHD, b, s, h, d);
  ASSERT_TRUE(cpp.Forward<T>(t, pos, x.data(), want.data(), seq::RopeRole::kKey).ok());
  EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size() * sizeof(T)), 0);
  // Padded output rows: 24 elements per head row, the rest left untouched.
  std::vector<T> padded(b * s * h * 24, from(-7.0));
  std::vector<int64_t> pstrides = {s * h * 24, h * 24, 24, 1};
  DLTensor tp = Tensor(padded.data(), code, bits, &shape, &pstrides);
  ASSERT_EQ(gpe_rope_forward(rope, &tok, &tx, &tp), GPE_OK) << gpe_last_error_message();
  for (int64_t row = 0; row < b * s * h; ++row) {
    EXPECT_EQ(std::memcmp(&padded[row * 24], &want[row * d], d * sizeof(T)), 0) << row;
    const T pad = from(-7.0);
    for (int64_t c = d; c < 24; ++c) {
      EXPECT_EQ(std::memcmp(&padded[row * 24 + c], &pad, sizeof(T)), 0) << "padding written";
    }
  }
  // Backward of the forward is the identity up to rounding of T.
  ASSERT_EQ(gpe_rope_backward(rope, &tok, &to, &to), GPE_OK);
  std::vector<T> back_want(xd.size());
  ASSERT_TRUE(cpp.Backward<T>(t, pos, want.data(), back_want.data(), seq::RopeRole::kKey).ok());
  EXPECT_EQ(std::memcmp(out.data(), back_want.data(), out.size() * sizeof(T)), 0);
  gpe_rope_destroy(rope);
}

TEST(RopeC, AllDtypesEqualCppApi) {
  CheckDtype<float>(kDLFloat, 32, [](double v) { return static_cast<float>(v); });
  CheckDtype<double>(kDLFloat, 64, [](double v) { return v; });
  CheckDtype<seq::BFloat16>(kDLBfloat, 16,
                            [](double v) { return seq::ToBFloat16(static_cast<float>(v)); });
  CheckDtype<seq::Float16>(kDLFloat, 16,
                           [](double v) { return seq::ToFloat16(static_cast<float>(v)); });
}

// M-RoPE (Qwen2-VL sections) with [3, N] position ids, and xPos, against the C++ API.
TEST(RopeC, MRopeAndXposEqualCppApi) {
  std::mt19937_64 rng(5);
  const int64_t n = 6, h = 2, d = 16;
  std::vector<int64_t> sections = {4, 2, 2};  // axes 1, 2 take planes 1, 4 and 2, 5
  gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
  o.head_dim = d;
  o.axes = GPE_ROPE_AXES_MROPE_INTERLEAVED;
  o.mrope_sections = sections.data();
  o.num_mrope_sections = 3;
  gpe_rope* rope = nullptr;
  ASSERT_EQ(gpe_rope_create(&o, &rope), GPE_OK) << gpe_last_error_message();
  seq::RopeOptions ro;
  ro.head_dim = d;
  ro.rotary_dim = d;
  ro.plane_axes = *seq::MRopePlaneAxes(sections, true);
  ro.num_axes = 3;
  const seq::Rope cpp = *seq::Rope::Create(ro, *seq::DefaultRopeFrequencies(d));
  std::vector<double> x = Random(&rng, n * h * d), out(x.size()), want(x.size());
  std::vector<int64_t> ids(3 * n);
  for (int64_t& p : ids) p = static_cast<int64_t>(rng() % 64);
  std::vector<int64_t> shape = {1, n, h, d}, ishape = {3, n};
  DLTensor tx = Tensor(x.data(), kDLFloat, 64, &shape);
  DLTensor to = Tensor(out.data(), kDLFloat, 64, &shape);
  DLTensor tids = Tensor(ids.data(), kDLInt, 64, &ishape);
  gpe_rope_tokens tok = GPE_ROPE_TOKENS_INIT;
  tok.position_ids = &tids;
  ASSERT_EQ(gpe_rope_forward(rope, &tok, &tx, &to), GPE_OK) << gpe_last_error_message();
  seq::RopePositions pos;
  pos.ids = ids;
  const seq::RopeTensor t = seq::RopeTensor::Contiguous(seq::RopeLayout::kBSHD, 1, n, h, d);
  ASSERT_TRUE(cpp.Forward<double>(t, pos, x.data(), want.data()).ok());
  EXPECT_EQ(out, want);
  // One axis of ids is rejected for a 3-axis encoding.
  std::vector<int64_t> one = {n};
  DLTensor t1 = Tensor(ids.data(), kDLInt, 64, &one);
  tok.position_ids = &t1;
  EXPECT_EQ(gpe_rope_forward(rope, &tok, &tx, &to), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("axes"));
  tok.position_ids = nullptr;  // offsets are single-axis only
  EXPECT_EQ(gpe_rope_forward(rope, &tok, &tx, &to), GPE_ERROR_INVALID_ARGUMENT);
  gpe_rope_destroy(rope);

  gpe_rope_options xo = GPE_ROPE_OPTIONS_INIT;
  xo.head_dim = d;
  xo.xpos = 1;
  xo.xpos_centre = 3;
  ASSERT_EQ(gpe_rope_create(&xo, &rope), GPE_OK);
  seq::RopeOptions xro;
  xro.head_dim = d;
  xro.rotary_dim = d;
  xro.xpos.enabled = true;
  xro.xpos.centre = 3;
  const seq::Rope xcpp = *seq::Rope::Create(xro, *seq::DefaultRopeFrequencies(d));
  tok.role = GPE_ROPE_KEY;
  ASSERT_EQ(gpe_rope_forward(rope, &tok, &tx, &to), GPE_OK);
  ASSERT_TRUE(xcpp.Forward<double>(t, {}, x.data(), want.data(), seq::RopeRole::kKey).ok());
  EXPECT_EQ(out, want);
  gpe_rope_destroy(rope);
}

// The backward pass against central finite differences of L(x) = <g, forward(x)> in
// double, with YaRN (attention factor != 1) and thd offsets. L is linear in x, so the
// central difference is exact up to rounding: |error| ~ 1e-16 * |L| / h ~ 1e-11 for
// |L| ~ 10 and h = 1e-3; the tolerance 1e-8 leaves room and still catches a wrong sign
// or a missing attention factor (errors of order 1).
TEST(RopeC, BackwardMatchesCentralDifferences) {
  std::mt19937_64 rng(7);
  const int64_t tokens = 7, h = 2, d = 12;
  gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
  o.head_dim = d;
  o.rotary_dim = 8;
  o.pairing = GPE_PAIRING_INTERLEAVED;
  o.schedule = GPE_ROPE_YARN;
  o.factor = 8.0;
  o.original_max_position = 64;
  gpe_rope* rope = nullptr;
  ASSERT_EQ(gpe_rope_create(&o, &rope), GPE_OK) << gpe_last_error_message();
  std::vector<int64_t> shape = {tokens, h, d}, cu = {0, 2, 2, 7}, cshape = {4};
  std::vector<int64_t> offsets = {5, -9, 1 << 20}, oshape = {3};
  DLTensor tcu = Tensor(cu.data(), kDLInt, 64, &cshape);
  DLTensor toff = Tensor(offsets.data(), kDLInt, 64, &oshape);
  gpe_rope_tokens tok = GPE_ROPE_TOKENS_INIT;
  tok.layout = GPE_ROPE_LAYOUT_THD;
  tok.cu_seqlens = &tcu;
  tok.offsets = &toff;
  std::vector<double> x = Random(&rng, tokens * h * d), g = Random(&rng, x.size());
  std::vector<double> y(x.size()), dx(x.size());
  auto loss = [&]() {
    DLTensor tx = Tensor(x.data(), kDLFloat, 64, &shape);
    DLTensor ty = Tensor(y.data(), kDLFloat, 64, &shape);
    EXPECT_EQ(gpe_rope_forward(rope, &tok, &tx, &ty), GPE_OK);
    double l = 0.0;
    for (size_t i = 0; i < y.size(); ++i) l += g[i] * y[i];
    return l;
  };
  DLTensor tg = Tensor(g.data(), kDLFloat, 64, &shape);
  DLTensor tdx = Tensor(dx.data(), kDLFloat, 64, &shape);
  ASSERT_EQ(gpe_rope_backward(rope, &tok, &tg, &tdx), GPE_OK) << gpe_last_error_message();
  const double eps = 1e-3;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(dx[i], CentralDifference(&x, i, eps, loss), 1e-8) << "i=" << i;
  }
  gpe_rope_destroy(rope);
}

TEST(RopeC, BadOptionsRejected) {
  gpe_rope* rope = reinterpret_cast<gpe_rope*>(1);
  EXPECT_EQ(gpe_rope_create(nullptr, &rope), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(rope, nullptr);  // cleared on failure
  gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
  o.head_dim = 16;
  EXPECT_EQ(gpe_rope_create(&o, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  struct Case {
    const char* what;
    void (*edit)(gpe_rope_options*);
    gpe_status code;
    const char* message;
  };
  const Case cases[] = {
      {"odd rotary_dim", [](gpe_rope_options* p) { p->rotary_dim = 7; },
       GPE_ERROR_INVALID_ARGUMENT, "rotary_dim"},
      {"rotary_dim > head_dim", [](gpe_rope_options* p) { p->rotary_dim = 18; },
       GPE_ERROR_INVALID_ARGUMENT, "rotary_dim"},
      {"head_dim 1", [](gpe_rope_options* p) { p->head_dim = 1; }, GPE_ERROR_INVALID_ARGUMENT,
       "head_dim"},
      {"NaN base", [](gpe_rope_options* p) { p->base = std::nan(""); },
       GPE_ERROR_INVALID_ARGUMENT, "base"},
      {"NaN linear factor",
       [](gpe_rope_options* p) {
         p->schedule = GPE_ROPE_LINEAR;
         p->factor = std::nan("");
       },
       GPE_ERROR_INVALID_ARGUMENT, "factor"},
      {"YaRN factor < 1",
       [](gpe_rope_options* p) {
         p->schedule = GPE_ROPE_YARN;
         p->factor = 0.5;
       },
       GPE_ERROR_INVALID_ARGUMENT, "factor"},
      {"infinite Llama 3 factor",
       [](gpe_rope_options* p) {
         p->schedule = GPE_ROPE_LLAMA3;
         p->factor = std::numeric_limits<double>::infinity();
       },
       GPE_ERROR_INVALID_ARGUMENT, "factor"},
      {"LongRoPE NULL factors",
       [](gpe_rope_options* p) {
         p->schedule = GPE_ROPE_LONGROPE;
         p->short_factor_len = 8;
         p->long_factor_len = 8;
       },
       GPE_ERROR_INVALID_ARGUMENT, "NULL"},
      {"LongRoPE negative length",
       [](gpe_rope_options* p) {
         p->schedule = GPE_ROPE_LONGROPE;
         p->short_factor_len = -1;
       },
       GPE_ERROR_INVALID_ARGUMENT, "negative"},
      {"unknown schedule", [](gpe_rope_options* p) { p->schedule = 9; },
       GPE_ERROR_INVALID_ARGUMENT, "schedule"},
      {"unknown pairing", [](gpe_rope_options* p) { p->pairing = 2; },
       GPE_ERROR_INVALID_ARGUMENT, "pairing"},
      {"unknown axes", [](gpe_rope_options* p) { p->axes = 4; }, GPE_ERROR_INVALID_ARGUMENT,
       "axes"},
      {"axial with YaRN",
       [](gpe_rope_options* p) {
         p->axes = GPE_ROPE_AXES_AXIAL;
         p->num_axes = 2;
         p->schedule = GPE_ROPE_YARN;
       },
       GPE_ERROR_INVALID_ARGUMENT, "DEFAULT"},
      {"M-RoPE without sections",
       [](gpe_rope_options* p) {
         p->axes = GPE_ROPE_AXES_MROPE;
         p->num_mrope_sections = 2;
       },
       GPE_ERROR_INVALID_ARGUMENT, "NULL"},
      {"xPos zero gamma",
       [](gpe_rope_options* p) {
         p->xpos = 1;
         p->xpos_gamma = 0.0;
       },
       GPE_ERROR_INVALID_ARGUMENT, "gamma"},
      {"zero threads", [](gpe_rope_options* p) { p->num_threads = 0; },
       GPE_ERROR_INVALID_ARGUMENT, "num_threads"},
      {"struct_size 0", [](gpe_rope_options* p) { p->struct_size = 0; },
       GPE_ERROR_INVALID_ARGUMENT, "struct_size"},
      {"newer header", [](gpe_rope_options* p) { p->struct_size += 8; },
       GPE_ERROR_VERSION_MISMATCH, "newer"},
  };
  for (const Case& c : cases) {
    gpe_rope_options bad = o;
    c.edit(&bad);
    rope = nullptr;
    EXPECT_EQ(gpe_rope_create(&bad, &rope), c.code) << c.what;
    EXPECT_TRUE(HasMessage(c.message)) << c.what << ": " << gpe_last_error_message();
    EXPECT_EQ(rope, nullptr) << c.what;
  }
  // Wrong factor-list length reaches rope.h's check.
  std::vector<double> f(3, 1.0);
  gpe_rope_options lr = o;
  lr.schedule = GPE_ROPE_LONGROPE;
  lr.short_factor = lr.long_factor = f.data();
  lr.short_factor_len = lr.long_factor_len = 3;
  EXPECT_EQ(gpe_rope_create(&lr, &rope), GPE_ERROR_INVALID_ARGUMENT);
  double thetas[8];
  ASSERT_EQ(gpe_rope_create(&o, &rope), GPE_OK);
  EXPECT_EQ(gpe_rope_frequencies(rope, thetas, 7, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_rope_frequencies(rope, nullptr, 8, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_rope_frequencies(nullptr, thetas, 8, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_rope_shape(nullptr, nullptr, nullptr, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  gpe_rope_destroy(rope);
  gpe_rope_destroy(nullptr);  // a no-op
}

TEST(RopeC, BadTensorsRejected) {
  gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
  o.head_dim = 8;
  gpe_rope* rope = nullptr;
  ASSERT_EQ(gpe_rope_create(&o, &rope), GPE_OK);
  std::vector<double> x(2 * 3 * 2 * 8, 1.0), out(x.size());
  std::vector<float> xf(x.size());
  std::vector<int64_t> shape = {2, 3, 2, 8}, thd = {6, 2, 8};
  DLTensor tx = Tensor(x.data(), kDLFloat, 64, &shape);
  DLTensor to = Tensor(out.data(), kDLFloat, 64, &shape);
  gpe_rope_tokens tok = GPE_ROPE_TOKENS_INIT;
  auto fails = [&](const DLTensor* a, DLTensor* b, const char* msg) {
    EXPECT_EQ(gpe_rope_forward(rope, &tok, a, b), GPE_ERROR_INVALID_ARGUMENT) << msg;
    EXPECT_TRUE(HasMessage(msg)) << gpe_last_error_message();
    EXPECT_EQ(gpe_rope_backward(rope, &tok, a, b), GPE_ERROR_INVALID_ARGUMENT) << msg;
  };
  EXPECT_EQ(gpe_rope_forward(nullptr, &tok, &tx, &to), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_rope_forward(rope, nullptr, &tx, &to), GPE_ERROR_INVALID_ARGUMENT);
  fails(nullptr, &to, "x is NULL");
  fails(&tx, nullptr, "NULL");
  // dtype mismatch between x and out.
  DLTensor tf = Tensor(xf.data(), kDLFloat, 32, &shape);
  fails(&tx, &tf, "dtype");
  // int64 data.
  DLTensor ti = Tensor(x.data(), kDLInt, 64, &shape);
  fails(&ti, &ti, "dtype");
  // head_dim mismatch.
  std::vector<int64_t> shape6 = {2, 3, 2, 6};
  DLTensor t6 = Tensor(x.data(), kDLFloat, 64, &shape6);
  fails(&t6, &t6, "head_dim");
  // 3-d tensor for bshd.
  DLTensor t3 = Tensor(x.data(), kDLFloat, 64, &thd);
  fails(&t3, &t3, "dimensions");
  // Non-contiguous head_dim.
  std::vector<int64_t> st = {96, 32, 16, 2};
  std::vector<double> big(200);
  DLTensor ts = Tensor(big.data(), kDLFloat, 64, &shape, &st);
  fails(&ts, &ts, "stride 1");
  // Overlapping rows (a zero head stride) in the output.
  std::vector<int64_t> st0 = {48, 16, 0, 1};
  DLTensor tz = Tensor(out.data(), kDLFloat, 64, &shape, &st0);
  fails(&tx, &tz, "overlap");
  // out overlapping x without being x.
  DLTensor tshift = Tensor(x.data() + 1, kDLFloat, 64, &shape6);
  std::vector<int64_t> st6 = {48, 16, 8, 1};
  tshift.shape = shape.data();
  tshift.strides = st6.data();
  x.resize(x.size() + 1);
  tx.data = x.data();
  tshift.data = x.data() + 1;
  fails(&tx, &tshift, "overlaps");
  // An output with a negative token stride is rejected before anything is written.
  std::vector<double> rev(x.size(), -3.0);
  std::vector<int64_t> neg = {48, -16, 8, 1};
  DLTensor trev = Tensor(rev.data() + 32, kDLFloat, 64, &shape, &neg);
  fails(&tx, &trev, "strides");
  for (double v : rev) EXPECT_EQ(v, -3.0);
  // Both ids and offsets; wrong sizes.
  std::vector<int64_t> ids(6), offs(2), ishape = {6}, oshape = {2}, bad_shape = {5};
  DLTensor tids = Tensor(ids.data(), kDLInt, 64, &ishape);
  DLTensor toff = Tensor(offs.data(), kDLInt, 64, &oshape);
  tok.position_ids = &tids;
  tok.offsets = &toff;
  fails(&tx, &to, "not both");
  tok.offsets = nullptr;
  DLTensor tids5 = Tensor(ids.data(), kDLInt, 64, &bad_shape);
  tok.position_ids = &tids5;
  fails(&tx, &to, "tokens");
  tok.position_ids = nullptr;
  DLTensor toff5 = Tensor(offs.data(), kDLInt, 64, &bad_shape);
  tok.offsets = &toff5;
  fails(&tx, &to, "offsets");
  tok.offsets = nullptr;
  // Layouts: cu_seqlens on bshd; thd without cu_seqlens; non-monotone cu_seqlens.
  std::vector<int64_t> cu = {0, 4, 2, 6}, cshape = {4};
  DLTensor tcu = Tensor(cu.data(), kDLInt, 64, &cshape);
  tok.cu_seqlens = &tcu;
  fails(&tx, &to, "thd");
  tok.layout = GPE_ROPE_LAYOUT_THD;
  DLTensor x3 = Tensor(x.data(), kDLFloat, 64, &thd);
  DLTensor o3 = Tensor(out.data(), kDLFloat, 64, &thd);
  fails(&x3, &o3, "monotone");
  cu = {0, 2, 4, 5};  // ends before the 6 tokens
  fails(&x3, &o3, "total tokens");
  // A broadcast cu_seqlens (stride 0 over 2^40 entries: 8 bytes of memory) is refused
  // before it is copied, which would take 8 TiB.
  std::vector<int64_t> huge_shape = {int64_t{1} << 40}, zero_stride = {0};
  DLTensor tcu_broadcast = tcu;
  tcu_broadcast.shape = huge_shape.data();
  tcu_broadcast.strides = zero_stride.data();
  tok.cu_seqlens = &tcu_broadcast;
  fails(&x3, &o3, "repeats entries");
  tok.cu_seqlens = &tcu;
  tok.cu_seqlens = nullptr;
  fails(&x3, &o3, "cu_seqlens");
  tok.layout = 7;
  fails(&x3, &o3, "layout");
  tok.layout = GPE_ROPE_LAYOUT_BSHD;
  tok.role = 2;
  fails(&tx, &to, "role");
  tok.role = GPE_ROPE_QUERY;
  tok.struct_size = 4;
  fails(&tx, &to, "struct_size");
  tok.struct_size = sizeof(gpe_rope_tokens);
  // Offsets whose last position overflows int64.
  offs = {std::numeric_limits<int64_t>::max() - 1, 0};
  tok.offsets = &toff;
  fails(&tx, &to, "overflow");
  gpe_rope_destroy(rope);
}

// A table built once serves q (4 heads) and k (1 head, GQA) of float32 and bfloat16
// tensors and gives the bits of gpe_rope_forward / _backward; it outlives the encoding
// and the position tensors; wrong dtype class or token count is rejected.
TEST(RopeC, TableReuseEqualsOneShotCalls) {
  std::mt19937_64 rng(17);
  const int64_t tokens = 9, d = 16;
  gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
  o.head_dim = d;
  o.schedule = GPE_ROPE_LLAMA3;
  o.xpos = 1;
  gpe_rope* rope = nullptr;
  ASSERT_EQ(gpe_rope_create(&o, &rope), GPE_OK) << gpe_last_error_message();
  std::vector<int64_t> cu = {0, 4, 9}, cshape = {3}, offsets = {100, 7}, oshape = {2};
  auto* cu_copy = new std::vector<int64_t>(cu);
  auto* off_copy = new std::vector<int64_t>(offsets);
  DLTensor tcu = Tensor(cu_copy->data(), kDLInt, 64, &cshape);
  DLTensor toff = Tensor(off_copy->data(), kDLInt, 64, &oshape);
  gpe_rope_tokens tok = GPE_ROPE_TOKENS_INIT;
  tok.layout = GPE_ROPE_LAYOUT_THD;
  tok.cu_seqlens = &tcu;
  tok.offsets = &toff;
  tok.role = GPE_ROPE_KEY;
  std::vector<int64_t> qshape = {tokens, 4, d}, kshape = {tokens, 1, d};
  std::vector<float> like(tokens * 4 * d);
  DLTensor tlike = Tensor(like.data(), kDLFloat, 32, &qshape);
  gpe_rope_table* table = nullptr;
  ASSERT_EQ(gpe_rope_table_create(rope, &tok, &tlike, &table), GPE_OK) << gpe_last_error_message();
  // Expected values from the one-shot calls, before the encoding is released.
  std::vector<double> qd = Random(&rng, tokens * 4 * d), kd = Random(&rng, tokens * d);
  std::vector<float> q(qd.begin(), qd.end()), k(kd.begin(), kd.end());
  std::vector<float> q_want(q.size()), k_want(k.size()), q_back(q.size());
  std::vector<seq::BFloat16> kb(k.size()), kb_want(k.size());
  for (size_t i = 0; i < k.size(); ++i) kb[i] = seq::ToBFloat16(k[i]);
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, &qshape);
  DLTensor tk = Tensor(k.data(), kDLFloat, 32, &kshape);
  DLTensor tkb = Tensor(kb.data(), kDLBfloat, 16, &kshape);
  DLTensor tqw = Tensor(q_want.data(), kDLFloat, 32, &qshape);
  DLTensor tkw = Tensor(k_want.data(), kDLFloat, 32, &kshape);
  DLTensor tqb = Tensor(q_back.data(), kDLFloat, 32, &qshape);
  DLTensor tkbw = Tensor(kb_want.data(), kDLBfloat, 16, &kshape);
  ASSERT_EQ(gpe_rope_forward(rope, &tok, &tq, &tqw), GPE_OK);
  ASSERT_EQ(gpe_rope_forward(rope, &tok, &tk, &tkw), GPE_OK);
  ASSERT_EQ(gpe_rope_forward(rope, &tok, &tkb, &tkbw), GPE_OK);
  ASSERT_EQ(gpe_rope_backward(rope, &tok, &tq, &tqb), GPE_OK);
  gpe_rope_destroy(rope);
  std::fill(cu_copy->begin(), cu_copy->end(), -1);  // the table copied them
  delete cu_copy;
  delete off_copy;
  std::vector<float> q_got(q.size()), k_got(k.size());
  DLTensor tqg = Tensor(q_got.data(), kDLFloat, 32, &qshape);
  DLTensor tkg = Tensor(k_got.data(), kDLFloat, 32, &kshape);
  ASSERT_EQ(gpe_rope_table_forward(table, &tq, &tqg), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(q_got, q_want);
  ASSERT_EQ(gpe_rope_table_forward(table, &tk, &tkg), GPE_OK);
  EXPECT_EQ(k_got, k_want);
  ASSERT_EQ(gpe_rope_table_forward(table, &tkb, &tkb), GPE_OK);  // in place
  EXPECT_EQ(std::memcmp(kb.data(), kb_want.data(), kb.size() * sizeof(seq::BFloat16)), 0);
  ASSERT_EQ(gpe_rope_table_backward(table, &tq, &tqg), GPE_OK);
  EXPECT_EQ(q_got, q_back);
  // A float64 tensor needs a float64 table; a different token count is rejected.
  std::vector<double> qd_out(qd.size());
  DLTensor tq64 = Tensor(qd.data(), kDLFloat, 64, &qshape);
  DLTensor tq64o = Tensor(qd_out.data(), kDLFloat, 64, &qshape);
  EXPECT_EQ(gpe_rope_table_forward(table, &tq64, &tq64o), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("float64"));
  std::vector<int64_t> short_shape = {tokens - 1, 1, d};
  DLTensor tshort = Tensor(k.data(), kDLFloat, 32, &short_shape);
  EXPECT_EQ(gpe_rope_table_forward(table, &tshort, &tshort), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_rope_table_forward(nullptr, &tq, &tq), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_rope_table_forward(table, nullptr, &tq), GPE_ERROR_INVALID_ARGUMENT);
  gpe_rope_table_destroy(table);
  gpe_rope_table_destroy(nullptr);
  // Creation checks its inputs like gpe_rope_forward.
  ASSERT_EQ(gpe_rope_create(&o, &rope), GPE_OK);
  EXPECT_EQ(gpe_rope_table_create(rope, &tok, &tlike, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  table = reinterpret_cast<gpe_rope_table*>(1);
  EXPECT_EQ(gpe_rope_table_create(rope, nullptr, &tlike, &table), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(table, nullptr);
  tok.cu_seqlens = nullptr;
  tok.offsets = nullptr;
  EXPECT_EQ(gpe_rope_table_create(rope, &tok, &tlike, &table), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("cu_seqlens"));
  gpe_rope_destroy(rope);
}

// A table is for one token numbering: built for bshd [2, 4] with offsets {0, 100}, it
// rotated a [4, 2] tensor (as many tokens) by positions 0..3, 100..103 instead of refusing
// it. And an out-of-place call whose out has strides of its own writes out only once
// nothing can refuse it: an offset that overflows int64 left out overwritten by the copy
// of x.
TEST(RopeC, TablesKeepTheirShapeAndRefusedCallsLeaveOutWhole) {
  const int64_t d = 8, h = 1;
  gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
  o.head_dim = d;
  gpe_rope* rope = nullptr;
  ASSERT_EQ(gpe_rope_create(&o, &rope), GPE_OK) << gpe_last_error_message();
  std::vector<int64_t> offsets = {0, 100}, oshape = {2};
  DLTensor toff = Tensor(offsets.data(), kDLInt, 64, &oshape);
  gpe_rope_tokens tok = GPE_ROPE_TOKENS_INIT;
  tok.offsets = &toff;
  std::vector<int64_t> s24 = {2, 4, h, d}, s42 = {4, 2, h, d};
  std::vector<float> x(2 * 4 * h * d, 0.5f), y(x.size(), 0.0f);
  DLTensor t24 = Tensor(x.data(), kDLFloat, 32, &s24), t42 = Tensor(x.data(), kDLFloat, 32, &s42);
  DLTensor y42 = Tensor(y.data(), kDLFloat, 32, &s42);
  gpe_rope_table* table = nullptr;
  ASSERT_EQ(gpe_rope_table_create(rope, &tok, &t24, &table), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(gpe_rope_table_forward(table, &t42, &y42), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("token numbering")) << gpe_last_error_message();
  DLTensor y24 = Tensor(y.data(), kDLFloat, 32, &s24);
  EXPECT_EQ(gpe_rope_table_forward(table, &t24, &y24), GPE_OK) << gpe_last_error_message();
  gpe_rope_table_destroy(table);

  // Out of place into padded rows (16 floats per row): refused before out is touched.
  std::vector<float> padded(2 * 4 * h * 16, -7.0f);
  std::vector<int64_t> pstrides = {4 * h * 16, h * 16, 16, 1};
  DLTensor tp = Tensor(padded.data(), kDLFloat, 32, &s24, &pstrides);
  offsets = {0, std::numeric_limits<int64_t>::max() - 1};
  EXPECT_EQ(gpe_rope_forward(rope, &tok, &t24, &tp), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("overflows")) << gpe_last_error_message();
  for (float v : padded) ASSERT_EQ(v, -7.0f) << "a refused call wrote out";
  offsets = {0, 100};
  EXPECT_EQ(gpe_rope_forward(rope, &tok, &t24, &tp), GPE_OK) << gpe_last_error_message();
  EXPECT_NE(padded[0], -7.0f);
  gpe_rope_destroy(rope);

  // The same with xPos on float16 keys past float16's range (positions 6000 on): the
  // refusal comes before out is written (it came from Apply, after the copy of x).
  gpe_rope_options xo = GPE_ROPE_OPTIONS_INIT;
  xo.head_dim = d;
  xo.xpos = 1;
  gpe_rope* xrope = nullptr;
  ASSERT_EQ(gpe_rope_create(&xo, &xrope), GPE_OK) << gpe_last_error_message();
  const seq::Float16 one = seq::ToFloat16(1.0f), sentinel = seq::ToFloat16(-7.0f);
  std::vector<seq::Float16> xh(2 * 4 * h * d, one), ph(2 * 4 * h * 16, sentinel);
  DLTensor txh = Tensor(xh.data(), kDLFloat, 16, &s24);
  DLTensor tph = Tensor(ph.data(), kDLFloat, 16, &s24, &pstrides);
  gpe_rope_tokens keys = GPE_ROPE_TOKENS_INIT;
  keys.role = GPE_ROPE_KEY;
  std::vector<int64_t> far = {6000, 7000};
  DLTensor tfar = Tensor(far.data(), kDLInt, 64, &oshape);
  keys.offsets = &tfar;
  EXPECT_EQ(gpe_rope_forward(xrope, &keys, &txh, &tph), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("float16")) << gpe_last_error_message();
  for (const seq::Float16& v : ph) {
    ASSERT_EQ(std::memcmp(&v, &sentinel, sizeof(v)), 0) << "a refused call wrote out";
  }
  gpe_rope_destroy(xrope);
}

TEST(RopeC, UseScheduleSetsPublishedDefaults) {
  // Llama 3.1's published rope_scaling: the thetas equal the C++ schedule with its
  // default (published) Llama3Options, bit for bit.
  const int64_t r = 128;
  gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
  o.head_dim = r;
  o.base = 500000.0;
  ASSERT_EQ(gpe_rope_options_use_schedule(GPE_ROPE_LLAMA3, &o), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(o.schedule, GPE_ROPE_LLAMA3);
  EXPECT_EQ(o.factor, 8.0);
  EXPECT_EQ(o.original_max_position, 8192);
  EXPECT_EQ(o.base, 500000.0);  // the model's, untouched
  gpe_rope* rope = nullptr;
  ASSERT_EQ(gpe_rope_create(&o, &rope), GPE_OK) << gpe_last_error_message();
  std::vector<double> thetas(r / 2);
  ASSERT_EQ(gpe_rope_frequencies(rope, thetas.data(), r / 2, nullptr), GPE_OK);
  gpe_rope_destroy(rope);
  const seq::RopeFrequencies want = *seq::Llama3RopeFrequencies(r, 500000.0, seq::Llama3Options{});
  EXPECT_EQ(thetas, want.thetas);
  // YaRN: Peng et al.'s betas; the factor stays the caller's to set.
  ASSERT_EQ(gpe_rope_options_use_schedule(GPE_ROPE_YARN, &o), GPE_OK);
  EXPECT_EQ(o.beta_fast, 32.0);
  EXPECT_EQ(o.beta_slow, 1.0);
  EXPECT_EQ(o.yarn_truncate, 1);
  EXPECT_EQ(gpe_rope_options_use_schedule(9, &o), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_rope_options_use_schedule(GPE_ROPE_YARN, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  o.struct_size += 8;
  EXPECT_EQ(gpe_rope_options_use_schedule(GPE_ROPE_YARN, &o), GPE_ERROR_VERSION_MISMATCH);
}

}  // namespace
