#include "encodings/sequence/absolute.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gpe {
namespace encodings {
namespace sequence {
namespace {

TEST(SinusoidalFrequenciesTest, MatchesPowerFormula) {
  for (int64_t dim : {1, 2, 7, 64}) {
    for (double base : {10000.0, 500000.0, 2.0}) {
      auto thetas = SinusoidalFrequencies(dim, base);
      ASSERT_TRUE(thetas.ok()) << thetas.status();
      ASSERT_EQ(thetas->size(), static_cast<size_t>((dim + 1) / 2));
      for (size_t i = 0; i < thetas->size(); ++i) {
        // Reference: 1 / base^(2i/d) through std::pow. exp(x log b) and pow differ by a
        // few ulps of a number <= 1, so 1e-14 relative is a wide margin; a wrong
        // exponent (i/d instead of 2i/d) is off by orders of magnitude more.
        const double ref = 1.0 / std::pow(base, 2.0 * i / static_cast<double>(dim));
        EXPECT_NEAR((*thetas)[i], ref, 1e-14 * ref) << dim << " " << base << " " << i;
      }
    }
  }
}

TEST(SinusoidalEncodingTest, MatchesReferenceLoop) {
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int64_t> pos(-(int64_t{1} << 16), int64_t{1} << 16);
  std::vector<int64_t> positions = {0, 1, -1, 2, 100};
  for (int r = 0; r < 40; ++r) positions.push_back(pos(rng));
  for (int64_t dim : {1, 6, 33, 128}) {
    auto m = SinusoidalEncodingMatrix<double>(positions, dim);
    ASSERT_TRUE(m.ok()) << m.status();
    for (size_t j = 0; j < positions.size(); ++j) {
      for (int64_t c = 0; c < dim; ++c) {
        const int64_t i = c / 2;
        const double angle =
            static_cast<double>(positions[j]) / std::pow(10000.0, 2.0 * i / dim);
        const double ref = (c % 2 == 0) ? std::sin(angle) : std::cos(angle);
        // The reference's angle is rounded once (|p theta| <= 2^16, ulp ~ 1.5e-11) and
        // its theta differs from the library's by a few ulps (relative 1e-15, times
        // 2^16 ~ 1e-10 at worst), so 1e-9 bounds the difference; any swapped sin/cos
        // or wrong frequency gives O(1) errors.
        EXPECT_NEAR((*m)(j, c), ref, 1e-9) << "p " << positions[j] << " c " << c;
      }
    }
  }
}

TEST(SinusoidalEncodingTest, ShiftIsARotationAtLargePositions) {
  // Vaswani et al.'s motivation: PE(p + k) is a fixed rotation of PE(p) per pair,
  // (sin, cos)(a + b) = (sin a cos b + cos a sin b, cos a cos b - sin a sin b). With
  // exact angle reduction this holds at every int64 p; a naive double product p * theta
  // at p ~ 2^40 already errs by ~1e-4 rad and fails the 1e-12 tolerance below (each
  // side is correctly rounded, ~2e-16, and the identity adds a few ulps).
  const int64_t dim = 16;
  for (int64_t p : {int64_t{1} << 31, int64_t{1} << 40, int64_t{3} << 60,
                    std::numeric_limits<int64_t>::min() + 10}) {
    for (int64_t k : {1, 7, -3}) {
      const std::vector<int64_t> ps = {p, p + k, k};
      auto m = SinusoidalEncodingMatrix<double>(ps, dim);
      ASSERT_TRUE(m.ok());
      for (int64_t i = 0; i < dim / 2; ++i) {
        const double sa = (*m)(0, 2 * i), ca = (*m)(0, 2 * i + 1);
        const double sb = (*m)(2, 2 * i), cb = (*m)(2, 2 * i + 1);
        EXPECT_NEAR((*m)(1, 2 * i), sa * cb + ca * sb, 1e-12) << p << " " << k << " " << i;
        EXPECT_NEAR((*m)(1, 2 * i + 1), ca * cb - sa * sb, 1e-12) << p << " " << k << " " << i;
        EXPECT_NEAR(sa * sa + ca * ca, 1.0, 1e-15);
      }
    }
  }
}

TEST(SinusoidalEncodingTest, FloatIsRoundedDoubleAndStridesWork) {
  const std::vector<int64_t> positions = {0, 5, 1000000, -123456789};
  const int64_t dim = 10, stride = 13;
  std::vector<float> out(positions.size() * stride, -7.0f);
  ASSERT_TRUE(SinusoidalEncoding<float>(positions, dim, 10000.0, out.data(), stride).ok());
  auto ref = SinusoidalEncodingMatrix<double>(positions, dim);
  ASSERT_TRUE(ref.ok());
  for (size_t j = 0; j < positions.size(); ++j) {
    for (int64_t c = 0; c < stride; ++c) {
      if (c < dim) {
        // Computed in double and rounded once: bit-identical to casting the double.
        EXPECT_EQ(out[j * stride + c], static_cast<float>((*ref)(j, c)));
      } else {
        EXPECT_EQ(out[j * stride + c], -7.0f) << "padding overwritten";
      }
    }
  }
}

TEST(SinusoidalEncodingTest, RejectsBadInput) {
  std::vector<double> out(8);
  const std::vector<int64_t> ps = {1, 2};
  EXPECT_FALSE(SinusoidalEncoding<double>(ps, 0, 10000.0, out.data(), 4).ok());
  EXPECT_FALSE(SinusoidalEncoding<double>(ps, -3, 10000.0, out.data(), 4).ok());
  EXPECT_FALSE(SinusoidalEncoding<double>(ps, 4, 0.0, out.data(), 4).ok());
  EXPECT_FALSE(SinusoidalEncoding<double>(ps, 4, -2.0, out.data(), 4).ok());
  EXPECT_FALSE(SinusoidalEncoding<double>(ps, 4, std::nan(""), out.data(), 4).ok());
  EXPECT_FALSE(SinusoidalEncoding<double>(ps, 4, INFINITY, out.data(), 4).ok());
  EXPECT_FALSE(SinusoidalEncoding<double>(ps, 4, 10000.0, nullptr, 4).ok());
  EXPECT_FALSE(SinusoidalEncoding<double>(ps, 4, 10000.0, out.data(), 3).ok());
  EXPECT_FALSE(SinusoidalEncodingMatrix<float>(ps, 0).ok());
  // An empty batch is fine even with a null output.
  EXPECT_TRUE(SinusoidalEncoding<double>({}, 4, 10000.0, nullptr, 0).ok());
  // Widths past 2^31 are refused before the frequencies are allocated ((dim + 1) / 2
  // overflowed at INT64_MAX; 2^62 asked for 2^61 doubles).
  for (int64_t dim : {std::numeric_limits<int64_t>::max(), int64_t{1} << 62}) {
    EXPECT_EQ(SinusoidalFrequencies(dim, 10000.0).status().code(), absl::StatusCode::kOutOfRange);
    EXPECT_FALSE(SinusoidalEncoding<double>({}, dim, 10000.0, nullptr, 0).ok());
  }
}

RowMatrixXd RandomTable(int64_t rows, int64_t cols, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  RowMatrixXd t(rows, cols);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t c = 0; c < cols; ++c) t(i, c) = normal(rng);
  }
  return t;
}

TEST(LearnedPositionTableTest, LookupReadsRows) {
  std::mt19937_64 rng(2);
  const RowMatrixXd table = RandomTable(9, 5, rng);
  auto lt = LearnedPositionTable::Create(table);
  ASSERT_TRUE(lt.ok()) << lt.status();
  const std::vector<int64_t> ps = {0, 8, 3, 3, 5};
  const int64_t stride = 7;
  std::vector<double> out(ps.size() * stride, 0.0);
  ASSERT_TRUE(lt->Lookup<double>(ps, out.data(), stride).ok());
  std::vector<float> outf(ps.size() * 5);
  ASSERT_TRUE(lt->Lookup<float>(ps, outf.data(), 5).ok());
  for (size_t j = 0; j < ps.size(); ++j) {
    for (int64_t c = 0; c < 5; ++c) {
      EXPECT_EQ(out[j * stride + c], table(ps[j], c));
      EXPECT_EQ(outf[j * 5 + c], static_cast<float>(table(ps[j], c)));
    }
  }
}

TEST(LearnedPositionTableTest, RejectsOutOfRangePositionsWithoutWriting) {
  std::mt19937_64 rng(3);
  auto lt = LearnedPositionTable::Create(RandomTable(4, 2, rng));
  ASSERT_TRUE(lt.ok());
  for (int64_t bad : {int64_t{-1}, int64_t{4}, std::numeric_limits<int64_t>::min(),
                      std::numeric_limits<int64_t>::max()}) {
    const std::vector<int64_t> ps = {1, bad};
    std::vector<double> out(4, 42.0);
    absl::Status s = lt->Lookup<double>(ps, out.data(), 2);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    for (double v : out) EXPECT_EQ(v, 42.0);
    RowMatrixXd grad = RowMatrixXd::Zero(4, 2);
    EXPECT_FALSE(lt->Backward<double>(ps, out.data(), 2, &grad).ok());
    EXPECT_EQ(grad.cwiseAbs().maxCoeff(), 0.0) << "partial gradient written";
  }
}

TEST(LearnedPositionTableTest, BackwardAccumulatesAndMatchesFiniteDifferences) {
  std::mt19937_64 rng(4);
  const int64_t rows = 6, dim = 3;
  const RowMatrixXd table = RandomTable(rows, dim, rng);
  auto lt = LearnedPositionTable::Create(table);
  ASSERT_TRUE(lt.ok());
  const std::vector<int64_t> ps = {2, 5, 2, 0, 2};  // repeated positions accumulate
  const RowMatrixXd g = RandomTable(static_cast<int64_t>(ps.size()), dim, rng);

  RowMatrixXd grad = RowMatrixXd::Zero(rows, dim);
  ASSERT_TRUE(lt->Backward<double>(ps, g.data(), dim, &grad).ok());

  // Reference: L(table) = sum_j g_j . table[p_j], central differences per entry. L is
  // linear, so the difference quotient is exact up to rounding (~1e-15 / h ~ 1e-12).
  const double h = 1e-3;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < dim; ++c) {
      auto loss = [&](double delta) {
        RowMatrixXd t = table;
        t(r, c) += delta;
        auto l2 = LearnedPositionTable::Create(t);
        EXPECT_TRUE(l2.ok());
        RowMatrixXd out(ps.size(), dim);
        EXPECT_TRUE(l2->Lookup<double>(ps, out.data(), dim).ok());
        return (out.array() * g.array()).sum();
      };
      const double fd = (loss(h) - loss(-h)) / (2 * h);
      EXPECT_NEAR(grad(r, c), fd, 1e-9) << r << " " << c;
    }
  }
  // Rows never read get zero gradient; position 2 gets the sum of three rows.
  EXPECT_EQ(grad.row(1).cwiseAbs().maxCoeff(), 0.0);
  EXPECT_NEAR((grad.row(2) - (g.row(0) + g.row(2) + g.row(4))).cwiseAbs().maxCoeff(), 0.0,
              1e-15);

  // A second call adds to the first.
  ASSERT_TRUE(lt->Backward<double>(ps, g.data(), dim, &grad).ok());
  EXPECT_NEAR((grad.row(5) - 2.0 * g.row(1)).cwiseAbs().maxCoeff(), 0.0, 1e-15);
}

