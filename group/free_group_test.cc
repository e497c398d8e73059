#include "group/free_group.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpe {
namespace group {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

FreeWord RandomWord(const FreeGroup& f, int max_len, std::mt19937_64& rng) {
  std::vector<int32_t> letters(rng() % (max_len + 1));
  for (int32_t& g : letters) {
    g = 1 + static_cast<int32_t>(rng() % f.num_generators());
    if (rng() % 2) g = -g;
  }
  return *f.Reduce(letters);
}

TEST(FreeGroupTest, GroupLaws) {
  const FreeGroup f = *FreeGroup::Create(3);
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const FreeWord a = RandomWord(f, 8, rng), b = RandomWord(f, 8, rng),
                   c = RandomWord(f, 8, rng);
    ASSERT_TRUE(f.Validate(a).ok());
    EXPECT_EQ(*f.Compose(*f.Compose(a, b), c), *f.Compose(a, *f.Compose(b, c)));
    EXPECT_EQ(*f.Compose(a, f.Identity()), a);
    EXPECT_EQ(*f.Compose(f.Identity(), a), a);
    EXPECT_THAT(*f.Compose(a, *f.Inverse(a)), IsEmpty());
    EXPECT_THAT(*f.Compose(*f.Inverse(a), a), IsEmpty());
    // (ab)^-1 = b^-1 a^-1.
    EXPECT_EQ(*f.Inverse(*f.Compose(a, b)), *f.Compose(*f.Inverse(b), *f.Inverse(a)));
    EXPECT_TRUE(f.Validate(*f.Compose(a, b)).ok());
  }
}

TEST(FreeGroupTest, DoesNotCommute) {
  const FreeGroup f = *FreeGroup::Create(2);
  EXPECT_THAT(*f.Compose({1}, {2}), ElementsAre(1, 2));
  EXPECT_THAT(*f.Compose({2}, {1}), ElementsAre(2, 1));
  EXPECT_FALSE(f.Equal(*f.Compose({1}, {2}), *f.Compose({2}, {1})));
}

TEST(FreeGroupTest, ReductionAndTreePaths) {
  const FreeGroup f = *FreeGroup::Create(2);
  EXPECT_THAT(*f.Reduce({1, 2, -2, -1, 2}), ElementsAre(2));
  EXPECT_THAT(*f.Compose({1, 2}, {-2, 1}), ElementsAre(1, 1));
  // Kogkalidis et al., Figure 2: in a binary tree, node "2" (address (1)) relates to
  // node "12" (address (0, 1)) by the path (-2) + 1 + 2.
  const FreeWord n2 = *f.FromTreeAddress({1});
  const FreeWord n12 = *f.FromTreeAddress({0, 1});
  EXPECT_THAT(n12, ElementsAre(1, 2));
  EXPECT_THAT(*f.RelativePath(n2, n12), ElementsAre(-2, 1, 2));
  // Siblings share the parent: the path goes up one and down one.
  EXPECT_THAT(*f.RelativePath(*f.FromTreeAddress({0, 1, 0}), *f.FromTreeAddress({0, 1, 1})),
              ElementsAre(-1, 2));
  EXPECT_THAT(*f.FromTreeAddress({}), IsEmpty());
}

TEST(FreeGroupTest, BadInput) {
  EXPECT_FALSE(FreeGroup::Create(0).ok());
  const FreeGroup f = *FreeGroup::Create(2);
  EXPECT_FALSE(f.Reduce({1, 3}).ok());
  EXPECT_FALSE(f.Reduce({0}).ok());
  EXPECT_FALSE(f.Validate({1, -1}).ok());  // not reduced
  EXPECT_FALSE(f.Compose({1, -1}, {2}).ok());
  EXPECT_FALSE(f.Inverse({-3}).ok());
  EXPECT_FALSE(f.FromTreeAddress({0, 2}).ok());
  EXPECT_FALSE(f.FromTreeAddress({-1}).ok());
}

}  // namespace
}  // namespace group
}  // namespace gpe
