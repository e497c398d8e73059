// Tests of the C ABI through gpe.h only: results against direct formulas computed in
// long double, and every kind of bad input rejected with a code and a message.
#include "gpe/gpe.h"

#include <cmath>
#include <quadmath.h>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "c_api/test_util.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::Tensor;

gpe_so_rep* MakePlanes(int64_t dim, int64_t rotary_dim, int pairing, double base = 10000.0) {
  gpe_so_planes_options o = GPE_SO_PLANES_OPTIONS_INIT;
  o.dim = dim;
  o.rotary_dim = rotary_dim;
  o.pairing = pairing;
  o.base = base;
  gpe_so_rep* rep = nullptr;
  EXPECT_EQ(gpe_so_rep_create_planes(&o, &rep), GPE_OK) << gpe_last_error_message();
  return rep;
}

// RoPE on one vector with the angle reduced in long double (64-bit mantissa: p * theta
// is exact for |p| < 2^11 * ... and within 2^-64 relative otherwise; far below the
// tolerances used here).
std::vector<long double> RopeOracle(const std::vector<double>& x, int64_t p, int64_t rotary_dim,
                                    int pairing, double base) {
  std::vector<long double> y(x.begin(), x.end());
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double theta = std::pow(base, -2.0 * static_cast<double>(i) / rotary_dim);
    // binary128 holds p * theta exactly (31 + 53 bits) and 2 pi to 113 bits, so the
    // reduced angle is accurate to ~1e-25 rad; long double (64 bits) would not be.
    const __float128 two_pi = strtoflt128("0x1.921fb54442d18469898cc51701b8p+2", nullptr);
    const long double a = static_cast<long double>(
        fmodq(static_cast<__float128>(p) * static_cast<__float128>(theta), two_pi));
    const int64_t i1 = pairing == GPE_PAIRING_INTERLEAVED ? 2 * i : i;
    const int64_t i2 = pairing == GPE_PAIRING_INTERLEAVED ? 2 * i + 1 : i + half;
    const long double c = std::cos(a), s = std::sin(a);
    y[i1] = x[i1] * c - x[i2] * s;
    y[i2] = x[i1] * s + x[i2] * c;
  }
  return y;
}

TEST(Version, HeaderMatchesLibrary) {
  EXPECT_EQ(gpe_version(), GPE_VERSION_NUMBER);
  EXPECT_STREQ(gpe_version_string(), "0.10.0");
}

TEST(Errors, NamesAndNeverNullMessage) {
  EXPECT_NE(gpe_last_error_message(), nullptr);
  EXPECT_STREQ(gpe_status_name(GPE_ERROR_INVALID_ARGUMENT), "GPE_ERROR_INVALID_ARGUMENT");
  EXPECT_STREQ(gpe_status_name(12345), "GPE_ERROR_UNKNOWN");
}

TEST(Errors, MessageIsPerThread) {
  gpe_so_rep* rep = nullptr;
  ASSERT_EQ(gpe_so_rep_create_planes(nullptr, &rep), GPE_ERROR_INVALID_ARGUMENT);
  const std::string here = gpe_last_error_message();
  EXPECT_NE(here, "");
  std::string there = "unset";
  std::thread([&] { there = gpe_last_error_message(); }).join();
  EXPECT_EQ(there, "");  // a fresh thread has seen no failure
  EXPECT_EQ(gpe_last_error_message(), here);
}

TEST(SoRep, DestroyNullIsHarmless) { gpe_so_rep_destroy(nullptr); }

