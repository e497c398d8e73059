// gpe_attention_* on CUDA tensors through the CUDA plugin (libgpe_cuda.so, found through
// GPE_CUDA_PLUGIN), against the float64 reference of the same C ABI on the CPU. Without a
// GPU the plugin loads and the call says so (GPE_ERROR_UNSUPPORTED); with one, the
// forward and backward run on the device for each layout the C ABI describes (padded
// with strided outputs, packed with index arrays on the device and on the CPU), with
// RoPE by rope_dim and by a gpe_rope handle (YaRN, whose attention factor the kernel
// applies), ALiBi, GQA, causal masks, explicit positions, on a stream of the caller's.
// The kernels themselves are tested against the C++ reference in
// attention/cuda/cuda_attention_test; this test is the C ABI's plumbing around them.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "c_api/include/gpe/gpe.h"
#include "c_api/test_util.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::HasMessage;

int DeviceCount() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

#define SKIP_WITHOUT_GPU()                                                                \
  do {                                                                                    \
    if (DeviceCount() == 0) {                                                             \
      GTEST_SKIP() << "no CUDA device: the plugin is built for sm_80/sm_90 but cannot run " \
                   << "on this machine";                                                  \
    }                                                                                     \
  } while (0)

enum class Type { kBf16, kF16, kF32 };

int Bits(Type t) { return t == Type::kF32 ? 32 : 16; }
DLDataTypeCode Code(Type t) { return t == Type::kBf16 ? kDLBfloat : kDLFloat; }

// x exactly representable in every type used (k / 128, |k| <= 128), or NaN (the
// sentinel of unwritten outputs): its bit pattern.
uint16_t ToHalfBits(float x) {
  if (std::isnan(x)) return 0x7E00;
  if (x == 0.0f) return 0;
  int e = 0;
  const double m = std::frexp(std::fabs(x), &e);  // |x| = m 2^e, m in [0.5, 1)
  const uint16_t sign = x < 0 ? 0x8000 : 0;
  const auto mant = static_cast<uint16_t>(std::lround((2.0 * m - 1.0) * 1024.0));
  return static_cast<uint16_t>(sign | ((e - 1 + 15) << 10) | mant);
}
float FromHalfBits(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  if (e == 31) {
    return m != 0 ? std::nanf("") : (h & 0x8000) ? -INFINITY : INFINITY;
  }
  const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                           : std::ldexp(1.0f + m / 1024.0f, e - 15);
  return (h & 0x8000) ? -mag : mag;
}

