// The CUDA attention forward against the exact reference (attention/reference.h, double).
// Skips with a message where no GPU is present.
#include "attention/cuda/cuda_attention.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "attention/descriptor.h"
#include "attention/reference.h"
#include "attention/test_util.h"
#include "encodings/sequence/bias.h"
#include "encodings/sequence/cuda/rope_kernels.h"
#include "encodings/sequence/rope.h"
#include "gtest/gtest.h"

namespace gpe::attention::cuda {
namespace {

namespace seq = encodings::sequence;

#define SKIP_WITHOUT_GPU()                                                             \
  do {                                                                                 \
    std::string why;                                                                   \
    if (seq::cuda::CudaDeviceCount(&why) == 0) {                                       \
      GTEST_SKIP() << "no CUDA device (" << why << "): the attention kernel is built " \
                   << "for sm_80/sm_90 but cannot run on this machine";                \
    }                                                                                  \
  } while (0)

template <class T>
struct DeviceVector {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceVector(const std::vector<T>& h) : n(h.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T)),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  DeviceVector(const DeviceVector&) = delete;
  DeviceVector& operator=(const DeviceVector&) = delete;
  void Set(const std::vector<T>& h) {  // same size
    ASSERT_EQ(h.size(), n);
    EXPECT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> Get() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  ~DeviceVector() { cudaFree(p); }
};

// b's workspace: CudaAttentionBackwardWorkspaceBytes(*b) bytes of `fill` in device
// memory, owned by the result.
std::unique_ptr<DeviceVector<uint8_t>> AttachWorkspace(CudaAttentionBackwardArgs* b,
                                                       uint8_t fill = 0) {
  const int64_t need = CudaAttentionBackwardWorkspaceBytes(*b);
  auto work = std::make_unique<DeviceVector<uint8_t>>(
      std::vector<uint8_t>(static_cast<size_t>(need), fill));
  b->workspace = work->p;
  b->workspace_bytes = need;
  return work;
}

struct Case {
  int64_t batch, sq, sk, hq, hkv, d;
  bool causal, rope, alibi;
};

// One bf16 head: batch 1, s queries and keys, contiguous [s, d] tensors.
CudaAttentionArgs OneBf16Head(int64_t s, int64_t d, const seq::BFloat16* q,
                              const seq::BFloat16* k, const seq::BFloat16* v, seq::BFloat16* o,
                              float* lse) {
  CudaAttentionArgs g;
  g.dtype = CudaDType::kBFloat16;
  g.batch = 1;
  g.seq_q = g.seq_k = s;
  g.heads_q = g.heads_kv = 1;
  g.head_dim = d;
  g.sq = g.sk = g.sv = g.so = CudaStrides{s * d, d, d};
  g.q = q;
  g.k = k;
  g.v = v;
  g.o = o;
  g.lse = lse;
  return g;
}

// float32 kernel against the double reference. Each output is a convex combination of
// values in [-1, 1] whose weights come from float32 scores (d products, |s| < ~10): the
// weights' relative error is ~1e-6 and the output error below 1e-5 absolute; lse
// likewise to 1e-5.
TEST(CudaAttention, Float32MatchesTheReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  // Lengths below, at and above the tiles (4 query rows, 16 keys); KV-cache shapes; GQA.
  for (const Case& c :
       {Case{1, 1, 1, 1, 1, 32, false, false, false}, Case{2, 5, 16, 4, 2, 64, true, true, false},
        Case{1, 17, 33, 8, 2, 128, true, true, true}, Case{3, 4, 70, 2, 1, 80, false, false, true},
        Case{1, 1, 300, 4, 4, 256, true, true, true}}) {
    SCOPED_TRACE(::testing::Message() << "b" << c.batch << " sq" << c.sq << " sk" << c.sk << " h"
                                      << c.hq << "/" << c.hkv << " d" << c.d);
    std::vector<float> q(c.batch * c.sq * c.hq * c.d), k(c.batch * c.sk * c.hkv * c.d), v(k.size());
    for (float& x : q) x = u(rng);
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
    AttentionArgs args = test::Bshd(c.batch, c.sq, c.sk, c.hq, c.hkv, c.d);
    args.causal = c.causal;
    seq::RopeOptions ro;
    ro.head_dim = c.d;
    ro.rotary_dim = (c.d / 4) * 2;  // partial rotary: half the features (d >= 4 here)
    absl::StatusOr<seq::Rope> rope =
        seq::Rope::Create(ro, *seq::DefaultRopeFrequencies(ro.rotary_dim));
    ASSERT_TRUE(rope.ok()) << rope.status();
    RopeRowTransform tq(*rope), tk(*rope, seq::RopeRole::kKey);
    if (c.rope) {
      args.q_transform = &tq;
      args.k_transform = &tk;
    }
    absl::StatusOr<seq::AlibiBias> alibi =
        seq::AlibiBias::CreateStandard(c.hq, seq::AlibiForm::kCausal);
    ASSERT_TRUE(alibi.ok());
    if (c.alibi) args.biases = {&*alibi};
    std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end());
    std::vector<double> want(q.size()), want_lse(c.batch * c.sq * c.hq);
    ASSERT_TRUE(ReferenceForward<double>(args, qd.data(), kd.data(), vd.data(), want.data(),
                                         want_lse.data())
                    .ok());

    absl::StatusOr<seq::cuda::RopeCuda> grope = seq::cuda::RopeCuda::Create(*rope);
    ASSERT_TRUE(grope.ok()) << grope.status();
    std::vector<float> slopes(alibi->slopes().begin(), alibi->slopes().end());
    DeviceVector<float> dq(q), dk(k), dv(v), dout(std::vector<float>(q.size())),
        dlse(std::vector<float>(want_lse.size())), dslopes(slopes);
    CudaAttentionArgs g;
    g.batch = c.batch;
    g.seq_q = c.sq;
    g.seq_k = c.sk;
    g.heads_q = c.hq;
    g.heads_kv = c.hkv;
    g.head_dim = c.d;
    g.q = dq.p;
    g.k = dk.p;
    g.v = dv.p;
    g.o = dout.p;
    g.lse = dlse.p;
    g.sq = g.so = CudaStrides{c.sq * c.hq * c.d, c.hq * c.d, c.d};
    g.sk = g.sv = CudaStrides{c.sk * c.hkv * c.d, c.hkv * c.d, c.d};
    g.causal = c.causal;
    if (c.rope) g.rope = &*grope;
    if (c.alibi) g.alibi_slopes = dslopes.p;
    g.kernel = CudaAttentionKernel::kSimt;
    ASSERT_TRUE(CudaAttentionForward(g, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = dout.Get(), got_lse = dlse.Get();
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << "o " << i;
    for (size_t i = 0; i < want_lse.size(); ++i) {
      if (std::isinf(want_lse[i])) {
        EXPECT_TRUE(std::isinf(got_lse[i]) && got_lse[i] < 0) << "lse " << i;
      } else {
        ASSERT_NEAR(got_lse[i], want_lse[i], 1e-5 * std::max(1.0, std::abs(want_lse[i])))
            << "lse " << i;
      }
    }
  }
}

// Packed sequences (one empty, one of a single token) with explicit positions, bfloat16:
// outputs rounded once to bfloat16 after float32 work, so within 2^-8 relative + 1e-5.
TEST(CudaAttention, PackedBf16WithPositions) {
  SKIP_WITHOUT_GPU();
  const std::vector<int64_t> cu_q = {0, 0, 1, 9}, cu_k = {0, 3, 4, 30};
  const int64_t hq = 2, hkv = 1, d = 64, tq = cu_q.back(), tk = cu_k.back();
  std::vector<int64_t> pq(tq), pk(tk);
  for (int64_t t = 0; t < tk; ++t) pk[t] = 1000 + (t * 7) % 26;
  for (int64_t t = 0; t < tq; ++t) pq[t] = 1010 + t;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<seq::BFloat16> q(tq * hq * d), k(tk * hkv * d), v(k.size());
  for (auto* t : {&q, &k, &v}) {
    for (auto& x : *t) x = seq::ToBFloat16(u(rng));
  }
  AttentionArgs args = test::Thd(cu_q, cu_k, hq, hkv, d);
  args.causal = true;
  args.q_positions = pq;
  args.k_positions = pk;
  auto widen = [](const std::vector<seq::BFloat16>& x) {
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = seq::ToFloat(x[i]);
    return y;
  };
  const std::vector<double> qd = widen(q), kd = widen(k), vd = widen(v);
  std::vector<double> want(qd.size());
  ASSERT_TRUE(ReferenceForward<double>(args, qd.data(), kd.data(), vd.data(), want.data()).ok());
  DeviceVector<seq::BFloat16> dq(q), dk(k), dv(v), dout(std::vector<seq::BFloat16>(q.size()));
  DeviceVector<int64_t> dcq(cu_q), dck(cu_k), dpq(pq), dpk(pk);
  CudaAttentionArgs g;
  g.dtype = CudaDType::kBFloat16;
  g.cu_seqlens_q = dcq.p;
  g.cu_seqlens_k = dck.p;
  g.num_seqs = 3;
  g.max_seq_q = 8;
  g.heads_q = hq;
  g.heads_kv = hkv;
  g.head_dim = d;
  g.q = dq.p;
  g.k = dk.p;
  g.v = dv.p;
  g.o = dout.p;
  g.sq = g.so = CudaStrides{0, hq * d, d};
  g.sk = g.sv = CudaStrides{0, hkv * d, d};
  g.causal = true;
  g.q_positions = dpq.p;
  g.k_positions = dpk.p;
  g.kernel = CudaAttentionKernel::kSimt;  // float32 inside; the tensor-core test is below
  ASSERT_TRUE(CudaAttentionForward(g, nullptr).ok());
  const std::vector<seq::BFloat16> got = dout.Get();
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(seq::ToFloat(got[i]), want[i], std::abs(want[i]) * 0x1p-7 + 1e-5) << i;
  }
}

// The tensor-core kernel (bfloat16 and float16) against the double reference on the
// 16-bit inputs widened. Lengths below, at and above its tiles (64 query rows, 64 keys),
// more queries than keys (rows with no allowed key: o = 0, lse = -inf), GQA, RoPE
// (partial rotary, half-split and interleaved), ALiBi, padded batches of 2, packed
// sequences with explicit positions. The output starts as NaN, so an unwritten element
// fails.
// Tolerances, for inputs in [-1, 1): the kernel rounds the rotated q and k and the
// probabilities P to 16 bits (relative 2^-9 for bfloat16, 2^-12 for float16), and the
// output once. A score moves by at most scale * sum_c |q_c k_c| * 2 u <= 0.1 * 128 * 2u
// (u the unit roundoff), which shifts lse by as much and o by under twice that times
// max|v| = 1; P's rounding adds u. So max |o - o_ref| <= 0.03 (bfloat16) / 0.004
// (float16), lse the same; these errors are independent across terms, so their RMS is
// far smaller: RMS(o - o_ref) <= 0.004 / 0.0006 catches a single dropped or doubled key
// (~1 / 64 of a row's weight), which the max bound alone might not.
template <class T>
void CheckTensorCore(CudaDType dtype, double max_tol, double rms_tol) {
  struct TcCase {
    int64_t batch, sq, sk, hq, hkv, d;
    bool causal, rope, interleaved, alibi;
  };
  std::mt19937_64 rng(17);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto to16 = [](float x) {
    if constexpr (std::is_same_v<T, seq::BFloat16>)
      return seq::ToBFloat16(x);
    else
      return seq::ToFloat16(x);
  };
  for (const TcCase& c : {TcCase{1, 1, 1, 1, 1, 64, false, false, false, false},
                          TcCase{2, 63, 64, 4, 2, 64, true, true, false, false},
                          TcCase{1, 64, 65, 2, 1, 128, true, true, true, true},
                          TcCase{1, 65, 130, 4, 4, 128, false, false, false, true},
                          TcCase{2, 130, 200, 2, 2, 64, true, false, false, false},
                          TcCase{1, 100, 40, 2, 1, 128, true, true, false, false}}) {
    SCOPED_TRACE(::testing::Message() << "b" << c.batch << " sq" << c.sq << " sk" << c.sk << " h"
                                      << c.hq << "/" << c.hkv << " d" << c.d << " causal "
                                      << c.causal << " rope " << c.rope << " alibi " << c.alibi);
    std::vector<T> q(c.batch * c.sq * c.hq * c.d), k(c.batch * c.sk * c.hkv * c.d), v(k.size());
    for (auto* t : {&q, &k, &v}) {
      for (T& x : *t) x = to16(u(rng));
    }
    auto widen = [](const std::vector<T>& x) {
      std::vector<double> y(x.size());
      for (size_t i = 0; i < x.size(); ++i) y[i] = seq::ToFloat(x[i]);
      return y;
    };
    AttentionArgs args = test::Bshd(c.batch, c.sq, c.sk, c.hq, c.hkv, c.d);
    args.causal = c.causal;
    seq::RopeOptions ro;
    ro.head_dim = c.d;
    ro.rotary_dim = c.d / 2;
    if (c.interleaved) ro.pairing = seq::PlanePairing::kInterleaved;
    absl::StatusOr<seq::Rope> rope =
        seq::Rope::Create(ro, *seq::DefaultRopeFrequencies(ro.rotary_dim));
    ASSERT_TRUE(rope.ok()) << rope.status();
    RopeRowTransform tq(*rope), tk(*rope, seq::RopeRole::kKey);
    if (c.rope) {
      args.q_transform = &tq;
      args.k_transform = &tk;
    }
    absl::StatusOr<seq::AlibiBias> alibi =
        seq::AlibiBias::CreateStandard(c.hq, seq::AlibiForm::kCausal);
    ASSERT_TRUE(alibi.ok());
    if (c.alibi) args.biases = {&*alibi};
    const std::vector<double> qd = widen(q), kd = widen(k), vd = widen(v);
    std::vector<double> want(qd.size()), want_lse(c.batch * c.sq * c.hq);
    ASSERT_TRUE(ReferenceForward<double>(args, qd.data(), kd.data(), vd.data(), want.data(),
                                         want_lse.data())
                    .ok());
    absl::StatusOr<seq::cuda::RopeCuda> grope = seq::cuda::RopeCuda::Create(*rope);
    ASSERT_TRUE(grope.ok()) << grope.status();
    std::vector<float> slopes(alibi->slopes().begin(), alibi->slopes().end());
    DeviceVector<T> dq(q), dk(k), dv(v), dout(std::vector<T>(q.size(), to16(std::nanf(""))));
    DeviceVector<float> dlse(std::vector<float>(want_lse.size(), std::nanf(""))), dslopes(slopes);
    CudaAttentionArgs g;
    g.kernel = CudaAttentionKernel::kTensorCore;
    g.dtype = dtype;
    g.batch = c.batch;
    g.seq_q = c.sq;
    g.seq_k = c.sk;
    g.heads_q = c.hq;
    g.heads_kv = c.hkv;
    g.head_dim = c.d;
    g.q = dq.p;
    g.k = dk.p;
    g.v = dv.p;
    g.o = dout.p;
    g.lse = dlse.p;
    g.sq = g.so = CudaStrides{c.sq * c.hq * c.d, c.hq * c.d, c.d};
    g.sk = g.sv = CudaStrides{c.sk * c.hkv * c.d, c.hkv * c.d, c.d};
    g.causal = c.causal;
    if (c.rope) g.rope = &*grope;
    if (c.alibi) g.alibi_slopes = dslopes.p;
    // With RoPE: keys rotated inside the kernel (no workspace), then once per call into a
    // workspace; both must match.
    // Every kernel configuration (attention_mma.cu: 0 default, 1 and 2 alternatives).
    for (const int config : {0, 1, 2}) {
      g.mma_config = config;
      SCOPED_TRACE(::testing::Message() << "config " << config);
      for (const bool use_workspace : {false, true}) {
        if (use_workspace && !c.rope) continue;
        SCOPED_TRACE(use_workspace ? "keys rotated into the workspace"
                                   : "keys rotated in the kernel");
        DeviceVector<uint8_t> work(std::vector<uint8_t>(CudaAttentionWorkspaceBytes(g), 0));
        g.workspace = use_workspace ? static_cast<void*>(work.p) : nullptr;
        g.workspace_bytes = use_workspace ? CudaAttentionWorkspaceBytes(g) : 0;
        ASSERT_EQ(use_workspace, g.workspace_bytes > 0);
        dout.Set(std::vector<T>(q.size(), to16(std::nanf(""))));
        const absl::Status st = CudaAttentionForward(g, nullptr);
        ASSERT_TRUE(st.ok()) << st;
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<T> got = dout.Get();
        const std::vector<float> got_lse = dlse.Get();
        double sq_err = 0;
        for (size_t i = 0; i < want.size(); ++i) {
          const double e = seq::ToFloat(got[i]) - want[i];
          ASSERT_LE(std::abs(e), max_tol)
              << "o " << i << ": " << seq::ToFloat(got[i]) << " vs " << want[i];
          sq_err += e * e;
        }
        EXPECT_LE(std::sqrt(sq_err / want.size()), rms_tol);
        for (size_t i = 0; i < want_lse.size(); ++i) {
          if (std::isinf(want_lse[i])) {
            EXPECT_TRUE(std::isinf(got_lse[i]) && got_lse[i] < 0)
                << "lse " << i << ": " << got_lse[i];
          } else {
            ASSERT_NEAR(got_lse[i], want_lse[i], max_tol) << "lse " << i;
          }
        }
      }
    }
  }
}

TEST(CudaAttention, TensorCoreBf16MatchesTheReference) {
  SKIP_WITHOUT_GPU();
  CheckTensorCore<seq::BFloat16>(CudaDType::kBFloat16, 0.03, 0.004);
}

TEST(CudaAttention, TensorCoreFp16MatchesTheReference) {
  SKIP_WITHOUT_GPU();
  CheckTensorCore<seq::Float16>(CudaDType::kFloat16, 0.004, 0.0006);
}

// Packed sequences (lengths 0, 1, 70 queries; 3, 1, 90 keys) with explicit, unordered key
// positions on the tensor-core kernel; the same tolerances as above for bfloat16.
TEST(CudaAttention, TensorCorePackedWithPositions) {
  SKIP_WITHOUT_GPU();
  const std::vector<int64_t> cu_q = {0, 0, 1, 71}, cu_k = {0, 3, 4, 94};
  const int64_t hq = 4, hkv = 2, d = 128, tq = cu_q.back(), tk = cu_k.back();
  std::vector<int64_t> pq(tq), pk(tk);
  for (int64_t t = 0; t < tk; ++t) pk[t] = (int64_t{1} << 31) + (t * 37) % 101;
  for (int64_t t = 0; t < tq; ++t) pq[t] = (int64_t{1} << 31) + 30 + t;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<seq::BFloat16> q(tq * hq * d), k(tk * hkv * d), v(k.size());
  for (auto* t : {&q, &k, &v}) {
    for (auto& x : *t) x = seq::ToBFloat16(u(rng));
  }
  AttentionArgs args = test::Thd(cu_q, cu_k, hq, hkv, d);
  args.causal = true;
  args.q_positions = pq;
  args.k_positions = pk;
  seq::RopeOptions ro;
  ro.head_dim = d;
  ro.rotary_dim = d;
  absl::StatusOr<seq::Rope> rope = seq::Rope::Create(ro, *seq::DefaultRopeFrequencies(d));
  ASSERT_TRUE(rope.ok());
  RopeRowTransform tqf(*rope), tkf(*rope, seq::RopeRole::kKey);
  args.q_transform = &tqf;
  args.k_transform = &tkf;
  auto widen = [](const std::vector<seq::BFloat16>& x) {
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = seq::ToFloat(x[i]);
    return y;
  };
  const std::vector<double> qd = widen(q), kd = widen(k), vd = widen(v);
  std::vector<double> want(qd.size());
  ASSERT_TRUE(ReferenceForward<double>(args, qd.data(), kd.data(), vd.data(), want.data()).ok());
  absl::StatusOr<seq::cuda::RopeCuda> grope = seq::cuda::RopeCuda::Create(*rope);
  ASSERT_TRUE(grope.ok());
  DeviceVector<seq::BFloat16> dq(q), dk(k), dv(v),
      dout(std::vector<seq::BFloat16>(q.size(), seq::ToBFloat16(std::nanf(""))));
  DeviceVector<int64_t> dcq(cu_q), dck(cu_k), dpq(pq), dpk(pk);
  CudaAttentionArgs g;
  g.kernel = CudaAttentionKernel::kTensorCore;
  g.dtype = CudaDType::kBFloat16;
  g.cu_seqlens_q = dcq.p;
  g.cu_seqlens_k = dck.p;
  g.num_seqs = 3;
  g.max_seq_q = 70;
  g.heads_q = hq;
  g.heads_kv = hkv;
  g.head_dim = d;
  g.q = dq.p;
  g.k = dk.p;
  g.v = dv.p;
  g.o = dout.p;
  g.sq = g.so = CudaStrides{0, hq * d, d};
  g.sk = g.sv = CudaStrides{0, hkv * d, d};
  g.causal = true;
  g.q_positions = dpq.p;
  g.k_positions = dpk.p;
  g.rope = &*grope;
  const absl::Status st = CudaAttentionForward(g, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<seq::BFloat16> got = dout.Get();
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(seq::ToFloat(got[i]), want[i], 0.03) << i;
  }
}

// The tensor-core backward against the double reference (ReferenceBackward: gradients
// with respect to the inputs before RoPE), the GPU forward supplying o and lse. Shapes
// below, at and above the 64-row tiles; GQA (dk, dv summed over the group); causal with
// rows that see no key; RoPE (half-split and interleaved, partial); ALiBi.
// Tolerances, relative to each gradient's size: the kernel rounds P and dS to 16 bits
// for the tensor cores, uses the 16-bit o for D = rowsum(dO o O), and rounds each output
// once; every gradient element is a sum of products each off by a few u (u = 2^-8 for
// bfloat16, 2^-11 for float16) with independent signs. So RMS(err) <= 4u RMS(ref) and
// max|err| <= 12u max|ref| (0.016 / 0.047 for bfloat16; 0.002 / 0.006 for float16); a
// missing scale, a wrong sign or a dropped tile is off by O(1).
template <class T>
void CheckBackward(CudaDType dtype, double u) {
  struct BwCase {
    int64_t batch, sq, sk, hq, hkv, d;
    bool causal, rope, interleaved, alibi;
  };
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<float> unif(-1.0f, 1.0f);
  auto to16 = [](float x) {
    if constexpr (std::is_same_v<T, seq::BFloat16>)
      return seq::ToBFloat16(x);
    else
      return seq::ToFloat16(x);
  };
  auto widen = [](const std::vector<T>& x) {
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = seq::ToFloat(x[i]);
    return y;
  };
  for (const BwCase& c : {BwCase{1, 1, 1, 1, 1, 64, false, false, false, false},
                          BwCase{2, 63, 64, 4, 2, 64, true, true, false, false},
                          BwCase{1, 65, 130, 2, 1, 128, true, false, false, true},
                          BwCase{1, 130, 70, 4, 4, 128, false, true, true, false},
                          BwCase{1, 100, 40, 2, 1, 64, true, false, false, false}}) {
    SCOPED_TRACE(::testing::Message() << "b" << c.batch << " sq" << c.sq << " sk" << c.sk << " h"
                                      << c.hq << "/" << c.hkv << " d" << c.d << " causal "
                                      << c.causal << " rope " << c.rope << " alibi " << c.alibi);
    std::vector<T> q(c.batch * c.sq * c.hq * c.d), k(c.batch * c.sk * c.hkv * c.d), v(k.size()),
        d_o(q.size());
    for (auto* t : {&q, &k, &v, &d_o}) {
      for (T& x : *t) x = to16(unif(rng));
    }
    AttentionArgs args = test::Bshd(c.batch, c.sq, c.sk, c.hq, c.hkv, c.d);
    args.causal = c.causal;
    seq::RopeOptions ro;
    ro.head_dim = c.d;
    ro.rotary_dim = c.d / 2;
    if (c.interleaved) ro.pairing = seq::PlanePairing::kInterleaved;
    absl::StatusOr<seq::Rope> rope =
        seq::Rope::Create(ro, *seq::DefaultRopeFrequencies(ro.rotary_dim));
    ASSERT_TRUE(rope.ok()) << rope.status();
    RopeRowTransform tq(*rope), tk(*rope, seq::RopeRole::kKey);
    if (c.rope) {
      args.q_transform = &tq;
      args.k_transform = &tk;
    }
    absl::StatusOr<seq::AlibiBias> alibi =
        seq::AlibiBias::CreateStandard(c.hq, seq::AlibiForm::kCausal);
    ASSERT_TRUE(alibi.ok());
    if (c.alibi) args.biases = {&*alibi};
    const std::vector<double> qd = widen(q), kd = widen(k), vd = widen(v), dod = widen(d_o);
    std::vector<double> want_dq(qd.size()), want_dk(kd.size()), want_dv(vd.size());
    ASSERT_TRUE(ReferenceBackward<double>(args, qd.data(), kd.data(), vd.data(), dod.data(),
                                          want_dq.data(), want_dk.data(), want_dv.data())
                    .ok());
    absl::StatusOr<seq::cuda::RopeCuda> grope = seq::cuda::RopeCuda::Create(*rope);
    ASSERT_TRUE(grope.ok()) << grope.status();
    std::vector<float> slopes(alibi->slopes().begin(), alibi->slopes().end());
    const T nan16 = to16(std::nanf(""));
    DeviceVector<T> dq_in(q), dk_in(k), dv_in(v), ddo(d_o), dout(std::vector<T>(q.size(), nan16)),
        gq(std::vector<T>(q.size(), nan16)), gk(std::vector<T>(k.size(), nan16)),
        gv(std::vector<T>(v.size(), nan16));
    DeviceVector<float> dlse(std::vector<float>(c.batch * c.sq * c.hq, 0.0f)), dslopes(slopes);
    CudaAttentionBackwardArgs b;
    CudaAttentionArgs& g = b.forward;
    g.kernel = CudaAttentionKernel::kTensorCore;
    g.dtype = dtype;
    g.batch = c.batch;
    g.seq_q = c.sq;
    g.seq_k = c.sk;
    g.heads_q = c.hq;
    g.heads_kv = c.hkv;
    g.head_dim = c.d;
    g.q = dq_in.p;
    g.k = dk_in.p;
    g.v = dv_in.p;
    g.o = dout.p;
    g.lse = dlse.p;
    g.sq = g.so = CudaStrides{c.sq * c.hq * c.d, c.hq * c.d, c.d};
    g.sk = g.sv = CudaStrides{c.sk * c.hkv * c.d, c.hkv * c.d, c.d};
    g.causal = c.causal;
    if (c.rope) g.rope = &*grope;
    if (c.alibi) g.alibi_slopes = dslopes.p;
    absl::Status st = CudaAttentionForward(g, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    b.d_o = ddo.p;
    b.dq = gq.p;
    b.dk = gk.p;
    b.dv = gv.p;
    // Both backward configurations (attention_mma_bwd.cu: 0 the default, 1).
    for (const int config : {0, 1}) {
      g.mma_config = config;
      SCOPED_TRACE(::testing::Message() << "backward config " << config);
      gq.Set(std::vector<T>(q.size(), nan16));
      gk.Set(std::vector<T>(k.size(), nan16));
      gv.Set(std::vector<T>(v.size(), nan16));
      const auto work = AttachWorkspace(&b, 0xFF);
      st = CudaAttentionBackward(b, nullptr);
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (const auto& [got16, want, name] :
           {std::tuple{gq.Get(), &want_dq, "dq"}, std::tuple{gk.Get(), &want_dk, "dk"},
            std::tuple{gv.Get(), &want_dv, "dv"}}) {
        double max_ref = 0, sq_ref = 0, max_err = 0, sq_err = 0;
        for (size_t i = 0; i < want->size(); ++i) {
          const double w = (*want)[i], e = seq::ToFloat(got16[i]) - w;
          ASSERT_FALSE(std::isnan(e)) << name << " " << i << " not written";
          max_ref = std::max(max_ref, std::abs(w));
          sq_ref += w * w;
          max_err = std::max(max_err, std::abs(e));
          sq_err += e * e;
        }
        EXPECT_LE(max_err, 12 * u * max_ref + 1e-6) << name;
        EXPECT_LE(std::sqrt(sq_err), 4 * u * std::sqrt(sq_ref) + 1e-6) << name;
      }
    }
  }
}

TEST(CudaAttention, TensorCoreBackwardBf16MatchesTheReference) {
  SKIP_WITHOUT_GPU();
  CheckBackward<seq::BFloat16>(CudaDType::kBFloat16, 0x1p-8);
}

TEST(CudaAttention, TensorCoreBackwardFp16MatchesTheReference) {
  SKIP_WITHOUT_GPU();
  CheckBackward<seq::Float16>(CudaDType::kFloat16, 0x1p-11);
}

TEST(CudaAttention, RejectsBadInput) {
  SKIP_WITHOUT_GPU();
  std::vector<float> host(64, 0.0f);
  DeviceVector<float> d(host);
  CudaAttentionArgs g;
  g.batch = 1;
  g.seq_q = g.seq_k = 1;
  g.heads_q = 3;
  g.heads_kv = 2;  // not a divisor
  g.head_dim = 16;
  g.q = g.k = g.v = d.p;
  g.o = d.p + 16;
  EXPECT_EQ(CudaAttentionForward(g, nullptr).code(), absl::StatusCode::kInvalidArgument);
  g.heads_q = g.heads_kv = 1;
  g.head_dim = 512;
  EXPECT_EQ(CudaAttentionForward(g, nullptr).code(), absl::StatusCode::kInvalidArgument);
  g.head_dim = 16;
  g.q = host.data();  // host memory
  EXPECT_EQ(CudaAttentionForward(g, nullptr).code(), absl::StatusCode::kInvalidArgument);
  g.q = d.p;
  g.softmax_scale = std::nan("");
  EXPECT_EQ(CudaAttentionForward(g, nullptr).code(), absl::StatusCode::kInvalidArgument);
  g.softmax_scale = 0.0;
  g.kernel = CudaAttentionKernel::kTensorCore;  // float32 is not a tensor-core dtype here
  const absl::Status tc = CudaAttentionForward(g, nullptr);
  EXPECT_EQ(tc.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tc.message().find("bfloat16 or float16"), std::string::npos) << tc;
}

// The backward's own arguments, checked before any launch: d_o / dq / dk / dv 16-byte
// aligned like q, k, v, o (a misaligned one faulted, ending the CUDA context), and a
// packed batch's token counts covering its sequences (tokens_q left 0 under
// max_seq_q > 0 collapsed the workspace sections and left dq unwritten).
TEST(CudaAttention, BackwardRejectsMisalignedOutputsAndShortTokenCounts) {
  SKIP_WITHOUT_GPU();
  const int64_t s = 64, d = 64;
  std::vector<seq::BFloat16> host(s * d + 64, seq::ToBFloat16(0.1f));
  DeviceVector<seq::BFloat16> q(host), k(host), v(host), o(host), go(host), dq(host), dk(host),
      dv(host);
  DeviceVector<float> lse(std::vector<float>(s, 0.0f));
  CudaAttentionBackwardArgs b;
  b.forward = OneBf16Head(s, d, q.p, k.p, v.p, o.p, lse.p);
  CudaAttentionArgs& g = b.forward;
  b.d_o = go.p + 4;  // 8 bytes off
  b.dq = dq.p;
  b.dk = dk.p;
  b.dv = dv.p;
  const auto work = AttachWorkspace(&b);
  absl::Status st = CudaAttentionBackward(b, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("16-byte aligned"), std::string::npos) << st;
  b.d_o = go.p;
  // Packed: one sequence of 64 queries and keys, tokens_q left 0.
  DeviceVector<int64_t> cu(std::vector<int64_t>{0, s});
  g.batch = 0;
  g.cu_seqlens_q = g.cu_seqlens_k = cu.p;
  g.num_seqs = 1;
  g.max_seq_q = s;
  g.sq = g.sk = g.sv = g.so = CudaStrides{0, d, d};
  b.tokens_q = 0;
  b.tokens_k = s;
  b.max_seq_k = s;
  st = CudaAttentionBackward(b, nullptr);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("tokens_q >= max_seq_q"), std::string::npos) << st;
}

// A backward with keys but no queries: the kernels have no key block to run, and dk and
// dv are zero (the reference's), not left as they were. Padded (two sequences, the second
// 48 tokens on) and packed.
TEST(CudaAttention, BackwardWithoutQueriesZeroesDkAndDv) {
  SKIP_WITHOUT_GPU();
  const int64_t s = 64, d = 64;
  std::vector<seq::BFloat16> host(2 * s * d, seq::ToBFloat16(0.5f));
  DeviceVector<seq::BFloat16> q(host), k(host), v(host), o(host), go(host);
  DeviceVector<float> lse(std::vector<float>(1, 0.0f));
  for (bool packed : {false, true}) {
    DeviceVector<seq::BFloat16> dq(host), dk(host), dv(host);
    DeviceVector<int64_t> cu_q(std::vector<int64_t>{0, 0}), cu_k(std::vector<int64_t>{0, s});
    CudaAttentionBackwardArgs b;
    b.forward = OneBf16Head(s, d, q.p, k.p, v.p, o.p, lse.p);
    CudaAttentionArgs& g = b.forward;
    g.seq_q = 0;
    if (packed) {
      g.batch = 0;
      g.cu_seqlens_q = cu_q.p;
      g.cu_seqlens_k = cu_k.p;
      g.num_seqs = 1;
      g.max_seq_q = 0;
      g.sq = g.sk = g.sv = g.so = CudaStrides{0, d, d};
      b.tokens_q = 0;
      b.tokens_k = s;
      b.max_seq_k = s;
    } else {
      g.batch = 2;
      g.seq_k = 48;  // rows 48..63 of the first sequence's stride lie outside: untouched
    }
    b.d_o = go.p;
    b.dq = dq.p;
    b.dk = dk.p;
    b.dv = dv.p;
    const auto work = AttachWorkspace(&b);
    const absl::Status st = CudaAttentionBackward(b, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (const auto* grad : {&dk, &dv}) {
      const std::vector<seq::BFloat16> got = grad->Get();
      for (int64_t i = 0; i < 2 * s * d; ++i) {
        // Padded: sequence b's rows t < 48 at b * s * d + t * d; everything else kept.
        const int64_t b_seq = i / (s * d), t = (i % (s * d)) / d;
        const bool written = packed ? i < s * d : t < 48 && b_seq < 2;
        const float want = written ? 0.0f : 0.5f;
        ASSERT_EQ(seq::ToFloat(got[i]), want) << (packed ? "packed " : "padded ") << i;
      }
    }
  }
}

// A row with a NaN score has lse NaN (not -inf, which means "no allowed key"), on both
// kernels, as the reference.
TEST(CudaAttention, NaNRowsHaveNaNLse) {
  SKIP_WITHOUT_GPU();
  const int64_t s = 16, d = 64;
  for (CudaAttentionKernel kernel : {CudaAttentionKernel::kSimt, CudaAttentionKernel::kTensorCore}) {
    std::vector<seq::BFloat16> qh(s * d, seq::ToBFloat16(0.1f)), kh(qh);
    qh[3 * d + 5] = seq::ToBFloat16(std::nanf(""));  // row 3
    DeviceVector<seq::BFloat16> q(qh), k(kh), v(kh), o(kh);
    DeviceVector<float> lse(std::vector<float>(s, 0.0f));
    CudaAttentionArgs g = OneBf16Head(s, d, q.p, k.p, v.p, o.p, lse.p);
    g.causal = true;
    g.kernel = kernel;
    ASSERT_TRUE(CudaAttentionForward(g, nullptr).ok());
    const std::vector<float> got = lse.Get();
    for (int64_t r = 0; r < s; ++r) EXPECT_EQ(std::isnan(got[r]), r == 3) << r << " " << got[r];
  }
}

// A NaN row in the backward: NaN reaches dk and dv of the keys that row may attend to and
// no others (masked keys take no part, descriptor.h "NON-FINITE VALUES"); the row's lse
// is NaN, which made P and dS of its masked entries NaN too.
TEST(CudaAttention, BackwardNaNRowReachesOnlyItsAllowedKeys) {
  SKIP_WITHOUT_GPU();
  const int64_t s = 16, d = 64;
  std::vector<seq::BFloat16> qh(s * d, seq::ToBFloat16(0.1f)), kh(qh);
  qh[3 * d + 5] = seq::ToBFloat16(std::nanf(""));  // row 3 (position 3: keys 0..3)
  DeviceVector<seq::BFloat16> q(qh), k(kh), v(kh), o(kh), go(kh), dq(kh), dk(kh), dv(kh);
  DeviceVector<float> lse(std::vector<float>(s, 0.0f));
  CudaAttentionBackwardArgs b;
  b.forward = OneBf16Head(s, d, q.p, k.p, v.p, o.p, lse.p);
  b.forward.causal = true;
  ASSERT_TRUE(CudaAttentionForward(b.forward, nullptr).ok());
  b.d_o = go.p;
  b.dq = dq.p;
  b.dk = dk.p;
  b.dv = dv.p;
  const auto work = AttachWorkspace(&b);
  const absl::Status st = CudaAttentionBackward(b, nullptr);
  ASSERT_TRUE(st.ok()) << st;
  for (const auto* grad : {&dk, &dv}) {
    const std::vector<seq::BFloat16> got = grad->Get();
    for (int64_t j = 0; j < s; ++j) {
      bool any_nan = false;
      for (int64_t c = 0; c < d; ++c) any_nan = any_nan || std::isnan(seq::ToFloat(got[j * d + c]));
      EXPECT_EQ(any_nan, j <= 3) << (grad == &dk ? "dk" : "dv") << " row " << j;
    }
  }
}

// The float32 SIMT forward with a first allowed score of -inf (a float q.k overflowing):
// that key has probability 0 and the row stays finite, as in the reference (exp2(-inf -
// -inf) made it NaN). Row 0: q 1e19 everywhere against key 0's -1e19 (score -inf in
// float) and keys 1..3's 0.1 (scores ~8e17, equal): o_0 is the mean of v_1..v_3.
TEST(CudaAttention, SimtFirstScoreMinusInfinityGivesProbabilityZero) {
  SKIP_WITHOUT_GPU();
  const int64_t s = 4, d = 64;
  std::vector<float> qh(s * d, 0.1f), kh(s * d, 0.1f), vh(s * d);
  for (int64_t c = 0; c < d; ++c) {
    qh[c] = 1e19f;
    kh[c] = -1e19f;
  }
  for (int64_t i = 0; i < s * d; ++i) vh[i] = static_cast<float>(i / d + 1);  // row j: j + 1
  DeviceVector<float> q(qh), k(kh), v(vh), o(std::vector<float>(s * d, 0.0f));
  DeviceVector<float> lse(std::vector<float>(s, 0.0f));
  CudaAttentionArgs g;
  g.kernel = CudaAttentionKernel::kSimt;
  g.dtype = CudaDType::kFloat32;
  g.batch = 1;
  g.seq_q = g.seq_k = s;
  g.heads_q = g.heads_kv = 1;
  g.head_dim = d;
  g.sq = g.sk = g.sv = g.so = CudaStrides{s * d, d, d};
  g.q = q.p;
  g.k = k.p;
  g.v = v.p;
  g.o = o.p;
  g.lse = lse.p;
  ASSERT_TRUE(CudaAttentionForward(g, nullptr).ok());
  const std::vector<float> got = o.Get();
  for (int64_t c = 0; c < d; ++c) {
    ASSERT_FALSE(std::isnan(got[c])) << c;
    EXPECT_NEAR(got[c], 3.0f, 1e-5f) << c;  // (2 + 3 + 4) / 3
  }
}

}  // namespace
}  // namespace gpe::attention::cuda