TEST(SoRep, RejectsBadPlanesOptions) {
  gpe_so_rep* rep = nullptr;
  gpe_so_planes_options o = GPE_SO_PLANES_OPTIONS_INIT;
  o.dim = 8;
  EXPECT_EQ(gpe_so_rep_create_planes(&o, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  struct Case {
    const char* what;
    void (*mutate)(gpe_so_planes_options*);
    gpe_status code;
  };
  static const double kNanTheta[4] = {1.0, NAN, 0.5, 0.25};
  const Case cases[] = {
      {"odd rotary_dim", [](gpe_so_planes_options* p) { p->rotary_dim = 5; },
       GPE_ERROR_INVALID_ARGUMENT},
      {"rotary_dim > dim", [](gpe_so_planes_options* p) { p->rotary_dim = 10; },
       GPE_ERROR_INVALID_ARGUMENT},
      {"negative dim", [](gpe_so_planes_options* p) { p->dim = -8; },
       GPE_ERROR_INVALID_ARGUMENT},
      {"dim 1", [](gpe_so_planes_options* p) { p->dim = 1; }, GPE_ERROR_INVALID_ARGUMENT},
      {"huge dim", [](gpe_so_planes_options* p) { p->dim = int64_t{1} << 40; },
       GPE_ERROR_OUT_OF_RANGE},
      {"bad pairing", [](gpe_so_planes_options* p) { p->pairing = 7; },
       GPE_ERROR_INVALID_ARGUMENT},
      {"non-positive base", [](gpe_so_planes_options* p) { p->base = 0.0; },
       GPE_ERROR_INVALID_ARGUMENT},
      {"NaN base", [](gpe_so_planes_options* p) { p->base = NAN; }, GPE_ERROR_INVALID_ARGUMENT},
      {"NaN theta", [](gpe_so_planes_options* p) { p->thetas = kNanTheta; },
       GPE_ERROR_INVALID_ARGUMENT},
      {"struct_size too small", [](gpe_so_planes_options* p) { p->struct_size = 4; },
       GPE_ERROR_INVALID_ARGUMENT},
      {"struct_size from a newer header",
       [](gpe_so_planes_options* p) { p->struct_size = sizeof(gpe_so_planes_options) + 8; },
       GPE_ERROR_VERSION_MISMATCH},
  };
  for (const Case& c : cases) {
    gpe_so_planes_options bad = o;
    c.mutate(&bad);
    rep = reinterpret_cast<gpe_so_rep*>(0x1);
    EXPECT_EQ(gpe_so_rep_create_planes(&bad, &rep), c.code) << c.what;
    EXPECT_EQ(rep, nullptr) << c.what << ": *out is cleared on failure";
    EXPECT_GT(std::strlen(gpe_last_error_message()), 0u) << c.what;
  }
}

TEST(SoRep, RejectsBadRank2Options) {
  std::vector<double> a = {1, 0, 0}, b = {0, 1, 0};
  gpe_so_rank2_options o = GPE_SO_RANK2_OPTIONS_INIT;
  o.dim = 3;
  o.a = a.data();
  o.b = b.data();
  gpe_so_rep* rep = nullptr;
  gpe_so_rank2_options bad = o;
  bad.a = nullptr;
  EXPECT_EQ(gpe_so_rep_create_rank2(&bad, &rep), GPE_ERROR_INVALID_ARGUMENT);
  bad = o;
  bad.omega = std::numeric_limits<double>::infinity();
  EXPECT_EQ(gpe_so_rep_create_rank2(&bad, &rep), GPE_ERROR_INVALID_ARGUMENT);
  a[1] = NAN;
  EXPECT_EQ(gpe_so_rep_create_rank2(&o, &rep), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(gpe_last_error_message()).find("finite"), std::string::npos)
      << gpe_last_error_message();
}

// RoPE through the ABI equals the long-double oracle, both pairings, partial rotary.
TEST(SoRep, PlanesMatchOracle) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  for (int pairing : {GPE_PAIRING_INTERLEAVED, GPE_PAIRING_HALF_SPLIT}) {
    for (auto [dim, rot] : {std::pair<int64_t, int64_t>{8, 8}, {10, 6}, {64, 32}, {2, 2}}) {
      gpe_so_rep* rep = MakePlanes(dim, rot, pairing);
      ASSERT_NE(rep, nullptr);
      const int64_t n = 5;
      std::vector<int64_t> pos = {0, 1, -3, 1000003, (int64_t{1} << 31) - 1};
      std::vector<double> x(n * dim), y(n * dim);
      for (double& v : x) v = normal(rng);
      std::vector<int64_t> ps = {n}, xs = {n, dim};
      DLTensor tp = Tensor(pos.data(), kDLInt, 64, &ps);
      DLTensor tx = Tensor(x.data(), kDLFloat, 64, &xs);
      DLTensor ty = Tensor(y.data(), kDLFloat, 64, &xs);
      ASSERT_EQ(gpe_so_rep_apply(rep, &tp, &tx, &ty), GPE_OK) << gpe_last_error_message();
      for (int64_t r = 0; r < n; ++r) {
        std::vector<double> row(x.begin() + r * dim, x.begin() + (r + 1) * dim);
        auto want = RopeOracle(row, pos[r], rot, pairing, 10000.0);
        for (int64_t c = 0; c < dim; ++c) {
          // Double result: angle error ~1e-16 rad after exact reduction, plus a few
          // roundings of O(1) values: 1e-13 absolute is generous and still catches any
          // unreduced angle (which errs by ~1e-7 at p = 2^31).
          EXPECT_NEAR(y[r * dim + c], static_cast<double>(want[c]), 1e-13)
              << "pairing " << pairing << " dim " << dim << " row " << r << " col " << c;
        }
      }
      gpe_so_rep_destroy(rep);
    }
  }
}

// Any row strides, as so.h says: reversed rows (a NumPy x[::-1] view, stride -dim) and a
// broadcast row (stride 0) give the rotation of the rows they name, bit for bit the same
// as the compact copy (they were refused: "strides must be >= dim").
TEST(SoRep, ReversedAndBroadcastRowsAreApplied) {
  const int64_t n = 4, dim = 8;
  gpe_so_rep* rep = MakePlanes(dim, dim, GPE_PAIRING_INTERLEAVED);
  ASSERT_NE(rep, nullptr);
  std::mt19937_64 rng(9);
  std::normal_distribution<double> normal;
  std::vector<double> x(n * dim);
  for (double& v : x) v = normal(rng);
  std::vector<int64_t> pos = {3, -7, 100, 1 << 20}, ps = {n}, xs = {n, dim};
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &ps);
  for (int kind : {0, 1}) {
    // The rows the view names, compact, and their rotation through a compact call.
    std::vector<double> rows(n * dim), want(n * dim), got(n * dim);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t src = kind == 0 ? n - 1 - r : 0;
      for (int64_t c = 0; c < dim; ++c) rows[r * dim + c] = x[src * dim + c];
    }
    DLTensor tr = Tensor(rows.data(), kDLFloat, 64, &xs), tw = Tensor(want.data(), kDLFloat, 64, &xs);
    ASSERT_EQ(gpe_so_rep_apply(rep, &tp, &tr, &tw), GPE_OK) << gpe_last_error_message();
    std::vector<int64_t> strides = {kind == 0 ? -dim : 0, 1};
    const double* base = kind == 0 ? x.data() + (n - 1) * dim : x.data();
    DLTensor tv = Tensor(base, kDLFloat, 64, &xs, &strides), tg = Tensor(got.data(), kDLFloat, 64, &xs);
    ASSERT_EQ(gpe_so_rep_apply(rep, &tp, &tv, &tg), GPE_OK) << kind << ": " << gpe_last_error_message();
    EXPECT_EQ(got, want) << kind;
  }
  gpe_so_rep_destroy(rep);
}

