// gpe_attention_* on tensors that claim a CUDA device, where no CUDA plugin loads (the
// test's environment points GPE_CUDA_PLUGIN at a file that does not exist): the call is
// checked like a CPU call, the options the CUDA kernels lack are refused by name, and
// what remains reports the missing plugin as GPE_ERROR_UNSUPPORTED. Nothing here
// dereferences the tensors' (fake) device addresses: a test that crashed would show it.
#include <cstdint>
#include <cstddef>
#include <string>
#include <vector>

#include "c_api/include/gpe/gpe.h"
#include "c_api/test_util.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::HasMessage;

// A bshd [1, 8, heads, 64] tensor at a fake device address (never read).
struct FakeTensor {
  std::vector<int64_t> shape;
  DLTensor t{};
  FakeTensor(uintptr_t address, int64_t heads, DLDataTypeCode code = kDLBfloat, int bits = 16,
             int64_t tokens = 8, int64_t dim = 64)
      : shape{1, tokens, heads, dim} {
    t.data = reinterpret_cast<void*>(address);
    t.device = {kDLCUDA, 0};
    t.ndim = 4;
    t.dtype = {static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
    t.shape = shape.data();
  }
};

class CudaDispatchTest : public ::testing::Test {
 protected:
  // Disjoint fake ranges, 1 MiB apart.
  FakeTensor q{0x10000000, 4}, k{0x10100000, 2}, v{0x10200000, 2}, o{0x10300000, 4};
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;

