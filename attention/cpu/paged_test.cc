// Paged KV caches (descriptor.h, LAYOUTS: block tables as vLLM and FlashInfer lay them
// out): the CPU forward over pages in shuffled order, shared by nothing, against the
// double reference on the same pages (which reads them row by row through KOffset), on
// the decoding path (few queries: blocks split at page boundaries) for pages of 16, 64
// and 256 tokens, float32 and 16-bit caches, a batch of sequences of mixed lengths, GQA,
// with a window, the softcap and sinks; a prefill against the cache (the pages gathered);
// the refusals.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "attention/cpu/cpu_attention.h"
#include "attention/cpu/test_util.h"
#include "attention/descriptor.h"
#include "attention/reference.h"
#include "attention/test_util.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"

namespace gpe {
namespace attention {
namespace {

using encodings::sequence::BFloat16;
using encodings::sequence::Float16;

template <class KV>
KV FromFloat(float x) {
  if constexpr (std::is_same_v<KV, float>) {
    return x;
  } else if constexpr (std::is_same_v<KV, BFloat16>) {
    return encodings::sequence::ToBFloat16(x);
  } else {
    return encodings::sequence::ToFloat16(x);
  }
}
template <class KV>
double ToDouble(KV x) {
  if constexpr (std::is_same_v<KV, float>) {
    return x;
  } else {
    return encodings::sequence::ToFloat(x);
  }
}

// A paged cache for `a` (bshd; seq_len_k a multiple of page): every page a sequence uses
// gets its own page, in shuffled order among num_pages = used + 5 (spare pages hold
// NaN: a wrong page id shows); unused table entries are -1.
struct PagedCache {
  std::vector<int64_t> table;
  int64_t num_pages = 0;
  void Make(AttentionArgs* a, int64_t page, std::mt19937_64* rng) {
    const int64_t per_seq = a->seq_len_k / page;
    std::vector<int64_t> need;
    for (int64_t b = 0; b < a->batch; ++b) {
      const int64_t used = a->kv_lengths.empty() ? a->seq_len_k : a->kv_lengths[b];
      need.push_back((used + page - 1) / page);
    }
    num_pages = std::accumulate(need.begin(), need.end(), int64_t{0}) + 5;
    std::vector<int64_t> ids(num_pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), *rng);
    table.assign(a->batch * per_seq, -1);
    size_t next = 0;
    for (int64_t b = 0; b < a->batch; ++b) {
      for (int64_t i = 0; i < need[b]; ++i) table[b * per_seq + i] = ids[next++];
    }
    a->pages = {table, page, num_pages};
    const int64_t row = a->num_kv_heads * a->head_dim;
    a->k = a->v = Strides{page * row, row, a->head_dim};
  }
};

template <class KV>
void Check(AttentionArgs a, int64_t page, uint64_t seed, const std::string& what) {
  SCOPED_TRACE(what);
  std::mt19937_64 rng(seed);
  PagedCache cache;
  cache.Make(&a, page, &rng);
  const size_t nkv = static_cast<size_t>(cache.num_pages * page * a.num_kv_heads * a.head_dim);
  std::vector<KV> k(nkv, FromFloat<KV>(std::nanf(""))), v(nkv, FromFloat<KV>(std::nanf("")));
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t t = a.k_begin(b); t < a.k_end(b); ++t) {
      for (int64_t g = 0; g < a.num_kv_heads; ++g) {
        for (int64_t e = 0; e < a.head_dim; ++e) {
          k[a.KOffset(a.k, t, g) + e] = FromFloat<KV>(n(rng));
          v[a.KOffset(a.v, t, g) + e] = FromFloat<KV>(n(rng));
        }
      }
    }
  }
  const size_t nq = test::Extent(a, a.q, true);
  std::vector<float> q = test::RandomF(nq, &rng), o(nq), lse(a.num_q_tokens() * a.num_q_heads);
  std::vector<double> qd(q.begin(), q.end()), kd(nkv), vd(nkv), od(nq), lsed(lse.size());
  for (size_t i = 0; i < nkv; ++i) kd[i] = ToDouble(k[i]), vd[i] = ToDouble(v[i]);
  ASSERT_TRUE(ReferenceForward<double>(a, qd.data(), kd.data(), vd.data(), od.data(), lsed.data()).ok());
  CpuAttentionOptions opt;
  opt.block_k = 64;
  opt.num_threads = 3;
  absl::Status st = CpuForward(a, q.data(), k.data(), v.data(), o.data(), lse.data(), opt);
  ASSERT_TRUE(st.ok()) << st;
  // As kv_cache_test: float32 arithmetic on O(1) outputs over <= 1100 keys, errors ~1e-6
  // against double; a wrong page or slot is off by O(0.1) (or NaN from a spare page).
  double err = 0.0, lerr = 0.0;
  for (size_t i = 0; i < nq; ++i) err = std::max(err, std::abs(o[i] - od[i]));
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isinf(lsed[i])) {
      EXPECT_EQ(lse[i], lsed[i]);
    } else {
      lerr = std::max(lerr, std::abs(lse[i] - lsed[i]));
    }
  }
  EXPECT_LE(err, 2e-5);
  EXPECT_LE(lerr, 1e-4);
}