// float32 at position 2^24 and 10^6 stays within 1e-6 relative (of the vector norm) of
// the float64 reference: the angle is reduced in double, only the final products round
// to float32 (2^-24 ~ 6e-8 each).
TEST(SoRep, Float32AccurateAtLargePositions) {
  const int64_t dim = 128;
  gpe_so_rep* rep = MakePlanes(dim, dim, GPE_PAIRING_HALF_SPLIT);
  std::vector<int64_t> pos = {int64_t{1} << 24, 1000000, (int64_t{1} << 31)};
  const int64_t n = static_cast<int64_t>(pos.size());
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> xf(n * dim), yf(n * dim);
  for (float& v : xf) v = u(rng);
  std::vector<double> xd(xf.begin(), xf.end()), yd(n * dim);
  std::vector<int64_t> ps = {n}, xs = {n, dim};
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &ps);
  DLTensor txf = Tensor(xf.data(), kDLFloat, 32, &xs), tyf = Tensor(yf.data(), kDLFloat, 32, &xs);
  DLTensor txd = Tensor(xd.data(), kDLFloat, 64, &xs), tyd = Tensor(yd.data(), kDLFloat, 64, &xs);
  ASSERT_EQ(gpe_so_rep_apply(rep, &tp, &txf, &tyf), GPE_OK) << gpe_last_error_message();
  ASSERT_EQ(gpe_so_rep_apply(rep, &tp, &txd, &tyd), GPE_OK) << gpe_last_error_message();
  for (int64_t r = 0; r < n; ++r) {
    double err = 0, norm = 0;
    for (int64_t c = 0; c < dim; ++c) {
      err = std::max(err, std::abs(yf[r * dim + c] - yd[r * dim + c]));
      norm += yd[r * dim + c] * yd[r * dim + c];
    }
    EXPECT_LT(err / std::sqrt(norm), 1e-6) << "position " << pos[r];
  }
  gpe_so_rep_destroy(rep);
}

