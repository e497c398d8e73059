#include "group/product.h"

#include <cstdint>
#include <limits>
#include <random>
#include <tuple>

#include "group/cyclic.h"
#include "group/free_group.h"
#include "gtest/gtest.h"

namespace gpe {
namespace group {
namespace {

TEST(ProductGroupTest, GridIsComponentwise) {
  const ProductGroup<Integers, Integers> grid{Integers(), Integers()};
  std::mt19937_64 rng(4);
  std::uniform_int_distribution<int64_t> dist(-1000, 1000);
  for (int trial = 0; trial < 100; ++trial) {
    const auto a = std::make_tuple(dist(rng), dist(rng));
    const auto b = std::make_tuple(dist(rng), dist(rng));
    const auto ab = *grid.Compose(a, b);
    // Kogkalidis et al., sec. 3.3 (erratum): (x, y) + (z, w) = (x + z, y + w).
    EXPECT_EQ(std::get<0>(ab), std::get<0>(a) + std::get<0>(b));
    EXPECT_EQ(std::get<1>(ab), std::get<1>(a) + std::get<1>(b));
    EXPECT_TRUE(grid.Equal(ab, *grid.Compose(b, a)));
    EXPECT_TRUE(grid.Equal(*grid.Compose(a, *grid.Inverse(a)), grid.Identity()));
  }
}

TEST(ProductGroupTest, MixedFactorsAndErrors) {
  const ProductGroup<CyclicGroup, FreeGroup> g{*CyclicGroup::Create(6), *FreeGroup::Create(2)};
  using E = decltype(g)::Element;
  const E a{4, {1, 2}};
  const E b{5, {-2, 1}};
  const E ab = *g.Compose(a, b);
  EXPECT_EQ(std::get<0>(ab), 3);
  EXPECT_EQ(std::get<1>(ab), (FreeWord{1, 1}));
  EXPECT_TRUE(g.Equal(*g.Compose(ab, *g.Inverse(ab)), g.Identity()));
  // Non-commutative in the free factor, so the product is too.
  EXPECT_FALSE(g.Equal(ab, *g.Compose(b, a)));
  EXPECT_FALSE(g.Compose(E{6, {}}, a).ok());     // residue out of range
  EXPECT_FALSE(g.Compose(a, E{0, {3}}).ok());    // letter out of range
  EXPECT_FALSE(g.Validate(E{1, {1, -1}}).ok());  // unreduced word
  EXPECT_TRUE(g.Validate(a).ok());
}

TEST(ProductGroupTest, OverflowPropagates) {
  const ProductGroup<Integers, Integers> grid{Integers(), Integers()};
  const auto big = std::make_tuple(int64_t{0}, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(grid.Compose(big, big).status().code(), absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace group
}  // namespace gpe
