// MergeAttention: attention over keys split into disjoint parts (each run by the exact
// reference with the keys' global positions) and merged equals the unsplit attention, with
// RoPE, causal ALiBi, GQA, empty parts and rows that see no key in some part; plus the
// algebraic properties (one part is the identity, order does not matter) and bad input.
#include "attention/merge.h"

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "attention/descriptor.h"
#include "attention/reference.h"
#include "attention/test_util.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"

namespace gpe {
namespace attention {
namespace {

namespace seq = encodings::sequence;

template <class T>
std::vector<T> Random(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> u(0.0, 1.0);
  std::vector<T> x(n);
  for (T& e : x) e = static_cast<T>(u(rng));
  return x;
}

constexpr int64_t kHq = 4, kHkv = 2, kD = 16;

// One sequence, packed [tokens, heads, d] layout, causal, RoPE on every feature and causal
// ALiBi, with explicit positions.
template <class T>
struct Problem {
  Problem() {
    seq::RopeOptions ro;
    ro.head_dim = kD;
    ro.rotary_dim = kD;
    rope.emplace(*seq::Rope::Create(ro, *seq::DefaultRopeFrequencies(kD, 10000.0)));
    transform = std::make_unique<RopeRowTransform>(*rope);
    alibi.emplace(*seq::AlibiBias::CreateStandard(kHq, seq::AlibiForm::kCausal));
  }
  // o [q_pos.size(), Hq, d] and lse [q_pos.size(), Hq] over the keys `keys` (indices into
  // k_all / v_all / k_pos_all), which are gathered into a compact part.
  void Run(const std::vector<T>& q, const std::vector<int64_t>& q_pos, const std::vector<T>& k_all,
           const std::vector<T>& v_all, const std::vector<int64_t>& k_pos_all,
           const std::vector<int64_t>& keys, std::vector<T>* o, std::vector<T>* lse) {
    const int64_t nq = static_cast<int64_t>(q_pos.size()), nk = static_cast<int64_t>(keys.size());
    if (nk == 0) {  // no keys: every row is empty (lse = -inf); o's values must be ignored
      o->assign(nq * kHq * kD, T(7));
      lse->assign(nq * kHq, -std::numeric_limits<T>::infinity());
      return;
    }
    std::vector<T> k(nk * kHkv * kD), v(nk * kHkv * kD);
    std::vector<int64_t> k_pos(nk);
    for (int64_t j = 0; j < nk; ++j) {
      k_pos[j] = k_pos_all[keys[j]];
      for (int64_t e = 0; e < kHkv * kD; ++e) {
        k[j * kHkv * kD + e] = k_all[keys[j] * kHkv * kD + e];
        v[j * kHkv * kD + e] = v_all[keys[j] * kHkv * kD + e];
      }
    }
    const std::vector<int64_t> cu_q = {0, nq}, cu_k = {0, nk};
    AttentionArgs a = test::Thd(cu_q, cu_k, kHq, kHkv, kD);
    a.causal = true;
    a.q_positions = q_pos;
    a.k_positions = k_pos;
    a.q_transform = a.k_transform = transform.get();
    a.biases = {&*alibi};
    o->assign(nq * kHq * kD, T(0));
    lse->assign(nq * kHq, T(0));
    const absl::Status s = ReferenceForward<T>(a, q.data(), k.data(), v.data(), o->data(), lse->data());
    ASSERT_TRUE(s.ok()) << s;
  }
  std::optional<seq::Rope> rope;
  std::unique_ptr<RowTransform> transform;
  std::optional<seq::AlibiBias> alibi;
};

template <class T>
void SplitAndMerge(const std::vector<std::vector<int64_t>>& parts, double tol) {
  // 13 queries at positions 20..32 (the last ones, KV-cache style) against 33 keys.
  const int64_t nq = 13, nk = 33;
  std::vector<int64_t> q_pos(nq), k_pos(nk), all(nk);
  for (int64_t i = 0; i < nq; ++i) q_pos[i] = 20 + i;
  for (int64_t j = 0; j < nk; ++j) k_pos[j] = all[j] = j;
  const std::vector<T> q = Random<T>(nq * kHq * kD, 1), k = Random<T>(nk * kHkv * kD, 2),
                       v = Random<T>(nk * kHkv * kD, 3);
  Problem<T> p;
  std::vector<T> o_full, lse_full;
  p.Run(q, q_pos, k, v, k_pos, all, &o_full, &lse_full);
  std::vector<std::vector<T>> os(parts.size()), lses(parts.size());
  std::vector<const T*> op, lp;
  for (size_t i = 0; i < parts.size(); ++i) {
    p.Run(q, q_pos, k, v, k_pos, parts[i], &os[i], &lses[i]);
    op.push_back(os[i].data());
    lp.push_back(lses[i].data());
  }
  std::vector<T> o(o_full.size()), lse(lse_full.size());
  ASSERT_TRUE(MergeAttention<T>(nq * kHq, kD, op, lp, o.data(), lse.data()).ok());
  for (size_t i = 0; i < o.size(); ++i) ASSERT_NEAR(o[i], o_full[i], tol) << i;
  for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], lse_full[i], tol) << i;
}

std::vector<int64_t> Range(int64_t lo, int64_t hi) {
  std::vector<int64_t> r;
  for (int64_t j = lo; j < hi; ++j) r.push_back(j);
  return r;
}

TEST(MergeAttention, ContiguousChunksEqualUnsplitDouble) {
  // Chunks [0, 5), empty, [5, 21), [21, 33): the query at position 20 sees no key of the
  // last chunk (lse = -inf there). Double reference on both sides: only the order of
  // double roundings differs (~1e-15 on O(1) values); 1e-12 fails for a wrong weight.
  SplitAndMerge<double>({Range(0, 5), {}, Range(5, 21), Range(21, 33)}, 1e-12);
}

TEST(MergeAttention, InterleavedKeysEqualUnsplitDouble) {
  // Disjoint but not contiguous (even / odd positions: a load-balanced sharding).
  std::vector<int64_t> even, odd;
  for (int64_t j = 0; j < 33; ++j) (j % 2 ? odd : even).push_back(j);
  SplitAndMerge<double>({odd, even}, 1e-12);
}

TEST(MergeAttention, ChunksEqualUnsplitFloat) {
  // float parts from the float reference: each is within ~1e-6 of exact on O(1) outputs,
  // the merge adds one rounding; 2e-5 is a few times that and far below a wrong weight.
  SplitAndMerge<float>({Range(0, 11), Range(11, 22), Range(22, 33)}, 2e-5);
}

TEST(MergeAttention, OnePartIsIdentityAndOrderDoesNotMatter) {
  const int64_t rows = 9, d = 5;
  std::vector<double> a = Random<double>(rows * d, 4), b = Random<double>(rows * d, 5);
  std::vector<double> la = Random<double>(rows, 6), lb = Random<double>(rows, 7);
  la[2] = -std::numeric_limits<double>::infinity();  // part a saw no key in row 2
  std::vector<double> o(rows * d), lse(rows);
  const double* one[] = {a.data()};
  const double* lone[] = {la.data()};
  ASSERT_TRUE(MergeAttention<double>(rows, d, one, lone, o.data(), lse.data()).ok());
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(lse[r], la[r]);
    // A row with no key is o = 0 whatever the part holds there.
    for (int64_t e = 0; e < d; ++e) EXPECT_EQ(o[r * d + e], r == 2 ? 0.0 : a[r * d + e]);
  }
  const double* ab[] = {a.data(), b.data()};
  const double* lab[] = {la.data(), lb.data()};
  const double* ba[] = {b.data(), a.data()};
  const double* lba[] = {lb.data(), la.data()};
  std::vector<double> o2(rows * d), lse2(rows);
  ASSERT_TRUE(MergeAttention<double>(rows, d, ab, lab, o.data(), lse.data()).ok());
  ASSERT_TRUE(MergeAttention<double>(rows, d, ba, lba, o2.data(), lse2.data()).ok());
  // Reordering changes only the order of two-term double sums: 1e-15 on O(1) values.
  for (size_t i = 0; i < o.size(); ++i) EXPECT_NEAR(o[i], o2[i], 1e-15);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_NEAR(lse[r], lse2[r], 1e-14);
    // Written from the formula: ln(e^la + e^lb); row 2 is part b alone.
    EXPECT_NEAR(lse[r], std::log(std::exp(la[r]) + std::exp(lb[r])), 1e-14);
  }
  for (int64_t e = 0; e < d; ++e) EXPECT_EQ(o[2 * d + e], b[2 * d + e]);
  // In place: the output may be one of the parts.
  ASSERT_TRUE(MergeAttention<double>(rows, d, ab, lab, a.data(), la.data()).ok());
  EXPECT_EQ(a, o);
  EXPECT_EQ(la, lse);
  // Huge lse values do not overflow (the largest is subtracted first).
  std::vector<double> big = {1000.0}, big2 = {1000.0}, x = {1.0}, y = {3.0}, out(1), lo(1);
  const double* xy[] = {x.data(), y.data()};
  const double* bb[] = {big.data(), big2.data()};
  ASSERT_TRUE(MergeAttention<double>(1, 1, xy, bb, out.data(), lo.data()).ok());
  EXPECT_DOUBLE_EQ(out[0], 2.0);
  EXPECT_DOUBLE_EQ(lo[0], 1000.0 + std::log(2.0));
}