// Rank-2 apply equals the dense matrix it reports, and that matrix is orthogonal and a
// homomorphism: M(p) M(q) = M(p + q).
TEST(SoRep, Rank2ApplyMatchesMatrixAndGroupLaw) {
  const int64_t dim = 6;
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal;
  std::vector<double> a(dim), b(dim);
  for (int64_t i = 0; i < dim; ++i) { a[i] = normal(rng); b[i] = normal(rng); }
  gpe_so_rank2_options o = GPE_SO_RANK2_OPTIONS_INIT;
  o.dim = dim;
  o.a = a.data();
  o.b = b.data();
  o.omega = 0.37;
  gpe_so_rep* rep = nullptr;
  ASSERT_EQ(gpe_so_rep_create_rank2(&o, &rep), GPE_OK) << gpe_last_error_message();
  auto matrix = [&](int64_t p) {
    std::vector<double> m(dim * dim);
    std::vector<int64_t> ms = {dim, dim};
    DLTensor t = Tensor(m.data(), kDLFloat, 64, &ms);
    EXPECT_EQ(gpe_so_rep_matrix(rep, p, &t), GPE_OK) << gpe_last_error_message();
    return m;
  };
  const int64_t p = 5, q = -12;
  auto mp = matrix(p), mq = matrix(q), mpq = matrix(p + q);
  for (int64_t i = 0; i < dim; ++i) {
    for (int64_t j = 0; j < dim; ++j) {
      double prod = 0, gram = 0;
      for (int64_t k = 0; k < dim; ++k) {
        prod += mp[i * dim + k] * mq[k * dim + j];
        gram += mp[k * dim + i] * mp[k * dim + j];
      }
      // Entries are O(1) sums of dim O(1) products: 1e-12 leaves 4 orders of headroom
      // over double rounding and catches any wrong sign or angle.
      EXPECT_NEAR(prod, mpq[i * dim + j], 1e-12);
      EXPECT_NEAR(gram, i == j ? 1.0 : 0.0, 1e-12);
    }
  }
  std::vector<double> x(dim), y(dim);
  for (double& v : x) v = normal(rng);
  std::vector<int64_t> pos = {p}, ps = {1}, xs = {1, dim};
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &ps);
  DLTensor tx = Tensor(x.data(), kDLFloat, 64, &xs), ty = Tensor(y.data(), kDLFloat, 64, &xs);
  ASSERT_EQ(gpe_so_rep_apply(rep, &tp, &tx, &ty), GPE_OK) << gpe_last_error_message();
  for (int64_t i = 0; i < dim; ++i) {
    double want = 0;
    for (int64_t k = 0; k < dim; ++k) want += mp[i * dim + k] * x[k];
    EXPECT_NEAR(y[i], want, 1e-12);
  }
  gpe_so_rep_destroy(rep);
}