template <class KV>
void CheckAll(const std::string& name) {
  uint64_t seed = 900;
  const std::vector<int64_t> lengths = {1100, 0, 333};
  for (int64_t page : {16, 64, 256}) {
    for (int64_t lq : {1, 3}) {
      for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{4, 1}, {4, 2}}) {
        AttentionArgs a = test::Bshd(3, lq, 1280, hq, hkv, 32);
        a.causal = true;
        a.kv_lengths = lengths;
        Check<KV>(a, page, ++seed,
                  name + " decode page " + std::to_string(page) + " lq " + std::to_string(lq) +
                      " hkv " + std::to_string(hkv));
      }
    }
  }
  {  // a window, the softcap and sinks
    const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
    AttentionArgs a = test::Bshd(3, 1, 1280, 4, 1, 32);
    a.causal = true;
    a.kv_lengths = lengths;
    a.window_left = 200;
    a.softcap = 1.5;
    a.sinks = sinks;
    Check<KV>(a, 64, ++seed, name + " decode window softcap sinks");
  }
  {  // RoPE on the keys inside the kernel (the by-head decoding path)
    encodings::sequence::Rope rope = test::MakeRope(32, 32, group::PlanePairing::kHalfSplit);
    RopeRowTransform tq(rope), tk(rope, encodings::sequence::RopeRole::kKey);
    AttentionArgs a = test::Bshd(3, 2, 1280, 4, 2, 32);
    a.causal = true;
    a.kv_lengths = lengths;
    a.q_transform = &tq;
    a.k_transform = &tk;
    Check<KV>(a, 16, ++seed, name + " decode RoPE");
  }
  {  // a prefill against the cache (query items: the pages gathered)
    const std::vector<int64_t> used = {100, 37};
    AttentionArgs a = test::Bshd(2, 40, 128, 4, 2, 32);
    a.causal = true;
    a.kv_lengths = used;
    Check<KV>(a, 16, ++seed, name + " prefill");
    // The gathered cache holds max kv_lengths = 100 keys per sequence, not the table's
    // 1024: explicit key positions (over the capacity) renumbered with it, a window and
    // ALiBi-like positions far from 0. The reference reads the positions as given.
    AttentionArgs w = test::Bshd(2, 40, 1024, 4, 2, 32);
    w.causal = true;
    w.kv_lengths = used;
    w.window_left = 30;
    std::vector<int64_t> kpos(2 * 1024), qpos(2 * 40);
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t t = 0; t < 1024; ++t) kpos[b * 1024 + t] = 5000 * (b + 1) + 2 * t;
      for (int64_t i = 0; i < 40; ++i) qpos[b * 40 + i] = 5000 * (b + 1) + 2 * (used[b] - 40 + i);
    }
    w.k_positions = kpos;
    w.q_positions = qpos;
    Check<KV>(w, 64, ++seed, name + " prefill, capacity 1024, explicit positions and a window");
    // No key used anywhere: o = 0, lse = -inf (the gathered cache of 0 keys per sequence
    // had no valid strides and was refused), with default and explicit positions.
    const std::vector<int64_t> none = {0, 0};
    AttentionArgs z = test::Bshd(2, 40, 128, 4, 2, 32);
    z.kv_lengths = none;
    Check<KV>(z, 16, ++seed, name + " prefill, no key used");
    const std::vector<int64_t> zk(kpos.begin(), kpos.begin() + 2 * 128);
    z.k_positions = zk;
    z.q_positions = qpos;
    Check<KV>(z, 16, ++seed, name + " prefill, no key used, explicit positions");
  }
}

