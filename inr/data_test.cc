#include "inr/data.h"

#include <cmath>
#include <cstdlib>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace gpe {
namespace inr {
namespace {

constexpr double kPi = 3.14159265358979323846;

TEST(Synthetic, MatchesLimAppendixD1AtKnownPixels) {
  const int64_t n = 8;
  const std::vector<double> axis = GridAxis(n);
  EXPECT_DOUBLE_EQ(axis[0], -1.0 + 1.0 / 8);
  EXPECT_DOUBLE_EQ(axis[7], 1.0 - 1.0 / 8);
  const ImageMatrix radial = SyntheticImage(SyntheticTask::kRadial, n);
  const ImageMatrix spiral = SyntheticImage(SyntheticTask::kSpiral, n, /*signed_values=*/true);
  const std::vector<ImageMatrix> field = SyntheticVectorField(SyntheticTask::kSpiral, n);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const double x = axis[j], y = axis[i], r = std::hypot(x, y), th = std::atan2(y, x);
      // Closed forms evaluated independently; both sides are a few libm calls apart.
      EXPECT_NEAR(radial(i, j), std::abs(std::sin(15 * std::sqrt(r))), 1e-15);
      const double s = std::sin(30 * std::sqrt(0.1 * r) + th);
      EXPECT_NEAR(spiral(i, j), s, 1e-14);
      EXPECT_NEAR(field[0](i, j), s * x / r, 1e-14);
      EXPECT_NEAR(field[1](i, j), s * y / r, 1e-14);
    }
  }
  // The Radial image is rotation invariant: pixels related by a quarter turn agree.
  EXPECT_NEAR(radial(1, 2), radial(2, n - 2), 1e-15);
  (void)kPi;
}

TEST(Splits, RandomSplitPartitionsAndIsSeeded) {
  absl::StatusOr<Split> s = RandomSplit(1000, 0.05, 0.4, 7);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->train.size(), 50u);
  EXPECT_EQ(s->validation.size(), 400u);
  EXPECT_EQ(s->test.size(), 550u);
  std::set<int64_t> all(s->train.begin(), s->train.end());
  all.insert(s->validation.begin(), s->validation.end());
  all.insert(s->test.begin(), s->test.end());
  EXPECT_EQ(all.size(), 1000u);
  EXPECT_EQ(RandomSplit(1000, 0.05, 0.4, 7)->train, s->train);
  EXPECT_NE(RandomSplit(1000, 0.05, 0.4, 8)->train, s->train);
  EXPECT_FALSE(RandomSplit(10, 0.7, 0.4, 1).ok());
  EXPECT_FALSE(RandomSplit(-1, 0.1, 0.1, 1).ok());
}

TEST(Splits, RegularGridTrainsOnEveryOtherRowAndColumn) {
  const Split s = RegularGridSplit(5, 4);
  EXPECT_EQ(s.train, (std::vector<int64_t>{0, 2, 8, 10, 16, 18}));
  EXPECT_EQ(s.train.size() + s.test.size(), 20u);
}

TEST(Png, RoundTripsGrayAndRgbToEightBits) {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  ImageMatrix a(3, 5), b(3, 5), c(3, 5);
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 5; ++j) {
      a(i, j) = (i * 5 + j) / 14.0;
      b(i, j) = 1.0 - a(i, j);
      c(i, j) = 0.5;
    }
  }
  ASSERT_TRUE(WritePng(dir + "/rgb.png", {a, b, c}).ok());
  absl::StatusOr<Image> rgb = ReadPng(dir + "/rgb.png", false);
  ASSERT_TRUE(rgb.ok()) << rgb.status();
  ASSERT_EQ(rgb->channels.size(), 3u);
  // 8-bit quantisation: at most half a step, 0.5/255.
  EXPECT_LE((rgb->channels[0] - a).cwiseAbs().maxCoeff(), 0.5 / 255 + 1e-12);
  EXPECT_LE((rgb->channels[1] - b).cwiseAbs().maxCoeff(), 0.5 / 255 + 1e-12);
  ASSERT_TRUE(WritePng(dir + "/gray.png", {a}, -1.0, 1.0).ok());
  absl::StatusOr<Image> gray = ReadPng(dir + "/gray.png", true);
  ASSERT_TRUE(gray.ok());
  EXPECT_LE((gray->channels[0] - (a.array() + 1.0).matrix() / 2.0).cwiseAbs().maxCoeff(),
            0.5 / 255 + 1e-12);
  EXPECT_FALSE(ReadPng(dir + "/missing.png", true).ok());
  EXPECT_FALSE(WritePng(dir + "/x.png", {a, b}).ok());
  EXPECT_FALSE(WritePng(dir + "/x.png", {a}, 1.0, 1.0).ok());
}

}  // namespace
}  // namespace inr
}  // namespace gpe