// Strided (column-major) input, in-place output, and empty batches.
TEST(SoRep, StridesInPlaceAndEmpty) {
  const int64_t dim = 4, n = 3;
  gpe_so_rep* rep = MakePlanes(dim, dim, GPE_PAIRING_INTERLEAVED, 100.0);
  std::vector<int64_t> pos = {2, 7, -1}, ps = {n}, xs = {n, dim};
  std::vector<double> rowmajor(n * dim), colmajor(n * dim), want(n * dim);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < dim; ++c) {
      rowmajor[r * dim + c] = 1.0 + r * 10 + c;
      colmajor[c * n + r] = rowmajor[r * dim + c];
    }
  std::vector<int64_t> cstr = {1, n};
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &ps);
  DLTensor tc = Tensor(colmajor.data(), kDLFloat, 64, &xs, &cstr);
  DLTensor tw = Tensor(want.data(), kDLFloat, 64, &xs);
  DLTensor tr = Tensor(rowmajor.data(), kDLFloat, 64, &xs);
  ASSERT_EQ(gpe_so_rep_apply(rep, &tp, &tr, &tw), GPE_OK);
  ASSERT_EQ(gpe_so_rep_apply(rep, &tp, &tc, &tc), GPE_OK) << gpe_last_error_message();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < dim; ++c) EXPECT_NEAR(colmajor[c * n + r], want[r * dim + c], 1e-14);
  std::vector<int64_t> zs = {0}, zx = {0, dim};
  DLTensor ep = Tensor(nullptr, kDLInt, 64, &zs);
  DLTensor ex = Tensor(nullptr, kDLFloat, 32, &zx);
  EXPECT_EQ(gpe_so_rep_apply(rep, &ep, &ex, &ex), GPE_OK) << gpe_last_error_message();
  gpe_so_rep_destroy(rep);
}

