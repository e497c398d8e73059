#include "attention/test_util.h"

#include <utility>

#include "gtest/gtest.h"

namespace gpe {
namespace attention {
namespace test {

std::vector<double> RandomUniform(size_t n, std::mt19937_64* rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> x(n);
  for (double& e : x) e = u(*rng);
  return x;
}

Eigen::MatrixXd RandomSkew(int64_t d, double scale, std::mt19937_64* rng) {
  std::vector<double> x = RandomUniform(d * d, rng);
  Eigen::MatrixXd m = Eigen::Map<Eigen::MatrixXd>(x.data(), d, d);
  return scale * (m - m.transpose());
}

AttentionArgs Bshd(int64_t batch, int64_t lq, int64_t lk, int64_t hq, int64_t hkv, int64_t d) {
  AttentionArgs a;
  a.layout = Layout::kBSHD;
  a.batch = batch;
  a.seq_len_q = lq;
  a.seq_len_k = lk;
  a.num_q_heads = hq;
  a.num_kv_heads = hkv;
  a.head_dim = d;
  a.q = a.o = ContiguousStrides(Layout::kBSHD, lq, hq, d);
  a.k = a.v = ContiguousStrides(Layout::kBSHD, lk, hkv, d);
  return a;
}

AttentionArgs Thd(const std::vector<int64_t>& cu_q, const std::vector<int64_t>& cu_k, int64_t hq,
                  int64_t hkv, int64_t d) {
  AttentionArgs a;
  a.layout = Layout::kTHD;
  a.seq_len_q = cu_q.back();
  a.seq_len_k = cu_k.back();
  a.cu_seqlens_q = cu_q;
  a.cu_seqlens_k = cu_k;
  a.num_q_heads = hq;
  a.num_kv_heads = hkv;
  a.head_dim = d;
  a.q = a.o = ContiguousStrides(Layout::kTHD, 0, hq, d);
  a.k = a.v = ContiguousStrides(Layout::kTHD, 0, hkv, d);
  return a;
}

AttentionArgs WithValueDim(AttentionArgs a, int64_t dv) {
  a.head_dim_v = dv;
  a.v = ContiguousStrides(a.layout, a.seq_len_k, a.num_kv_heads, dv);
  a.o = ContiguousStrides(a.layout, a.seq_len_q, a.num_q_heads, dv);
  return a;
}

encodings::sequence::Rope MakeAxesRope(int64_t d, int num_axes, std::vector<int> plane_axes,
                                       encodings::sequence::RopeFrequencies f) {
  encodings::sequence::RopeOptions opt;
  opt.head_dim = d;
  opt.rotary_dim = d;
  opt.pairing = group::PlanePairing::kInterleaved;
  opt.num_axes = num_axes;
  opt.plane_axes = std::move(plane_axes);
  auto rope = encodings::sequence::Rope::Create(opt, std::move(f));
  EXPECT_TRUE(rope.ok()) << rope.status();
  return *rope;
}

}  // namespace test
}  // namespace attention
}  // namespace gpe
