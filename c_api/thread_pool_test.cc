// gpe_set_thread_pool through gpe.h only: every threaded entry point (attention forward,
// backward and decoding, RoPE's forward/backward and table build with num_threads > 1,
// the closed-form 2-D and 3-D fits) runs its parallel regions on an application's pool
// once one is installed, and gives the results of the built-in pool; bad pools are
// refused with a message.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "c_api/test_util.h"
#include "gpe/gpe.h"
#include "gtest/gtest.h"

namespace {

using gpe::c_api_test::HasMessage;
using gpe::c_api_test::Random;
using gpe::c_api_test::Tensor;

// An application's pool: each region's tasks go to `workers` threads it starts for the
// region, each taking indices from the end of the range down (the reverse of the
// built-in pool's order), so no result can lean on the built-in pool's scheduling.
struct AppPool {
  int workers = 3;
  std::atomic<int64_t> regions{0};
  std::atomic<int64_t> tasks{0};

  static void ParallelFor(void* self, int64_t n, gpe_pool_task task, void* ctx) {
    auto* p = static_cast<AppPool*>(self);
    p->regions.fetch_add(1);
    std::atomic<int64_t> next{n - 1};
    auto drain = [&] {
      for (int64_t i = next.fetch_sub(1); i >= 0; i = next.fetch_sub(1)) {
        p->tasks.fetch_add(1);
        task(ctx, i);
      }
    };
    std::vector<std::thread> threads;
    for (int w = 1; w < p->workers; ++w) threads.emplace_back(drain);
    drain();
    for (std::thread& t : threads) t.join();
  }