TEST(SoRep, ApplyRejectsBadTensors) {
  const int64_t dim = 4, n = 2;
  gpe_so_rep* rep = MakePlanes(dim, dim, GPE_PAIRING_INTERLEAVED);
  std::vector<int64_t> pos = {1, 2}, ps = {n}, xs = {n, dim}, wrong = {n, dim + 2}, three = {n, 1, dim};
  std::vector<float> xf(n * dim + 8), yf(n * dim + 8);
  std::vector<double> yd(n * dim);
  std::vector<int32_t> pos32 = {1, 2};
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &ps);
  DLTensor tx = Tensor(xf.data(), kDLFloat, 32, &xs);
  DLTensor ty = Tensor(yf.data(), kDLFloat, 32, &xs);
  struct Case { const char* what; gpe_status code; DLTensor p, x, y; };
  DLTensor gpu = tx; gpu.device.device_type = kDLCUDA;
  DLTensor p32 = Tensor(pos32.data(), kDLInt, 32, &ps);
  DLTensor xwrong = Tensor(xf.data(), kDLFloat, 32, &wrong);
  DLTensor x3 = Tensor(xf.data(), kDLFloat, 32, &three);
  DLTensor ydbl = Tensor(yd.data(), kDLFloat, 64, &xs);
  DLTensor nulldata = tx; nulldata.data = nullptr;
  DLTensor lanes = tx; lanes.dtype.lanes = 4;
  std::vector<int64_t> neg = {-2, dim};
  DLTensor xneg = Tensor(xf.data(), kDLFloat, 32, &neg);
  DLTensor shifted = Tensor(xf.data() + 1, kDLFloat, 32, &xs);  // overlaps x by one element
  std::vector<int64_t> huge_stride = {int64_t{1} << 61, 1};
  DLTensor xhuge = Tensor(xf.data(), kDLFloat, 32, &xs, &huge_stride);
  // The one stride with no negation (a fuzzing find: UBSan flagged |INT64_MIN|).
  std::vector<int64_t> min_stride = {std::numeric_limits<int64_t>::min(), 1};
  DLTensor xmin = Tensor(xf.data(), kDLFloat, 32, &xs, &min_stride);
  const Case cases[] = {
      {"positions int32", GPE_ERROR_INVALID_ARGUMENT, p32, tx, ty},
      {"x on a GPU", GPE_ERROR_UNSUPPORTED, tp, gpu, ty},
      {"x width != dim", GPE_ERROR_INVALID_ARGUMENT, tp, xwrong, xwrong},
      {"x with 3 dims", GPE_ERROR_INVALID_ARGUMENT, tp, x3, x3},
      {"out dtype differs", GPE_ERROR_INVALID_ARGUMENT, tp, tx, ydbl},
      {"null data", GPE_ERROR_INVALID_ARGUMENT, tp, nulldata, ty},
      {"vector lanes", GPE_ERROR_UNSUPPORTED, tp, lanes, ty},
      {"negative size", GPE_ERROR_INVALID_ARGUMENT, tp, xneg, xneg},
      {"partial overlap", GPE_ERROR_INVALID_ARGUMENT, tp, tx, shifted},
      {"stride overflow", GPE_ERROR_OUT_OF_RANGE, tp, xhuge, ty},
      {"stride INT64_MIN", GPE_ERROR_OUT_OF_RANGE, tp, xmin, ty},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(gpe_so_rep_apply(rep, &c.p, &c.x, const_cast<DLTensor*>(&c.y)), c.code) << c.what;
    EXPECT_GT(std::strlen(gpe_last_error_message()), 0u) << c.what;
  }
  EXPECT_EQ(gpe_so_rep_apply(nullptr, &tp, &tx, &ty), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_so_rep_apply(rep, nullptr, &tx, &ty), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_so_rep_apply(rep, &tp, nullptr, &ty), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_so_rep_apply(rep, &tp, &tx, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  int64_t d = 0;
  EXPECT_EQ(gpe_so_rep_dim(nullptr, &d), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gpe_so_rep_dim(rep, nullptr), GPE_ERROR_INVALID_ARGUMENT);
  gpe_so_rep_destroy(rep);
}

// One handle used from 8 threads at once gives the same bits as one thread.
TEST(SoRep, ConcurrentUseIsDeterministic) {
  const int64_t dim = 64, n = 257;
  gpe_so_rep* rep = MakePlanes(dim, dim, GPE_PAIRING_HALF_SPLIT);
  std::vector<int64_t> pos(n), ps = {n}, xs = {n, dim};
  std::vector<float> x(n * dim);
  for (int64_t i = 0; i < n; ++i) pos[i] = i * 7919;
  for (int64_t i = 0; i < n * dim; ++i) x[i] = static_cast<float>(std::sin(0.1 * i));
  DLTensor tp = Tensor(pos.data(), kDLInt, 64, &ps), tx = Tensor(x.data(), kDLFloat, 32, &xs);
  std::vector<float> ref(n * dim);
  DLTensor tr = Tensor(ref.data(), kDLFloat, 32, &xs);
  ASSERT_EQ(gpe_so_rep_apply(rep, &tp, &tx, &tr), GPE_OK);
  std::vector<std::vector<float>> outs(8, std::vector<float>(n * dim));
  std::vector<std::thread> threads;
  std::vector<int> codes(8, -1);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      DLTensor to = Tensor(outs[t].data(), kDLFloat, 32, &xs);
      codes[t] = gpe_so_rep_apply(rep, &tp, &tx, &to);
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(codes[t], GPE_OK);
    EXPECT_EQ(std::memcmp(outs[t].data(), ref.data(), ref.size() * sizeof(float)), 0);
  }
  gpe_so_rep_destroy(rep);
}

}  // namespace