  gpe_status Forward() { return gpe_attention_forward(&opt, &q.t, &k.t, &v.t, &o.t, nullptr); }
};

TEST_F(CudaDispatchTest, MissingPluginIsUnsupportedWithTheWayOut) {
  ASSERT_EQ(Forward(), GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("libgpe_cuda.so")) << gpe_last_error_message();
  EXPECT_TRUE(HasMessage("GPE_CUDA_PLUGIN")) << gpe_last_error_message();
  // Loading is retried by later calls, with the same answer.
  EXPECT_EQ(Forward(), GPE_ERROR_UNSUPPORTED);
}

TEST_F(CudaDispatchTest, TensorsOnTwoDevicesAreRefused) {
  k.t.device = {kDLCPU, 0};
  EXPECT_EQ(Forward(), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("every tensor of a call is on one device")) << gpe_last_error_message();
  k.t.device = {kDLCUDA, 1};
  EXPECT_EQ(Forward(), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("k is on DLPack device type 2, id 1")) << gpe_last_error_message();
}

TEST_F(CudaDispatchTest, MixedDtypesAreRefused) {
  // float16 k under bfloat16 q: the CPU's checks see float16 as bfloat16, so the real
  // dtypes are compared first.
  k.t.dtype = {kDLFloat, 16, 1};
  EXPECT_EQ(Forward(), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("k and q differ in dtype")) << gpe_last_error_message();
  k.t.dtype = {kDLBfloat, 16, 1};
  o.t.dtype = {kDLFloat, 16, 1};
  EXPECT_EQ(Forward(), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("o and q differ in dtype")) << gpe_last_error_message();
}

TEST_F(CudaDispatchTest, ShapesAreCheckedAsOnTheCpu) {
  FakeTensor bad_o{0x10300000, 4, kDLBfloat, 16, /*tokens=*/7};
  EXPECT_EQ(gpe_attention_forward(&opt, &q.t, &k.t, &v.t, &bad_o.t, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("o must have the dtype and shape")) << gpe_last_error_message();
  FakeTensor three_heads{0x10000000, 3};
  EXPECT_NE(gpe_attention_forward(&opt, &three_heads.t, &k.t, &v.t, &o.t, nullptr), GPE_OK);
  // o overlapping q.
  FakeTensor on_q{0x10000000 + 64, 4};
  EXPECT_EQ(gpe_attention_forward(&opt, &q.t, &k.t, &v.t, &on_q.t, nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
}

TEST_F(CudaDispatchTest, OptionsTheKernelsLackAreRefusedByName) {
  struct Case {
    const char* name;
    void (*set)(gpe_attention_options*);
  } cases[] = {
      {"window", [](gpe_attention_options* o) { o->window = 1; }},
      {"softcap", [](gpe_attention_options* o) { o->softcap = 30.0; }},
      {"rope_axes", [](gpe_attention_options* o) {
         o->rope_dim = 64;
         o->rope_axes = 2;
       }},
      {"bf16_arithmetic", [](gpe_attention_options* o) { o->bf16_arithmetic = 3; }},
      {"float32_arithmetic", [](gpe_attention_options* o) { o->float32_arithmetic = 1; }},
  };
  for (const Case& c : cases) {
    gpe_attention_options o = GPE_ATTENTION_OPTIONS_INIT;
    c.set(&o);
    EXPECT_EQ(gpe_attention_forward(&o, &q.t, &k.t, &v.t, &this->o.t, nullptr),
              GPE_ERROR_UNSUPPORTED)
        << c.name;
    EXPECT_TRUE(HasMessage(c.name)) << c.name << ": " << gpe_last_error_message();
    EXPECT_TRUE(HasMessage("not available for tensors on a CUDA device")) << c.name;
  }
  // An out-of-range arithmetic is bad input on any device, not "not on CUDA".
  {
    gpe_attention_options bad = GPE_ATTENTION_OPTIONS_INIT;
    bad.float32_arithmetic = 9;
    EXPECT_EQ(gpe_attention_forward(&bad, &q.t, &k.t, &v.t, &this->o.t, nullptr),
              GPE_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(HasMessage("float32_arithmetic must be")) << gpe_last_error_message();
  }
  // A T5 bias (ALiBi is the one bias the CUDA kernels apply).
  std::vector<double> table(32 * 4, 0.5);
  gpe_t5_options t5 = GPE_T5_OPTIONS_INIT;
  t5.num_heads = 4;
  t5.table = table.data();
  gpe_bias* bias = nullptr;
  ASSERT_EQ(gpe_bias_create_t5(&t5, &bias), GPE_OK) << gpe_last_error_message();
  opt.bias = bias;
  EXPECT_EQ(Forward(), GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("a bias other than ALiBi")) << gpe_last_error_message();
  gpe_bias_destroy(bias);
  // An older caller's struct (0.9.0's, before cuda_stream) is read as before.
  opt = GPE_ATTENTION_OPTIONS_INIT;
  opt.struct_size = static_cast<uint32_t>(offsetof(gpe_attention_options, cuda_stream));
  EXPECT_EQ(Forward(), GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("libgpe_cuda.so")) << gpe_last_error_message();
}

TEST_F(CudaDispatchTest, RopeHandlesTheKernelsLackAreRefused) {
  gpe_rope_options ro = GPE_ROPE_OPTIONS_INIT;
  ro.head_dim = 64;
  ro.xpos = 1;
  gpe_rope* xpos = nullptr;
  ASSERT_EQ(gpe_rope_create(&ro, &xpos), GPE_OK) << gpe_last_error_message();
  opt.rope = xpos;
  EXPECT_EQ(Forward(), GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("xPos")) << gpe_last_error_message();
  gpe_rope_destroy(xpos);
  ro = GPE_ROPE_OPTIONS_INIT;
  ro.head_dim = 64;
  ro.axes = GPE_ROPE_AXES_AXIAL;
  ro.num_axes = 2;
  gpe_rope* axial = nullptr;
  ASSERT_EQ(gpe_rope_create(&ro, &axial), GPE_OK) << gpe_last_error_message();
  opt.rope = axial;
  EXPECT_EQ(Forward(), GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("multi-axis gpe_rope")) << gpe_last_error_message();
  gpe_rope_destroy(axial);
}

TEST_F(CudaDispatchTest, KvCachesAndOtherHeadSizesInTheBackwardAreUnsupported) {
  FakeTensor q32{0x10000000, 4, kDLFloat, 32}, o32{0x10300000, 4, kDLFloat, 32};
  EXPECT_EQ(gpe_attention_forward(&opt, &q32.t, &k.t, &v.t, &o32.t, nullptr),
            GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("a 16-bit KV cache")) << gpe_last_error_message();
  FakeTensor q48{0x10000000, 4, kDLBfloat, 16, 8, 48}, k48{0x10100000, 2, kDLBfloat, 16, 8, 48},
      v48{0x10200000, 2, kDLBfloat, 16, 8, 48}, g48{0x10300000, 4, kDLBfloat, 16, 8, 48},
      dq48{0x10400000, 4, kDLBfloat, 16, 8, 48};
  EXPECT_EQ(gpe_attention_backward(&opt, &q48.t, &k48.t, &v48.t, nullptr, nullptr, &g48.t,
                                   &dq48.t, nullptr, nullptr),
            GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("head_dim 48")) << gpe_last_error_message();
}

TEST_F(CudaDispatchTest, PackedOffsetsAreValidatedAsOnTheCpu) {
  // cu_seqlens ending past q's 8 tokens: the kernels would read and write beyond q and o.
  std::vector<int64_t> q_shape{8, 4, 64}, k_shape{8, 2, 64};
  q.t.ndim = k.t.ndim = v.t.ndim = o.t.ndim = 3;
  q.t.shape = o.t.shape = q_shape.data();
  k.t.shape = v.t.shape = k_shape.data();
  std::vector<int64_t> cu_bad{0, 20}, cu_k{0, 8}, shape{2};
  DLTensor cq = gpe::c_api_test::Tensor(cu_bad.data(), kDLInt, 64, &shape);
  DLTensor ck = gpe::c_api_test::Tensor(cu_k.data(), kDLInt, 64, &shape);
  opt.cu_seqlens_q = &cq;
  opt.cu_seqlens_k = &ck;
  EXPECT_EQ(Forward(), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("cu_seqlens")) << gpe_last_error_message();
  // Valid offsets go on to the (missing) plugin.
  cu_bad = {0, 8};
  EXPECT_EQ(Forward(), GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("libgpe_cuda.so")) << gpe_last_error_message();
}

TEST_F(CudaDispatchTest, Float64AndFloat32BackwardAreRefused) {
  FakeTensor q64{0x10000000, 4, kDLFloat, 64}, k64{0x10100000, 2, kDLFloat, 64},
      v64{0x10200000, 2, kDLFloat, 64}, o64{0x10300000, 4, kDLFloat, 64};
  EXPECT_EQ(gpe_attention_forward(&opt, &q64.t, &k64.t, &v64.t, &o64.t, nullptr),
            GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("float64")) << gpe_last_error_message();
  FakeTensor q32{0x10000000, 4, kDLFloat, 32}, k32{0x10100000, 2, kDLFloat, 32},
      v32{0x10200000, 2, kDLFloat, 32}, g32{0x10300000, 4, kDLFloat, 32},
      dq32{0x10400000, 4, kDLFloat, 32};
  EXPECT_EQ(gpe_attention_backward(&opt, &q32.t, &k32.t, &v32.t, nullptr, nullptr, &g32.t,
                                   &dq32.t, nullptr, nullptr),
            GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("the backward in float32")) << gpe_last_error_message();
}

TEST_F(CudaDispatchTest, ParameterGradientsAreRefused) {
  FakeTensor d_o{0x10400000, 4}, dq{0x10500000, 4};
  std::vector<int64_t> shape{4};
  std::vector<double> store(4);
  DLTensor d_sinks = gpe::c_api_test::Tensor(store.data(), kDLFloat, 64, &shape);
  gpe_attention_param_grads g = GPE_ATTENTION_PARAM_GRADS_INIT;
  g.d_sinks = &d_sinks;
  EXPECT_EQ(gpe_attention_backward_with_parameters(&opt, &q.t, &k.t, &v.t, nullptr, nullptr,
                                                   &d_o.t, &dq.t, nullptr, nullptr, &g),
            GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("the gradients of an encoding's parameters")) << gpe_last_error_message();
  // Without them the call goes on to the plugin (missing here).
  g.d_sinks = nullptr;
  EXPECT_EQ(gpe_attention_backward_with_parameters(&opt, &q.t, &k.t, &v.t, nullptr, nullptr,
                                                   &d_o.t, &dq.t, nullptr, nullptr, &g),
            GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("libgpe_cuda.so")) << gpe_last_error_message();
}

// o and dq whose strides differ from d_o's and q's on the size-1 batch dimension only
// reach the plugin (as on the CPU: the same offsets); a token stride of o's own is refused.
TEST_F(CudaDispatchTest, StridesOfSizeOneDimensionsAreFree) {
  FakeTensor d_o{0x10400000, 4}, dq{0x10500000, 4};
  std::vector<int64_t> batch_zero{0, 4 * 64, 64, 1}, batch_odd{12345, 4 * 64, 64, 1};
  o.t.strides = batch_zero.data();
  dq.t.strides = batch_odd.data();
  std::vector<int64_t> lshape{8, 4};
  DLTensor lse{};
  lse.data = reinterpret_cast<void*>(0x10600000);
  lse.device = {kDLCUDA, 0};
  lse.ndim = 2;
  lse.dtype = {kDLFloat, 32, 1};
  lse.shape = lshape.data();
  EXPECT_EQ(gpe_attention_backward(&opt, &q.t, &k.t, &v.t, &o.t, &lse, &d_o.t, &dq.t, nullptr,
                                   nullptr),
            GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("libgpe_cuda.so")) << gpe_last_error_message();
  std::vector<int64_t> padded{8 * 4 * 128, 4 * 128, 128, 1};
  o.t.strides = padded.data();
  EXPECT_EQ(gpe_attention_backward(&opt, &q.t, &k.t, &v.t, &o.t, &lse, &d_o.t, &dq.t, nullptr,
                                   nullptr),
            GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("o and d_o must have the same strides")) << gpe_last_error_message();
  o.t.strides = nullptr;
}

TEST_F(CudaDispatchTest, IndexArraysOnTheCpuAreCheckedBeforeThePlugin) {
  std::vector<int64_t> pos(7), shape{7};
  for (int i = 0; i < 7; ++i) pos[i] = i;
  DLTensor qp = gpe::c_api_test::Tensor(pos.data(), kDLInt, 64, &shape);
  opt.q_positions = &qp;
  opt.k_positions = &qp;
  EXPECT_EQ(Forward(), GPE_ERROR_INVALID_ARGUMENT);  // 7 positions for 8 tokens
  EXPECT_TRUE(HasMessage("q_positions")) << gpe_last_error_message();
  // On another CUDA device than q's.
  std::vector<int64_t> shape8{8};
  DLTensor dev = gpe::c_api_test::Tensor(pos.data(), kDLInt, 64, &shape8);
  dev.device = {kDLCUDA, 3};
  opt.q_positions = &dev;
  opt.k_positions = &dev;
  EXPECT_EQ(Forward(), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("index arrays lie on the CPU or on the tensors' CUDA device")) << gpe_last_error_message();
}

// RoPE (gpe_rope_forward / _backward) on tensors claiming a CUDA device: checked as on the
// CPU, refused where the GPU lacks it, then the missing plugin.
TEST_F(CudaDispatchTest, RopeOnCudaTensorsIsCheckedThenNeedsThePlugin) {
  gpe_rope_options ro = GPE_ROPE_OPTIONS_INIT;
  ro.head_dim = 64;
  gpe_rope* rope = nullptr;
  ASSERT_EQ(gpe_rope_create(&ro, &rope), GPE_OK) << gpe_last_error_message();
  gpe_rope_tokens tok = GPE_ROPE_TOKENS_INIT;
  EXPECT_EQ(gpe_rope_forward(rope, &tok, &q.t, &o.t), GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("libgpe_cuda.so")) << gpe_last_error_message();
  // 0.3.0's smaller struct (before cuda_stream) is still read.
  tok.struct_size = static_cast<uint32_t>(offsetof(gpe_rope_tokens, cuda_stream));
  EXPECT_EQ(gpe_rope_backward(rope, &tok, &q.t, &o.t), GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("libgpe_cuda.so")) << gpe_last_error_message();
  tok = GPE_ROPE_TOKENS_INIT;
  // out on the CPU.
  std::vector<float> host(8 * 4 * 64);
  std::vector<int64_t> shape{1, 8, 4, 64};
  DLTensor cpu_out = gpe::c_api_test::Tensor(host.data(), kDLBfloat, 16, &shape);
  EXPECT_EQ(gpe_rope_forward(rope, &tok, &q.t, &cpu_out), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("one device")) << gpe_last_error_message();
  // Positions of the wrong length, on the CPU.
  std::vector<int64_t> pos(7, 0), pshape{7};
  DLTensor p = gpe::c_api_test::Tensor(pos.data(), kDLInt, 64, &pshape);
  tok.position_ids = &p;
  EXPECT_EQ(gpe_rope_forward(rope, &tok, &q.t, &o.t), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("position_ids")) << gpe_last_error_message();
  tok.position_ids = nullptr;
  // out of other strides than x's.
  std::vector<int64_t> strides{8 * 4 * 64 * 2, 4 * 64 * 2, 64, 1};
  FakeTensor wide{0x10300000, 4};
  wide.t.strides = strides.data();
  EXPECT_EQ(gpe_rope_forward(rope, &tok, &q.t, &wide.t), GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("has its strides")) << gpe_last_error_message();
  // Strides of its own on the size-1 batch dimension only: the same offsets, so the call
  // reaches the plugin.
  std::vector<int64_t> batch_only{0, 4 * 64, 64, 1};
  FakeTensor odd_batch{0x10300000, 4};
  odd_batch.t.strides = batch_only.data();
  EXPECT_EQ(gpe_rope_forward(rope, &tok, &q.t, &odd_batch.t), GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("libgpe_cuda.so")) << gpe_last_error_message();
  // float64.
  FakeTensor x64{0x10000000, 4, kDLFloat, 64}, o64{0x10300000, 4, kDLFloat, 64};
  EXPECT_EQ(gpe_rope_forward(rope, &tok, &x64.t, &o64.t), GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("float64")) << gpe_last_error_message();
  // Several axes without position ids (as the CPU refuses them).
  gpe_rope_options axial = GPE_ROPE_OPTIONS_INIT;
  axial.head_dim = 64;
  axial.axes = GPE_ROPE_AXES_AXIAL;
  axial.num_axes = 2;
  gpe_rope* arope = nullptr;
  ASSERT_EQ(gpe_rope_create(&axial, &arope), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(gpe_rope_forward(arope, &tok, &q.t, &o.t), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("explicit position ids")) << gpe_last_error_message();
  gpe_rope_destroy(arope);
  // Offsets whose positions overflow int64.
  std::vector<int64_t> big{INT64_MAX - 3}, bshape{1};
  DLTensor off = gpe::c_api_test::Tensor(big.data(), kDLInt, 64, &bshape);
  tok.offsets = &off;
  EXPECT_EQ(gpe_rope_forward(rope, &tok, &q.t, &o.t), GPE_ERROR_OUT_OF_RANGE);
  EXPECT_TRUE(HasMessage("overflows int64")) << gpe_last_error_message();
  tok.offsets = nullptr;
  gpe_rope_destroy(rope);
  // xPos.
  ro.xpos = 1;
  ASSERT_EQ(gpe_rope_create(&ro, &rope), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(gpe_rope_forward(rope, &tok, &q.t, &o.t), GPE_ERROR_UNSUPPORTED);
  EXPECT_TRUE(HasMessage("xPos")) << gpe_last_error_message();
  gpe_rope_destroy(rope);
}

}  // namespace