  gpe_thread_pool Options(int32_t num_threads) {
    gpe_thread_pool o = GPE_THREAD_POOL_INIT;
    o.num_threads = num_threads;
    o.user_data = this;
    o.parallel_for = &AppPool::ParallelFor;
    return o;
  }
};

// Restores the built-in pool however a test ends.
struct BuiltInPoolAtExit {
  ~BuiltInPoolAtExit() { EXPECT_EQ(gpe_set_thread_pool(nullptr), GPE_OK); }
};

std::vector<uint8_t> Bytes(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  return std::vector<uint8_t>(b, b + n);
}

// Attention forward (non-causal, causal with RoPE and GQA), decoding (one query row
// against a longer KV cache, which takes the split-key path) and the backward, with 3
// threads (an explicit count: decoding splits the keys by it, so both pools must see the
// same one). Returns o, lse, dq, dk, dv.
std::vector<std::vector<float>> RunAttention(int64_t seq_q, int64_t seq_k, int causal,
                                             int64_t rope_dim) {
  constexpr int64_t b = 1, h = 4, hk = 2, d = 32;
  std::mt19937_64 rng(20261127);
  auto draw = [&](int64_t n) {
    std::vector<double> v = Random(&rng, static_cast<size_t>(n), 0.5);
    return std::vector<float>(v.begin(), v.end());
  };
  std::vector<float> q = draw(b * seq_q * h * d), k = draw(b * seq_k * hk * d),
                     v = draw(b * seq_k * hk * d), d_o = draw(b * seq_q * h * d);
  std::vector<float> o(q.size()), lse(b * h * seq_q), dq(q.size()), dk(k.size()), dv(v.size());
  std::vector<int64_t> sq{b, seq_q, h, d}, sk{b, seq_k, hk, d}, sl{b * seq_q, h};
  DLTensor tq = Tensor(q.data(), kDLFloat, 32, &sq), tk = Tensor(k.data(), kDLFloat, 32, &sk),
           tv = Tensor(v.data(), kDLFloat, 32, &sk), to = Tensor(o.data(), kDLFloat, 32, &sq),
           tl = Tensor(lse.data(), kDLFloat, 32, &sl), tdo = Tensor(d_o.data(), kDLFloat, 32, &sq),
           tdq = Tensor(dq.data(), kDLFloat, 32, &sq), tdk = Tensor(dk.data(), kDLFloat, 32, &sk),
           tdv = Tensor(dv.data(), kDLFloat, 32, &sk);
  gpe_attention_options opt = GPE_ATTENTION_OPTIONS_INIT;
  opt.causal = causal;
  opt.rope_dim = rope_dim;
  opt.num_threads = 3;
  EXPECT_EQ(gpe_attention_forward(&opt, &tq, &tk, &tv, &to, &tl), GPE_OK)
      << gpe_last_error_message();
  if (seq_q > 1) {
    EXPECT_EQ(gpe_attention_backward(&opt, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv),
              GPE_OK)
        << gpe_last_error_message();
  }
  return {o, lse, dq, dk, dv};
}

// RoPE (YaRN) forward and backward over [2, 300, 4, 64] float32 with num_threads 4, and
// through a table built with the same options. Returns the outputs.
std::vector<std::vector<float>> RunRope() {
  constexpr int64_t b = 2, s = 300, h = 4, d = 64;
  std::mt19937_64 rng(7);
  std::vector<double> x64 = Random(&rng, b * s * h * d);
  std::vector<float> x(x64.begin(), x64.end()), y(x.size()), dx(x.size()), yt(x.size());
  std::vector<int64_t> shape{b, s, h, d};
  DLTensor tx = Tensor(x.data(), kDLFloat, 32, &shape), ty = Tensor(y.data(), kDLFloat, 32, &shape),
           tdx = Tensor(dx.data(), kDLFloat, 32, &shape),
           tyt = Tensor(yt.data(), kDLFloat, 32, &shape);
  gpe_rope_options o = GPE_ROPE_OPTIONS_INIT;
  o.head_dim = d;
  o.num_threads = 4;
  EXPECT_EQ(gpe_rope_options_use_schedule(GPE_ROPE_YARN, &o), GPE_OK);
  o.factor = 4.0;
  gpe_rope* rope = nullptr;
  EXPECT_EQ(gpe_rope_create(&o, &rope), GPE_OK) << gpe_last_error_message();
  gpe_rope_tokens tokens = GPE_ROPE_TOKENS_INIT;
  EXPECT_EQ(gpe_rope_forward(rope, &tokens, &tx, &ty), GPE_OK) << gpe_last_error_message();
  EXPECT_EQ(gpe_rope_backward(rope, &tokens, &ty, &tdx), GPE_OK) << gpe_last_error_message();
  gpe_rope_table* table = nullptr;
  EXPECT_EQ(gpe_rope_table_create(rope, &tokens, &tx, &table), GPE_OK)
      << gpe_last_error_message();
  EXPECT_EQ(gpe_rope_table_forward(table, &tx, &tyt), GPE_OK) << gpe_last_error_message();
  gpe_rope_table_destroy(table);
  gpe_rope_destroy(rope);
  return {y, dx, yt};
}

// The closed-form fits on grids large enough for the automatic share count to use the
// pool (K_y n_x >= 2^15): 2-D (float32 image products) and 3-D. Returns the weights.
std::vector<std::vector<double>> RunFits() {
  constexpr int64_t ny = 160, nx = 256, ky = 140, kx = 150;
  std::mt19937_64 rng(11);
  std::vector<double> psi_y = Random(&rng, ny * ky), psi_x = Random(&rng, nx * kx),
                      image = Random(&rng, ny * nx), w(ky * kx);
  std::vector<int64_t> spy{ny, ky}, spx{nx, kx}, si{ny, nx}, sw{ky, kx};
  DLTensor tpy = Tensor(psi_y.data(), kDLFloat, 64, &spy),
           tpx = Tensor(psi_x.data(), kDLFloat, 64, &spx),
           ti = Tensor(image.data(), kDLFloat, 64, &si), tw = Tensor(w.data(), kDLFloat, 64, &sw);
  gpe_separable_fit_options fo = GPE_SEPARABLE_FIT_OPTIONS_INIT;
  fo.lambda = 1e-3;
  fo.float32_image_products = 1;
  EXPECT_EQ(gpe_inr_fit_separable_2d(&fo, &tpy, &tpx, &ti, &tw), GPE_OK)
      << gpe_last_error_message();

  constexpr int64_t n0 = 40, n1 = 48, n2 = 56, k0 = 30, k1 = 36, k2 = 40;
  std::vector<double> p0 = Random(&rng, n0 * k0), p1 = Random(&rng, n1 * k1),
                      p2 = Random(&rng, n2 * k2), vol = Random(&rng, n0 * n1 * n2),
                      w3(k0 * k1 * k2);
  std::vector<int64_t> s0{n0, k0}, s1{n1, k1}, s2{n2, k2}, sv{n0, n1, n2}, sw3{k0, k1, k2};
  DLTensor t0 = Tensor(p0.data(), kDLFloat, 64, &s0), t1 = Tensor(p1.data(), kDLFloat, 64, &s1),
           t2 = Tensor(p2.data(), kDLFloat, 64, &s2), tv = Tensor(vol.data(), kDLFloat, 64, &sv),
           tw3 = Tensor(w3.data(), kDLFloat, 64, &sw3);
  gpe_separable_fit_options f3 = GPE_SEPARABLE_FIT_OPTIONS_INIT;
  f3.lambda = 1e-3;
  EXPECT_EQ(gpe_inr_fit_separable_3d(&f3, &t0, &t1, &t2, &tv, &tw3), GPE_OK)
      << gpe_last_error_message();
  return {w, w3};
}

// Each workload, first on the built-in pool, then on the application's: the regions go
// to the application's pool and the results are the built-in pool's bits. Bit equality
// is right: every region splits its work into the same slots on either pool, each work
// item is computed by one slot with the same arithmetic, and no reduction across slots
// depends on which thread ran a slot.
// app_threads: the application pool's num_threads (what automatic thread counts follow).
template <class Run>
void ExpectSameOnAppPool(const char* what, Run run, int32_t app_threads = 3) {
  const auto reference = run();
  AppPool app;
  gpe_thread_pool opts = app.Options(app_threads);
  ASSERT_EQ(gpe_set_thread_pool(&opts), GPE_OK) << gpe_last_error_message();
  BuiltInPoolAtExit restore;
  const auto on_app = run();
  EXPECT_GT(app.regions.load(), 0) << what << ": no region reached the application's pool";
  EXPECT_GE(app.tasks.load(), 2 * app.regions.load()) << what;
  ASSERT_EQ(on_app.size(), reference.size());
  for (size_t i = 0; i < reference.size(); ++i) {
    ASSERT_EQ(on_app[i].size(), reference[i].size());
    using T = typename std::decay_t<decltype(reference[i])>::value_type;
    EXPECT_EQ(Bytes(on_app[i].data(), on_app[i].size() * sizeof(T)),
              Bytes(reference[i].data(), reference[i].size() * sizeof(T)))
        << what << ": output " << i << " differs on the application's pool";
  }
}

TEST(ThreadPool, AttentionForwardAndBackwardRunOnTheApplicationsPool) {
  ExpectSameOnAppPool("attention non-causal", [] { return RunAttention(200, 200, 0, 0); });
  ExpectSameOnAppPool("attention causal RoPE", [] { return RunAttention(131, 131, 1, 32); });
}

TEST(ThreadPool, DecodingRunsOnTheApplicationsPool) {
  ExpectSameOnAppPool("decode", [] { return RunAttention(1, 3000, 1, 32); });
}

TEST(ThreadPool, RopeRunsOnTheApplicationsPool) {
  ExpectSameOnAppPool("rope", [] { return RunRope(); });
}

// The fits' automatic share count follows the pool's thread count (capped at 4), so the
// application's pool reports the built-in pool's count: the same shares on either pool.
// On a one-thread machine the fits run one share inline, and no region is made.
TEST(ThreadPool, ClosedFormFitsRunOnTheApplicationsPool) {
  int32_t built_in = 0;
  ASSERT_EQ(gpe_thread_pool_num_threads(&built_in), GPE_OK);
  if (built_in < 2) GTEST_SKIP() << "one hardware thread: the fits make no parallel region";
  ExpectSameOnAppPool("closed-form fits", [] { return RunFits(); }, built_in);
}

TEST(ThreadPool, NumThreadsFollowsTheInstalledPool) {
  int32_t n = 0;
  ASSERT_EQ(gpe_thread_pool_num_threads(&n), GPE_OK);
  EXPECT_GE(n, 1);
  AppPool app;
  gpe_thread_pool opts = app.Options(7);
  ASSERT_EQ(gpe_set_thread_pool(&opts), GPE_OK);
  BuiltInPoolAtExit restore;
  ASSERT_EQ(gpe_thread_pool_num_threads(&n), GPE_OK);
  EXPECT_EQ(n, 7);
}

TEST(ThreadPool, BadPoolsAreRefusedAndLeaveTheCurrentPool) {
  AppPool app;
  gpe_thread_pool opts = app.Options(2);
  opts.parallel_for = nullptr;
  EXPECT_EQ(gpe_set_thread_pool(&opts), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("parallel_for is NULL"));
  opts = app.Options(0);
  EXPECT_EQ(gpe_set_thread_pool(&opts), GPE_ERROR_INVALID_ARGUMENT);
  EXPECT_TRUE(HasMessage("num_threads"));
  opts = app.Options(1025);
  EXPECT_EQ(gpe_set_thread_pool(&opts), GPE_ERROR_INVALID_ARGUMENT);
  opts = app.Options(2);
  opts.struct_size = sizeof(gpe_thread_pool) + 8;
  EXPECT_EQ(gpe_set_thread_pool(&opts), GPE_ERROR_VERSION_MISMATCH);
  opts.struct_size = 4;
  EXPECT_NE(gpe_set_thread_pool(&opts), GPE_OK);
  EXPECT_EQ(gpe_thread_pool_num_threads(nullptr), GPE_ERROR_INVALID_ARGUMENT);
  // None of those replaced the built-in pool: a threaded call starts no region there.
  RunRope();
  EXPECT_EQ(app.regions.load(), 0);
}

}  // namespace
