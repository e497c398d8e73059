// RopeCuda against the CPU Rope (rope.h), which the CPU tests check against the
// published formulas. Skips with a message where no GPU is present.
#include "encodings/sequence/cuda/rope_cuda.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace gpe::encodings::sequence::cuda {
namespace {

#define SKIP_WITHOUT_GPU()                                                              \
  do {                                                                                  \
    std::string why;                                                                    \
    if (CudaDeviceCount(&why) == 0) {                                                   \
      GTEST_SKIP() << "no CUDA device (" << why << "): the RoPE kernel is built for "   \
                   << "sm_80/sm_90 but cannot run on this machine";                     \
    }                                                                                   \
  } while (0)

// A device buffer holding a copy of a host vector.
template <class T>
struct DeviceVector {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceVector(const std::vector<T>& h) : n(h.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> Get() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  ~DeviceVector() { cudaFree(p); }
};

Rope MakeRope(int64_t head_dim, int64_t rotary_dim, PlanePairing pairing, bool yarn,
              std::vector<int> plane_axes = {}, int num_axes = 1) {
  RopeOptions o;
  o.head_dim = head_dim;
  o.rotary_dim = rotary_dim;
  o.pairing = pairing;
  o.plane_axes = std::move(plane_axes);
  o.num_axes = num_axes;
  absl::StatusOr<RopeFrequencies> f = DefaultRopeFrequencies(rotary_dim, 10000.0);
  EXPECT_TRUE(f.ok());
  if (yarn) f->attention_factor = 1.2079441541679836;  // YaRN's 0.1 ln 8 + 1, a non-trivial m
  absl::StatusOr<Rope> r = Rope::Create(o, *f);
  EXPECT_TRUE(r.ok()) << r.status();
  return *std::move(r);
}

struct Case {
  int64_t tokens, heads_q, heads_k, head_dim, rotary_dim;
  PlanePairing pairing;
  bool yarn;
};

// float32 on the GPU against the CPU's float32 Rope on the same positions, q and k in
// one launch. The CPU rounds cos/sin once from double; the GPU rounds the reduced angle
// to float32 (<= 2e-7 rad) and its sincosf adds <= 2 ulp, so cos/sin differ by <= 5e-7
// and outputs (|x| m below ~6) by <= 6e-6: 8e-6 absolute.
TEST(RopeCuda, Float32MatchesTheCpuRope) {
  SKIP_WITHOUT_GPU();
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int64_t> pos(0, (int64_t{1} << 31) - 1);
  // Tokens below, at and above one block's reuse; heads_k 0 (q only), GQA; partial rotary.
  for (const Case& c : {Case{1, 1, 0, 64, 64, PlanePairing::kHalfSplit, false},
                        Case{37, 4, 2, 64, 32, PlanePairing::kInterleaved, true},
                        Case{300, 8, 1, 128, 128, PlanePairing::kHalfSplit, true},
                        Case{5, 3, 3, 80, 48, PlanePairing::kHalfSplit, false},
                        // The scalar fallback: a 66-float head is not 16-byte aligned.
                        Case{9, 2, 2, 66, 6, PlanePairing::kHalfSplit, false}}) {
    SCOPED_TRACE(::testing::Message() << "tokens " << c.tokens << " heads " << c.heads_q << "/"
                                      << c.heads_k << " d " << c.head_dim << " r " << c.rotary_dim);
    const Rope rope = MakeRope(c.head_dim, c.rotary_dim, c.pairing, c.yarn);
    absl::StatusOr<RopeCuda> gpu = RopeCuda::Create(rope);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    std::vector<int64_t> positions(c.tokens);
    for (int64_t& p : positions) p = pos(rng);
    positions[0] = (int64_t{1} << 31) - 1;
    // Past 2^53 (the kernels split the position: reduced_angle.cuh).
    if (c.tokens > 2) positions[1] = (int64_t{1} << 53) + 1, positions[2] = (int64_t{1} << 62) + 999;
    std::vector<float> q(c.tokens * c.heads_q * c.head_dim), k(c.tokens * c.heads_k * c.head_dim);
    for (float& x : q) x = normal(rng);
    for (float& x : k) x = normal(rng);
    DeviceVector<int64_t> dpos(positions);
    DeviceVector<float> dq(q), dk(k), dqo(std::vector<float>(q.size(), 0.0f));
    RopeKernelTensor tq{dq.p, dqo.p, c.heads_q, c.heads_q * c.head_dim, c.head_dim};  // out of place
    RopeKernelTensor tk{dk.p, dk.p, c.heads_k, c.heads_k * c.head_dim, c.head_dim};   // in place
    ASSERT_TRUE(gpu->Apply(RopeDType::kFloat32, c.tokens, dpos.p, tq,
                           c.heads_k > 0 ? &tk : nullptr, false, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (int role = 0; role < (c.heads_k > 0 ? 2 : 1); ++role) {
      const int64_t heads = role == 0 ? c.heads_q : c.heads_k;
      const std::vector<float>& x = role == 0 ? q : k;
      std::vector<float> want(x.size());
      const RopeTensor t = RopeTensor::Contiguous(RopeLayout::kBSHD, 1, c.tokens, heads, c.head_dim);
      ASSERT_TRUE(rope.Forward(t, RopePositions{positions, {}}, x.data(), want.data()).ok());
      const std::vector<float> got = role == 0 ? dqo.Get() : dk.Get();
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 8e-6) << (role == 0 ? "q" : "k") << " element " << i;
      }
    }
    // Backward undoes forward (R(-a) R(a) = I, m^2 for the attention factor): in place.
    ASSERT_TRUE(gpu->Apply(RopeDType::kFloat32, c.tokens, dpos.p,
                           RopeKernelTensor{dqo.p, dqo.p, c.heads_q, c.heads_q * c.head_dim, c.head_dim},
                           nullptr, true, nullptr).ok());
    const std::vector<float> back = dqo.Get();
    const float m2 = static_cast<float>(rope.attention_factor() * rope.attention_factor());
    for (size_t i = 0; i < q.size(); ++i) {
      const int64_t col = static_cast<int64_t>(i) % c.head_dim;
      const float want = col < c.rotary_dim ? q[i] * m2 : q[i];
      ASSERT_NEAR(back[i], want, 1e-5) << "element " << i;
    }
  }
}

// bfloat16 and float16: the float32 result rounded once; the GPU's and the CPU's float32
// intermediates differ by a few float32 ulps, which can flip one rounding: at most 1 ulp
// of the 16-bit type, which is <= |w| 2^-7 for bfloat16 and <= |w| 2^-10 for float16.
// Shapes on both kernels: 16-byte vectors (d64 half-split, d64 r48 interleaved) and the
// scalar fallback (d36 r12: a head is 72 bytes, not a multiple of 16).
TEST(RopeCuda, SixteenBitTypesRoundOnce) {
  SKIP_WITHOUT_GPU();
  for (const auto& [d, rot, pairing] :
       {std::tuple{int64_t{64}, int64_t{64}, PlanePairing::kHalfSplit},
        std::tuple{int64_t{64}, int64_t{48}, PlanePairing::kInterleaved},
        std::tuple{int64_t{36}, int64_t{12}, PlanePairing::kHalfSplit}}) {
    SCOPED_TRACE(::testing::Message() << "d " << d << " r " << rot);
    const Rope rope = MakeRope(d, rot, pairing, false);
    absl::StatusOr<RopeCuda> gpu = RopeCuda::Create(rope);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    const int64_t tokens = 19, heads = 2, n = tokens * heads * d;
    std::vector<int64_t> positions(tokens);
    for (int64_t t = 0; t < tokens; ++t) positions[t] = 1000000 + 7 * t;
    std::mt19937_64 rng(9);
    std::normal_distribution<float> normal;
    std::vector<BFloat16> xb(n);
    std::vector<Float16> xh(n);
    for (int64_t i = 0; i < n; ++i) {
      xb[i] = ToBFloat16(normal(rng));
      xh[i] = ToFloat16(normal(rng));
    }
    DeviceVector<int64_t> dpos(positions);
    const RopeTensor t = RopeTensor::Contiguous(RopeLayout::kBSHD, 1, tokens, heads, d);
    {
      DeviceVector<BFloat16> dev(xb);
      ASSERT_TRUE(gpu->Apply(RopeDType::kBFloat16, tokens, dpos.p,
                             RopeKernelTensor{dev.p, dev.p, heads, heads * d, d}, nullptr, false,
                             nullptr)
                      .ok());
      std::vector<BFloat16> want(n);
      ASSERT_TRUE(rope.Forward(t, RopePositions{positions, {}}, xb.data(), want.data()).ok());
      const std::vector<BFloat16> got = dev.Get();
      for (int64_t i = 0; i < n; ++i) {
        const float w = ToFloat(want[i]);
        ASSERT_NEAR(ToFloat(got[i]), w, std::abs(w) * 0x1p-7f + 1e-30f) << "bf16 element " << i;
      }
    }
    {
      DeviceVector<Float16> dev(xh);
      ASSERT_TRUE(gpu->Apply(RopeDType::kFloat16, tokens, dpos.p,
                             RopeKernelTensor{dev.p, dev.p, heads, heads * d, d}, nullptr, false,
                             nullptr)
                      .ok());
      std::vector<Float16> want(n);
      ASSERT_TRUE(rope.Forward(t, RopePositions{positions, {}}, xh.data(), want.data()).ok());
      const std::vector<Float16> got = dev.Get();
      for (int64_t i = 0; i < n; ++i) {
        const float w = ToFloat(want[i]);
        ASSERT_NEAR(ToFloat(got[i]), w, std::abs(w) * 0x1p-10f + 0x1p-24f) << "fp16 element " << i;
      }
    }
  }
}

// M-RoPE sections [2, 3, 3] over 3 axes: positions [3, tokens].
TEST(RopeCuda, MultiAxisPositions) {
  SKIP_WITHOUT_GPU();
  std::vector<int> axes;
  for (int a = 0, i = 0; a < 3; ++a) {
    for (int s = 0; s < (a == 0 ? 2 : 3); ++s, ++i) axes.push_back(a);
  }
  const Rope rope = MakeRope(16, 16, PlanePairing::kHalfSplit, false, axes, 3);
  absl::StatusOr<RopeCuda> gpu = RopeCuda::Create(rope);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const int64_t tokens = 11;
  std::vector<int64_t> ids(3 * tokens);
  for (int64_t i = 0; i < 3 * tokens; ++i) ids[i] = (i * 37) % 29 - 3;
  std::vector<float> x(tokens * 16);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3f * static_cast<float>(i));
  DeviceVector<int64_t> dpos(ids);
  DeviceVector<float> d(x);
  ASSERT_TRUE(gpu->Apply(RopeDType::kFloat32, tokens, dpos.p, RopeKernelTensor{d.p, d.p, 1, 16, 16},
                         nullptr, false, nullptr).ok());
  std::vector<float> want(x.size());
  const RopeTensor t = RopeTensor::Contiguous(RopeLayout::kBSHD, 1, tokens, 1, 16);
  ASSERT_TRUE(rope.Forward(t, RopePositions{ids, {}}, x.data(), want.data()).ok());
  const std::vector<float> got = d.Get();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(got[i], want[i], 8e-6) << i;  // as above
}

TEST(RopeCuda, RejectsBadInput) {
  SKIP_WITHOUT_GPU();
  const Rope rope = MakeRope(8, 8, PlanePairing::kHalfSplit, false);
  absl::StatusOr<RopeCuda> gpu = RopeCuda::Create(rope);
  ASSERT_TRUE(gpu.ok());
  std::vector<float> host(8, 1.0f);
  std::vector<int64_t> hpos = {0};
  DeviceVector<int64_t> dpos(hpos);
  DeviceVector<float> d(host);
  // Host memory where device memory is needed.
  absl::Status s = gpu->Apply(RopeDType::kFloat32, 1, hpos.data(),
                              RopeKernelTensor{d.p, d.p, 1, 8, 8}, nullptr, false, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = gpu->Apply(RopeDType::kFloat32, 1, dpos.p, RopeKernelTensor{host.data(), host.data(), 1, 8, 8},
                 nullptr, false, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  s = gpu->Apply(RopeDType::kFloat32, -1, dpos.p, RopeKernelTensor{d.p, d.p, 1, 8, 8}, nullptr,
                 false, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  // Overlapping out-of-place views.
  s = gpu->Apply(RopeDType::kFloat32, 1, dpos.p, RopeKernelTensor{d.p, d.p + 1, 1, 8, 8}, nullptr,
                 false, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  RopeOptions o = rope.options();
  o.xpos.enabled = true;
  absl::StatusOr<Rope> xpos = Rope::Create(o, RopeFrequencies{{rope.thetas().begin(), rope.thetas().end()}, 1.0});
  ASSERT_TRUE(xpos.ok());
  EXPECT_EQ(RopeCuda::Create(*xpos).status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace gpe::encodings::sequence::cuda