TEST(LearnedPositionTableTest, RejectsBadTablesAndShapes) {
  EXPECT_FALSE(LearnedPositionTable::Create(RowMatrixXd(0, 3)).ok());
  EXPECT_FALSE(LearnedPositionTable::Create(RowMatrixXd(3, 0)).ok());
  RowMatrixXd nan_table = RowMatrixXd::Zero(2, 2);
  nan_table(1, 1) = std::nan("");
  EXPECT_FALSE(LearnedPositionTable::Create(nan_table).ok());
  auto lt = LearnedPositionTable::Create(RowMatrixXd::Ones(3, 2));
  ASSERT_TRUE(lt.ok());
  EXPECT_FALSE(lt->SetTable(RowMatrixXd::Ones(4, 2)).ok());
  RowMatrixXd nan3 = RowMatrixXd::Zero(3, 2);
  nan3(2, 0) = INFINITY;
  EXPECT_FALSE(lt->SetTable(nan3).ok());
  EXPECT_TRUE(lt->SetTable(RowMatrixXd::Zero(3, 2)).ok());
  EXPECT_EQ(lt->table().cwiseAbs().maxCoeff(), 0.0);
  const std::vector<int64_t> ps = {0, 1};
  std::vector<double> g(4, 1.0);
  RowMatrixXd wrong = RowMatrixXd::Zero(2, 2);
  EXPECT_FALSE(lt->Backward<double>(ps, g.data(), 2, &wrong).ok());
  EXPECT_FALSE(lt->Backward<double>(ps, g.data(), 2, nullptr).ok());
  EXPECT_FALSE(lt->Lookup<double>(ps, nullptr, 2).ok());
  EXPECT_FALSE(lt->Lookup<double>(ps, g.data(), 1).ok());
}

}  // namespace
}  // namespace sequence
}  // namespace encodings
}  // namespace gpe
