#include "encodings/coordinate/encoder.h"

#include <limits>
#include <random>

#include "encodings/coordinate/test_util.h"
#include "gtest/gtest.h"

namespace gpe {
namespace encodings {
namespace {

TEST(ValidateFiniteMatrixTest, AcceptsFiniteRejectsTheRest) {
  EXPECT_TRUE(ValidateFiniteMatrix(RowMatrixXd::Ones(2, 3), 3, "m").ok());
  EXPECT_TRUE(ValidateFiniteMatrix(RowMatrixXd::Ones(2, 3), -1, "m").ok());
  EXPECT_FALSE(ValidateFiniteMatrix(RowMatrixXd(0, 3), 3, "m").ok());
  EXPECT_FALSE(ValidateFiniteMatrix(RowMatrixXd(2, 0), -1, "m").ok());
  EXPECT_FALSE(ValidateFiniteMatrix(RowMatrixXd::Ones(2, 3), 2, "m").ok());
  RowMatrixXd m = RowMatrixXd::Ones(2, 3);
  m(1, 2) = -std::numeric_limits<double>::infinity();
  const absl::Status s = ValidateFiniteMatrix(m, 3, "points");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("(1, 2)"), absl::string_view::npos) << s;
}

TEST(IdentityEncoderTest, PassesPointsAndGradientsThrough) {
  auto id = IdentityEncoder::Create(2);
  ASSERT_TRUE(id.ok());
  std::mt19937_64 rng(1);
  const RowMatrixXd x = testing::RandomNormal(5, 2, rng);
  EXPECT_EQ(*id->Encode(x), x);
  testing::ExpectBackwardMatchesFiniteDifferences(*id, x, 2);
  EXPECT_FALSE(IdentityEncoder::Create(0).ok());
  EXPECT_FALSE(id->Encode(RowMatrixXd::Zero(1, 3)).ok());
}

}  // namespace
}  // namespace encodings
}  // namespace gpe