TEST(MergeAttention, RejectsBadInput) {
  std::vector<double> x(6, 1.0), l(2, 0.0), o(6), lse(2);
  const double* one[] = {x.data()};
  const double* lone[] = {l.data()};
  const double* none[] = {nullptr};
  EXPECT_FALSE(MergeAttention<double>(-1, 3, one, lone, o.data(), lse.data()).ok());
  EXPECT_FALSE(MergeAttention<double>(2, 0, one, lone, o.data(), lse.data()).ok());
  EXPECT_FALSE(MergeAttention<double>(2, 3, {}, {}, o.data(), lse.data()).ok());
  const double* two[] = {x.data(), x.data()};
  EXPECT_FALSE(MergeAttention<double>(2, 3, two, lone, o.data(), lse.data()).ok());
  EXPECT_FALSE(MergeAttention<double>(2, 3, none, lone, o.data(), lse.data()).ok());
  EXPECT_FALSE(MergeAttention<double>(2, 3, one, lone, nullptr, lse.data()).ok());
  l[1] = std::numeric_limits<double>::infinity();
  absl::Status s = MergeAttention<double>(2, 3, one, lone, o.data(), lse.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row 1"), std::string::npos) << s.message();
}

// A part's NaN lse (its row saw a NaN score) makes that merged row NaN, o and lse, as the
// unsplit row would be; the other rows merge as usual. Before, NaN was refused, so a
// split computation failed where the unsplit one returned NaN.
TEST(MergeAttention, NaNPartMakesItsRowNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> x0 = {1, 2, 3, 4}, x1 = {5, 6, 7, 8};
  std::vector<double> l0 = {0.0, nan}, l1 = {0.0, 1.0};
  const double* os[] = {x0.data(), x1.data()};
  const double* ls[] = {l0.data(), l1.data()};
  std::vector<double> o(4), lse(2);
  ASSERT_TRUE(MergeAttention<double>(2, 2, os, ls, o.data(), lse.data()).ok());
  // Row 0: equal weights, exact in double (means of small integers; lse = ln 2).
  EXPECT_DOUBLE_EQ(o[0], 3.0);
  EXPECT_DOUBLE_EQ(o[1], 4.0);
  EXPECT_DOUBLE_EQ(lse[0], std::log(2.0));
  EXPECT_TRUE(std::isnan(o[2]) && std::isnan(o[3]) && std::isnan(lse[1]));
}

}  // namespace
}  // namespace attention
}  // namespace gpe