// Host values in a device buffer of one type.
struct DeviceArray {
  void* p = nullptr;
  Type type;
  size_t n;
  DeviceArray(Type t, const std::vector<float>& host) : type(t), n(host.size()) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * Bits(t) / 8), cudaSuccess);
    Upload(host);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(p); }
  void Upload(const std::vector<float>& host) {
    if (type == Type::kF32) {
      EXPECT_EQ(cudaMemcpy(p, host.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
      return;
    }
    std::vector<uint16_t> bits(n);
    for (size_t i = 0; i < n; ++i) {
      uint32_t u;
      std::memcpy(&u, &host[i], 4);
      bits[i] = type == Type::kBf16 ? static_cast<uint16_t>(u >> 16) : ToHalfBits(host[i]);
    }
    EXPECT_EQ(cudaMemcpy(p, bits.data(), n * 2, cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<float> Download() const {
    std::vector<float> out(n);
    if (type == Type::kF32) {
      EXPECT_EQ(cudaMemcpy(out.data(), p, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      return out;
    }
    std::vector<uint16_t> bits(n);
    EXPECT_EQ(cudaMemcpy(bits.data(), p, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < n; ++i) {
      const uint32_t u = static_cast<uint32_t>(bits[i]) << 16;
      if (type == Type::kBf16) {
        std::memcpy(&out[i], &u, 4);
      } else {
        out[i] = FromHalfBits(bits[i]);
      }
    }
    return out;
  }
};

// A DLTensor over device or host memory with explicit strides (elements).
DLTensor View(void* data, DLDeviceType device, DLDataTypeCode code, int bits,
              std::vector<int64_t>* shape, std::vector<int64_t>* strides) {
  DLTensor t{};
  t.data = data;
  t.device = {device, 0};
  t.ndim = static_cast<int32_t>(shape->size());
  t.dtype = {static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
  t.shape = shape->data();
  t.strides = strides != nullptr ? strides->data() : nullptr;
  return t;
}

// Compact strides of a shape.
std::vector<int64_t> Compact(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size() - 1; i-- > 0;) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

// Values k / 128, k uniform in [-128, 128): exact in bfloat16, float16 and float32.
std::vector<float> Exact(size_t n, std::mt19937_64* rng) {
  std::uniform_int_distribution<int> u(-128, 127);
  std::vector<float> x(n);
  for (float& e : x) e = static_cast<float>(u(*rng)) / 128.0f;
  return x;
}

// max |got - want| and the RMS of the difference over the entries of a strided
// [outer, tokens, heads, dim] tensor (got read through `strides`, want compact).
struct Errors {
  double max = 0, rms = 0;
};
Errors Compare(const std::vector<float>& got, const std::vector<int64_t>& strides,
               const std::vector<double>& want, const std::vector<int64_t>& shape) {
  Errors e;
  const std::vector<int64_t> cs = Compact(shape);
  double sq = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    int64_t rest = static_cast<int64_t>(i), off = 0;
    for (size_t a = 0; a < shape.size(); ++a) {
      off += rest / cs[a] * strides[a];
      rest %= cs[a];
    }
    const double d = std::fabs(got[off] - want[i]);
    if (!(d <= e.max)) e.max = d;  // NaN propagates
    sq += d * d;
  }
  e.rms = want.empty() ? 0 : std::sqrt(sq / want.size());
  return e;
}

std::vector<double> ToDouble(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// One call: shapes, dtype, encodings; the q / k / v values are drawn from the seed.
struct Case {
  std::string name;
  Type type;
  bool packed;
  int64_t batch, sq, sk;              // padded
  std::vector<int64_t> cu_q, cu_k;    // packed
  bool cu_on_device, positions;       // packed: cu_seqlens_q on the device; explicit positions
  int64_t hq, hkv, d;
  bool causal;
  int rope;  // 0 none, 1 rope_dim (interleaved), 2 a gpe_rope handle (YaRN, factor 4)
  int alibi;  // 0 none, 1 causal form, 2 symmetric
};

// The forward of a case on the device (o strided inside a wider buffer for padded
// layouts) against the float64 reference; returns the options' owned handles' status.
class PluginTest : public ::testing::TestWithParam<Case> {};

// Tolerances as attention/cuda/cuda_attention_test (inputs in [-1, 1)): max 0.03 / RMS
// 0.004 for bfloat16, 0.004 / 0.0006 for float16 (16-bit q, k, P and o roundings); the
// float32 SIMT kernel rounds only in float32 sums: 1e-4 and 1e-5.
void Tolerances(Type t, double* max, double* rms) {
  *max = t == Type::kBf16 ? 0.03 : t == Type::kF16 ? 0.004 : 1e-4;
  *rms = t == Type::kBf16 ? 0.004 : t == Type::kF16 ? 0.0006 : 1e-5;
}

struct Encodings {
  gpe_rope* rope = nullptr;
  gpe_bias* bias = nullptr;
  ~Encodings() {
    gpe_rope_destroy(rope);
    gpe_bias_destroy(bias);
  }
  void Set(const Case& c, gpe_attention_options* o) {
    if (c.rope == 1) {
      o->rope_dim = c.d;
      o->rope_pairing = GPE_PAIRING_INTERLEAVED;
    } else if (c.rope == 2) {
      gpe_rope_options ro = GPE_ROPE_OPTIONS_INIT;
      ro.head_dim = c.d;
      ro.schedule = GPE_ROPE_YARN;
      ro.factor = 4.0;
      ro.original_max_position = 64;
      ASSERT_EQ(gpe_rope_create(&ro, &rope), GPE_OK) << gpe_last_error_message();
      o->rope = rope;
    }
    if (c.alibi != 0) {
      gpe_alibi_options ao = GPE_ALIBI_OPTIONS_INIT;
      ao.num_heads = c.hq;
      ao.form = c.alibi == 1 ? GPE_ALIBI_CAUSAL : GPE_ALIBI_SYMMETRIC;
      ASSERT_EQ(gpe_bias_create_alibi(&ao, &bias), GPE_OK) << gpe_last_error_message();
      o->bias = bias;
    }
  }
};

TEST(CudaPlugin, LoadsAndSaysWhenThereIsNoGpu) {
  if (DeviceCount() > 0) GTEST_SKIP() << "a GPU is present: the cases below run";
  std::vector<int64_t> shape{1, 8, 2, 64};
  DLTensor q = View(reinterpret_cast<void*>(0x10000000), kDLCUDA, kDLBfloat, 16, &shape, nullptr);
  DLTensor k = q, v = q, o = q;
  k.data = reinterpret_cast<void*>(0x10100000);
  v.data = reinterpret_cast<void*>(0x10200000);
  o.data = reinterpret_cast<void*>(0x10300000);
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  ASSERT_EQ(gpe_attention_forward(&opt, &q, &k, &v, &o, nullptr), GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("no usable CUDA device")) << gpe_last_error_message();
}

TEST_P(PluginTest, ForwardAndBackwardMatchTheReference) {
  SKIP_WITHOUT_GPU();
  const Case& c = GetParam();
  std::mt19937_64 rng(7);
  const int64_t tq = c.packed ? c.cu_q.back() : c.batch * c.sq;
  const int64_t tk = c.packed ? c.cu_k.back() : c.batch * c.sk;
  std::vector<int64_t> qshape, kshape;
  if (c.packed) {
    qshape = {tq, c.hq, c.d};
    kshape = {tk, c.hkv, c.d};
  } else {
    qshape = {c.batch, c.sq, c.hq, c.d};
    kshape = {c.batch, c.sk, c.hkv, c.d};
  }
  const std::vector<float> qh = Exact(tq * c.hq * c.d, &rng), kh = Exact(tk * c.hkv * c.d, &rng),
                           vh = Exact(tk * c.hkv * c.d, &rng), gh = Exact(tq * c.hq * c.d, &rng);
  std::vector<int64_t> qst = Compact(qshape), kst = Compact(kshape);
  // o (and d_o) padded: tokens two rows of heads apart, the second left unused.
  std::vector<int64_t> ost = qst;
  if (!c.packed) {
    ost = {c.sq * 2 * c.hq * c.d, 2 * c.hq * c.d, c.d, 1};
  }
  const size_t on = c.packed ? qh.size() : qh.size() * 2;
  DeviceArray q(c.type, qh), k(c.type, kh), v(c.type, vh),
      o(c.type, std::vector<float>(on, std::nanf(""))), d_o(c.type, std::vector<float>(on, 0.0f));
  {
    // d_o laid out like o.
    std::vector<float> g(on, 0.0f);
    const std::vector<int64_t> cs = Compact(qshape);
    for (size_t i = 0; i < gh.size(); ++i) {
      int64_t rest = static_cast<int64_t>(i), off = 0;
      for (size_t a = 0; a < qshape.size(); ++a) {
        off += rest / cs[a] * ost[a];
        rest %= cs[a];
      }
      g[off] = gh[i];
    }
    d_o.Upload(g);
  }
  DeviceArray lse(Type::kF32, std::vector<float>(tq * c.hq, std::nanf("")));
  std::vector<int64_t> lshape{tq, c.hq};
  DLTensor tq_ = View(q.p, kDLCUDA, Code(c.type), Bits(c.type), &qshape, &qst);
  DLTensor tk_ = View(k.p, kDLCUDA, Code(c.type), Bits(c.type), &kshape, &kst);
  DLTensor tv_ = View(v.p, kDLCUDA, Code(c.type), Bits(c.type), &kshape, &kst);
  DLTensor to_ = View(o.p, kDLCUDA, Code(c.type), Bits(c.type), &qshape, &ost);
  DLTensor tg_ = View(d_o.p, kDLCUDA, Code(c.type), Bits(c.type), &qshape, &ost);
  DLTensor tl_ = View(lse.p, kDLCUDA, kDLFloat, 32, &lshape, nullptr);

  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  opt.causal = c.causal ? 1 : 0;
  Encodings enc;
  enc.Set(c, &opt);
  ASSERT_EQ(c.rope == 2, opt.rope != nullptr) << "the gpe_rope was not created";
  ASSERT_EQ(c.alibi != 0, opt.bias != nullptr) << "the ALiBi bias was not created";
  // Index arrays: cu_seqlens_q on the device or the CPU, cu_seqlens_k on the CPU, positions
  // (keys 3 apart, queries at the last keys of their sequence, backwards) on the device.
  std::vector<int64_t> cu_q = c.cu_q, cu_k = c.cu_k, pos_q(tq), pos_k(tk);
  std::vector<int64_t> cu_shape{static_cast<int64_t>(cu_q.size())}, pq_shape{tq}, pk_shape{tk};
  std::vector<float> unused;
  int64_t* dev_cu_q = nullptr;
  int64_t* dev_pos = nullptr;
  DLTensor tcq, tck, tpq, tpk;
  if (c.packed) {
    if (c.cu_on_device) {
      ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev_cu_q), cu_q.size() * 8), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(dev_cu_q, cu_q.data(), cu_q.size() * 8, cudaMemcpyHostToDevice),
                cudaSuccess);
      tcq = View(dev_cu_q, kDLCUDA, kDLInt, 64, &cu_shape, nullptr);
    } else {
      tcq = View(cu_q.data(), kDLCPU, kDLInt, 64, &cu_shape, nullptr);
    }
    tck = View(cu_k.data(), kDLCPU, kDLInt, 64, &cu_shape, nullptr);
    opt.cu_seqlens_q = &tcq;
    opt.cu_seqlens_k = &tck;
  }
  if (c.positions) {
    const int64_t seqs = c.packed ? static_cast<int64_t>(cu_q.size()) - 1 : c.batch;
    for (int64_t s = 0; s < seqs; ++s) {
      const int64_t q0 = c.packed ? cu_q[s] : s * c.sq, q1 = c.packed ? cu_q[s + 1] : q0 + c.sq;
      const int64_t k0 = c.packed ? cu_k[s] : s * c.sk, k1 = c.packed ? cu_k[s + 1] : k0 + c.sk;
      for (int64_t j = k0; j < k1; ++j) pos_k[j] = 3 * (j - k0) + 5;
      for (int64_t i = q0; i < q1; ++i) pos_q[i] = 3 * (k1 - k0 - 1 - (i - q0)) + 5;
    }
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev_pos), (tq + tk) * 8 + 8), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dev_pos, pos_q.data(), tq * 8, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dev_pos + tq, pos_k.data(), tk * 8, cudaMemcpyHostToDevice), cudaSuccess);
    tpq = View(dev_pos, kDLCUDA, kDLInt, 64, &pq_shape, nullptr);
    tpk = View(dev_pos + tq, kDLCUDA, kDLInt, 64, &pk_shape, nullptr);
    opt.q_positions = &tpq;
    opt.k_positions = &tpk;
  }
  // The uploads above (cudaMemcpy from pageable memory, on the legacy stream) may still be
  // landing when cudaMemcpy returns: wait for them before the calls' own stream runs.
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  opt.cuda_stream = stream;

  ASSERT_EQ(gpe_attention_forward(&opt, &tq_, &tk_, &tv_, &to_, &tl_), GPE_OK)
      << gpe_last_error_message();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

  // The reference: the same options over float64 copies on the CPU (index arrays there).
  gpe_attention_options ref = opt;
  ref.cuda_stream = nullptr;
  DLTensor rcq, rpq, rpk;
  if (c.packed) {
    rcq = View(cu_q.data(), kDLCPU, kDLInt, 64, &cu_shape, nullptr);
    ref.cu_seqlens_q = &rcq;
  }
  if (c.positions) {
    rpq = View(pos_q.data(), kDLCPU, kDLInt, 64, &pq_shape, nullptr);
    rpk = View(pos_k.data(), kDLCPU, kDLInt, 64, &pk_shape, nullptr);
    ref.q_positions = &rpq;
    ref.k_positions = &rpk;
  }
  std::vector<double> q64 = ToDouble(qh), k64 = ToDouble(kh), v64 = ToDouble(vh),
                      g64 = ToDouble(gh), o64(qh.size()), l64(tq * c.hq);
  std::vector<double> dq64(qh.size()), dk64(kh.size()), dv64(vh.size());
  DLTensor rq = View(q64.data(), kDLCPU, kDLFloat, 64, &qshape, nullptr);
  DLTensor rk = View(k64.data(), kDLCPU, kDLFloat, 64, &kshape, nullptr);
  DLTensor rv = View(v64.data(), kDLCPU, kDLFloat, 64, &kshape, nullptr);
  DLTensor ro = View(o64.data(), kDLCPU, kDLFloat, 64, &qshape, nullptr);
  DLTensor rg = View(g64.data(), kDLCPU, kDLFloat, 64, &qshape, nullptr);
  DLTensor rl = View(l64.data(), kDLCPU, kDLFloat, 64, &lshape, nullptr);
  DLTensor rdq = View(dq64.data(), kDLCPU, kDLFloat, 64, &qshape, nullptr);
  DLTensor rdk = View(dk64.data(), kDLCPU, kDLFloat, 64, &kshape, nullptr);
  DLTensor rdv = View(dv64.data(), kDLCPU, kDLFloat, 64, &kshape, nullptr);
  ASSERT_EQ(gpe_attention_forward(&ref, &rq, &rk, &rv, &ro, &rl), GPE_OK)
      << gpe_last_error_message();

  double max_tol, rms_tol;
  Tolerances(c.type, &max_tol, &rms_tol);
  const Errors eo = Compare(o.Download(), ost, o64, qshape);
  EXPECT_LE(eo.max, max_tol) << c.name << ": o";
  EXPECT_LE(eo.rms, rms_tol) << c.name << ": o";
  const std::vector<float> lse_got = lse.Download();
  for (size_t i = 0; i < l64.size(); ++i) {
    if (std::isinf(l64[i])) {
      EXPECT_EQ(lse_got[i], l64[i]) << c.name << ": lse " << i;  // a row with no key
    } else {
      ASSERT_NEAR(lse_got[i], l64[i], max_tol) << c.name << ": lse " << i;
    }
  }
  if (c.type == Type::kF32) return;  // the backward takes 16-bit tensors

  // The backward against the reference's: twice, with the forward's o and lse and
  // recomputing them, dk not asked for in the second.
  ASSERT_EQ(gpe_attention_backward(&ref, &rq, &rk, &rv, &ro, &rl, &rg, &rdq, &rdk, &rdv), GPE_OK)
      << gpe_last_error_message();
  // Tolerances as cuda_attention_test's backward: RMS(err) <= 4u RMS(ref) and max|err| <=
  // 12u max|ref|, u = 2^-8 (bfloat16) or 2^-11 (float16).
  const double u = c.type == Type::kBf16 ? 1.0 / 256 : 1.0 / 2048;
  auto check = [&](const DeviceArray& got, const std::vector<int64_t>& strides,
                   const std::vector<double>& want, const std::vector<int64_t>& shape,
                   const char* what) {
    double mx = 0, sq = 0;
    for (double w : want) {
      mx = std::max(mx, std::fabs(w));
      sq += w * w;
    }
    const double rms = std::sqrt(sq / std::max<size_t>(want.size(), 1));
    const Errors e = Compare(got.Download(), strides, want, shape);
    EXPECT_LE(e.max, 12 * u * mx + 1e-6) << c.name << ": " << what;
    EXPECT_LE(e.rms, 4 * u * rms + 1e-7) << c.name << ": " << what;
  };
  for (int pass = 0; pass < 2; ++pass) {
    DeviceArray dq(c.type, std::vector<float>(qh.size(), std::nanf(""))),
        dk(c.type, std::vector<float>(kh.size(), std::nanf(""))),
        dv(c.type, std::vector<float>(vh.size(), std::nanf("")));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the NaN fills have landed
    DLTensor tdq = View(dq.p, kDLCUDA, Code(c.type), Bits(c.type), &qshape, &qst);
    DLTensor tdk = View(dk.p, kDLCUDA, Code(c.type), Bits(c.type), &kshape, &kst);
    DLTensor tdv = View(dv.p, kDLCUDA, Code(c.type), Bits(c.type), &kshape, &kst);
    const bool given = pass == 0;
    ASSERT_EQ(gpe_attention_backward(&opt, &tq_, &tk_, &tv_, given ? &to_ : nullptr,
                                     given ? &tl_ : nullptr, &tg_, &tdq,
                                     given ? &tdk : nullptr, &tdv),
              GPE_OK)
        << c.name << " pass " << pass << ": " << gpe_last_error_message();
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    check(dq, qst, dq64, qshape, given ? "dq" : "dq (o and lse recomputed)");
    if (given) check(dk, kst, dk64, kshape, "dk");
    check(dv, kst, dv64, kshape, given ? "dv" : "dv (o and lse recomputed)");
  }
  cudaStreamDestroy(stream);
  cudaFree(dev_cu_q);
  cudaFree(dev_pos);
}

// RoPE through gpe_rope_forward / _backward on CUDA tensors against the same call in
// float64 on the CPU: a padded batch whose sequences are not one token stride apart (one
// launch per sequence), sbhd with offsets on the device (one launch in memory order),
// thd with cu_seqlens on the device and a YaRN schedule, M-RoPE with [3, tokens]
// position_ids on the device, one token per sequence (one launch over the batch). Tolerances: the
// output's rounding to the type (|y| <= sqrt(2) for inputs in [-1, 1), so 2^-8 sqrt(2) for
// bfloat16, 2^-11 sqrt(2) for float16) plus float32 sin / cos of angles reduced in double
// (~1e-7); 2e-5 for float32.
struct RopeCase {
  std::string name;
  Type type;
  int32_t layout;  // GPE_ROPE_LAYOUT_*
  int64_t batch, seq, heads, dim;
  bool backward;
  int extra;  // 0: none, 1: offsets on the device, 2: cu_seqlens on the device + YaRN,
              // 3: M-RoPE with position_ids on the device
};

class PluginRopeTest : public ::testing::TestWithParam<RopeCase> {};

TEST_P(PluginRopeTest, MatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  const RopeCase& c = GetParam();
  std::mt19937_64 rng(11);
  gpe_rope_options ro = GPE_ROPE_OPTIONS_INIT;
  ro.head_dim = c.dim;
  const int64_t sections[] = {8, 12, 12};
  if (c.extra == 2) {
    ro.schedule = GPE_ROPE_YARN;
    ro.factor = 4.0;
    ro.original_max_position = 16;
  } else if (c.extra == 3) {
    ro.axes = GPE_ROPE_AXES_MROPE;
    ro.mrope_sections = sections;
    ro.num_mrope_sections = 3;
  }
  gpe_rope* rope = nullptr;
  ASSERT_EQ(gpe_rope_create(&ro, &rope), GPE_OK) << gpe_last_error_message();
  const bool thd = c.layout == GPE_ROPE_LAYOUT_THD;
  std::vector<int64_t> cu = {0, 5, 5, c.seq};
  const int64_t tokens = thd ? c.seq : c.batch * c.seq;
  std::vector<int64_t> shape, strides;
  size_t elements;
  if (thd) {
    shape = {c.seq, c.heads, c.dim};
    strides = Compact(shape);
    elements = static_cast<size_t>(tokens * c.heads * c.dim);
  } else if (c.layout == GPE_ROPE_LAYOUT_BSHD) {
    // Sequences two sequences' rows apart: not one token stride apart.
    shape = {c.batch, c.seq, c.heads, c.dim};
    strides = {2 * c.seq * c.heads * c.dim, c.heads * c.dim, c.dim, 1};
    elements = static_cast<size_t>(2 * c.batch * c.seq * c.heads * c.dim);
  } else {
    shape = {c.seq, c.batch, c.heads, c.dim};
    strides = Compact(shape);
    elements = static_cast<size_t>(tokens * c.heads * c.dim);
  }
  const std::vector<float> xh = Exact(elements, &rng);
  DeviceArray x(c.type, xh), out(c.type, std::vector<float>(elements, std::nanf("")));
  // Index arrays, on the host for the reference and on the device for the call.
  std::vector<int64_t> offsets = {0, 5, 100}, ids;
  if (c.extra == 3) {
    for (int64_t a = 0; a < 3; ++a) {
      for (int64_t t = 0; t < tokens; ++t) ids.push_back((a + 1) * t + 3 * a);
    }
  }
  std::vector<int64_t> host_index = c.extra == 1 ? offsets : c.extra == 2 ? cu : ids;
  int64_t* dev_index = nullptr;
  if (!host_index.empty()) {
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dev_index), host_index.size() * 8),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dev_index, host_index.data(), host_index.size() * 8,
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<int64_t> ishape = c.extra == 3 ? std::vector<int64_t>{3, tokens}
                                             : std::vector<int64_t>{
                                                   static_cast<int64_t>(host_index.size())};
  DLTensor dev_t = View(dev_index, kDLCUDA, kDLInt, 64, &ishape, nullptr);
  DLTensor host_t = View(host_index.data(), kDLCPU, kDLInt, 64, &ishape, nullptr);
  gpe_rope_tokens tok = GPE_ROPE_TOKENS_INIT, ref = GPE_ROPE_TOKENS_INIT;
  tok.layout = ref.layout = c.layout;
  const DLTensor** slot = c.extra == 1 ? &tok.offsets : c.extra == 2 ? &tok.cu_seqlens
                                                                      : &tok.position_ids;
  const DLTensor** ref_slot = c.extra == 1 ? &ref.offsets : c.extra == 2 ? &ref.cu_seqlens
                                                                          : &ref.position_ids;
  if (c.extra != 0) {
    *slot = &dev_t;
    *ref_slot = &host_t;
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  tok.cuda_stream = stream;
  DLTensor tx = View(x.p, kDLCUDA, Code(c.type), Bits(c.type), &shape, &strides);
  DLTensor to = View(out.p, kDLCUDA, Code(c.type), Bits(c.type), &shape, &strides);
  const gpe_status st = c.backward ? gpe_rope_backward(rope, &tok, &tx, &to)
                                   : gpe_rope_forward(rope, &tok, &tx, &to);
  ASSERT_EQ(st, GPE_OK) << c.name << ": " << gpe_last_error_message();
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  std::vector<double> x64 = ToDouble(xh), y64(elements, 0.0);
  DLTensor rx = View(x64.data(), kDLCPU, kDLFloat, 64, &shape, &strides);
  DLTensor ry = View(y64.data(), kDLCPU, kDLFloat, 64, &shape, &strides);
  ASSERT_EQ(c.backward ? gpe_rope_backward(rope, &ref, &rx, &ry)
                       : gpe_rope_forward(rope, &ref, &rx, &ry),
            GPE_OK)
      << gpe_last_error_message();
  // Compare the rows the call covers (a padded batch's gaps are never written).
  std::vector<double> want;
  std::vector<int64_t> cs = Compact(shape);
  const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1},
                                    std::multiplies<int64_t>());
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, off = 0;
    for (size_t a = 0; a < shape.size(); ++a) {
      off += rest / cs[a] * strides[a];
      rest %= cs[a];
    }
    want.push_back(y64[off]);
  }
  const double tol = c.type == Type::kBf16 ? 0.0056 : c.type == Type::kF16 ? 0.0007 : 2e-5;
  const Errors e = Compare(out.Download(), strides, want, shape);
  EXPECT_LE(e.max, tol) << c.name;
  cudaStreamDestroy(stream);
  cudaFree(dev_index);
  gpe_rope_destroy(rope);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, PluginRopeTest,
    ::testing::Values(RopeCase{"bshd_two_launches_bf16", Type::kBf16, GPE_ROPE_LAYOUT_BSHD, 2, 33,
                               4, 64, false, 0},
                      RopeCase{"sbhd_offsets_f16_backward", Type::kF16, GPE_ROPE_LAYOUT_SBHD, 3,
                               20, 2, 128, true, 1},
                      RopeCase{"thd_yarn_f32", Type::kF32, GPE_ROPE_LAYOUT_THD, 0, 40, 3, 64,
                               false, 2},
                      RopeCase{"mrope_bf16", Type::kBf16, GPE_ROPE_LAYOUT_BSHD, 1, 24, 2, 64,
                               false, 3},
                      // One token per sequence, sequences not one token stride apart: one
                      // launch over the batch (offsets on the device).
                      RopeCase{"bshd_decode_f32", Type::kF32, GPE_ROPE_LAYOUT_BSHD, 3, 1, 4,
                               128, false, 1}),
    [](const ::testing::TestParamInfo<RopeCase>& p) { return p.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Layouts, PluginTest,
    ::testing::Values(
        // Padded, queries the last 37 of 77 keys, GQA 4 / 2, RoPE by rope_dim, causal ALiBi.
        Case{"bf16_padded", Type::kBf16, false, 2, 37, 77, {}, {}, false, false, 4, 2, 64,
             true, 1, 1},
        // Packed (sequences of 0, 5, 70 queries over 3, 1, 90 keys), positions on the
        // device, cu_seqlens_q there too, YaRN by handle, symmetric ALiBi, not causal.
        Case{"f16_packed", Type::kF16, true, 0, 0, 0, {0, 0, 5, 75}, {0, 3, 4, 94}, true, true,
             4, 4, 128, false, 2, 2},
        // As above, causal, cu_seqlens on the CPU, bfloat16, GQA 8 / 2.
        Case{"bf16_packed_causal", Type::kBf16, true, 0, 0, 0, {0, 0, 5, 75}, {0, 3, 4, 94},
             false, true, 8, 2, 64, true, 2, 0},
        // float32 on the SIMT kernel (head_dim 48: no tensor-core tile), causal, RoPE.
        Case{"f32_padded_simt", Type::kF32, false, 1, 20, 33, {}, {}, false, false, 2, 1, 48,
             true, 1, 0}),
    [](const ::testing::TestParamInfo<Case>& p) { return p.param.name; });

}  // namespace
