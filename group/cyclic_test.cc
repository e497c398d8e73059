#include "group/cyclic.h"

#include <cstdint>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace gpe {
namespace group {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(IntegersTest, GroupLaws) {
  const Integers z;
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int64_t> dist(-(int64_t{1} << 40), int64_t{1} << 40);
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t a = dist(rng), b = dist(rng), c = dist(rng);
    EXPECT_EQ(*z.Compose(*z.Compose(a, b), c), *z.Compose(a, *z.Compose(b, c)));
    EXPECT_EQ(*z.Compose(a, z.Identity()), a);
    EXPECT_EQ(*z.Compose(a, *z.Inverse(a)), z.Identity());
    EXPECT_EQ(*z.Compose(a, b), *z.Compose(b, a));
  }
}

TEST(IntegersTest, OverflowIsAStatus) {
  const Integers z;
  EXPECT_EQ(z.Compose(kMax, 1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(z.Compose(kMin, -1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(z.Inverse(kMin).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*z.Compose(kMax, kMin), -1);
  EXPECT_EQ(*z.Inverse(kMax), kMin + 1);
}

TEST(CyclicGroupTest, GroupLawsAndWrap) {
  std::mt19937_64 rng(2);
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{360}, kMax}) {
    const CyclicGroup g = *CyclicGroup::Create(n);
    for (int trial = 0; trial < 50; ++trial) {
      const int64_t a = g.FromInteger(static_cast<int64_t>(rng()));
      const int64_t b = g.FromInteger(static_cast<int64_t>(rng()));
      ASSERT_TRUE(g.Validate(a).ok());
      const int64_t ab = *g.Compose(a, b);
      EXPECT_TRUE(g.Validate(ab).ok());
      EXPECT_EQ(ab, *g.Compose(b, a));
      EXPECT_EQ(*g.Compose(a, *g.Inverse(a)), 0);
      // Z -> Z_n is a homomorphism: (a + b) mod n, computed without overflow.
      EXPECT_EQ(ab, static_cast<int64_t>((static_cast<__int128>(a) + b) % n));
    }
  }
  const CyclicGroup z5 = *CyclicGroup::Create(5);
  EXPECT_EQ(z5.FromInteger(-1), 4);
  EXPECT_EQ(z5.FromInteger(10), 0);
  EXPECT_EQ(*z5.Compose(3, 4), 2);
  EXPECT_EQ(*z5.Inverse(2), 3);
}

TEST(CyclicGroupTest, BadInput) {
  EXPECT_FALSE(CyclicGroup::Create(0).ok());
  EXPECT_FALSE(CyclicGroup::Create(-3).ok());
  const CyclicGroup z5 = *CyclicGroup::Create(5);
  EXPECT_EQ(z5.Compose(5, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(z5.Compose(1, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(z5.Inverse(7).ok());
}

}  // namespace
}  // namespace group
}  // namespace gpe