TEST(PagedKv, Float32) { CheckAll<float>("f32"); }
TEST(PagedKv, BFloat16) { CheckAll<BFloat16>("bf16"); }
TEST(PagedKv, Float16) { CheckAll<Float16>("f16"); }

TEST(PagedKv, Refusals) {
  const std::vector<int64_t> table = {0, 1, 2, 3}, bad_id = {0, 1, 2, 9};
  AttentionArgs a = test::Bshd(2, 1, 32, 2, 2, 8);
  a.pages = {table, 16, 4};
  a.k = a.v = Strides{16 * 16, 16, 8};
  EXPECT_TRUE(ValidateAttention(a).ok());
  auto expect_bad = [](const AttentionArgs& x, const char* what) {
    absl::Status s = ValidateAttention(x);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  AttentionArgs b = a;
  b.pages.block_table = bad_id;
  expect_bad(b, "is not a page id");
  b = a;
  b.pages.page_size = 12;
  expect_bad(b, "multiple of page_size");
  b = a;
  b.pages.block_table = absl::MakeConstSpan(table).subspan(0, 3);
  expect_bad(b, "block_table has 3 entries");
  b = a;
  b.k.batch = 100;  // pages of 16 tokens x 16 elements overlap
  expect_bad(b, "overlaps");
  // Entries past a sequence's length are never read.
  const std::vector<int64_t> used = {16, 0}, partial = {0, -1, -7, 99};
  b = a;
  b.kv_lengths = used;
  b.pages.block_table = partial;
  EXPECT_TRUE(ValidateAttention(b).ok());
  // The backward refuses a paged cache.
  std::vector<float> x(4 * 16 * 16, 0.5f), o(2 * 2 * 8), lse(4), dq(o.size());
  absl::Status st = CpuBackward(a, o.data(), x.data(), x.data(), nullptr, nullptr, o.data(), dq.data(),
                                nullptr, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  std::vector<double> xd(x.begin(), x.end()), od(o.size()), dqd(o.size());
  EXPECT_FALSE(ReferenceBackward<double>(a, od.data(), xd.data(), xd.data(), od.data(), dqd.data(),
                                         nullptr, nullptr)
                   .ok());
}

// A block table of no pages (seq_len_k 0) and no kv_lengths: every sequence of the batch
// has no key, o = 0 and lse = -inf as in the reference (batch 2 was refused: the dense
// copy of no keys per sequence had a batch stride of 0).
TEST(PagedKv, NoPagesAtAll) {
  AttentionArgs a = test::Bshd(2, 1, 0, 2, 2, 8);
  const std::vector<int64_t> no_table;
  a.pages = {no_table, 16, 1};
  a.k = a.v = Strides{16 * 16, 16, 8};
  std::vector<float> pool(16 * 16, 0.5f), q(2 * 2 * 8, 1.0f), o(q.size(), 7.0f), lse(4, 7.0f);
  ASSERT_TRUE(ValidateAttention(a).ok());
  const absl::Status st = CpuForward(a, q.data(), pool.data(), pool.data(), o.data(), lse.data());
  ASSERT_TRUE(st.ok()) << st;
  for (float x : o) EXPECT_EQ(x, 0.0f);
  for (float x : lse) EXPECT_EQ(x, -std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace attention
}  // namespace gpe
