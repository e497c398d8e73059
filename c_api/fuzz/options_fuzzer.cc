// Fuzz target: the option structs of every gpe_*_create* and option-taking entry point
// (so_rep planes and rank-2, GRAPE-M, algebraic sequences and trees with fuzzed
// addresses, sinusoidal, shifted basis, separable fit: a W returned with GPE_OK must be
// finite), with fuzzed struct_size, sizes, enums and values (NaN, infinities, huge). The
// harness keeps its side of the contract: every pointer it passes holds as many values
// as the fields it sets promise (sizes above the library's limits get NULL, which the
// library must reject before reading). Each call must return a known status, leave a
// message on failure, and (on success) give a handle that works and is destroyed.
#include <cstdint>
#include <vector>

#include "c_api/fuzz/fuzz_input.h"
#include "gpe/gpe.h"

namespace {

using gpe::fuzz::CheckStatus;
using gpe::fuzz::FuzzInput;

constexpr int64_t kMaxValues = int64_t{1} << 16;  // what the harness will allocate

std::vector<double> Values(FuzzInput* in, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = in->Real();
  return v;
}

uint32_t StructSize(FuzzInput* in, uint32_t real) {
  switch (in->Read<uint8_t>() % 8) {
    case 0: return in->Read<uint32_t>();
    case 1: return real + 8;
    case 2: return real - 8;
    default: return real;
  }
}

// positions [1] and a [1, dim] float64 batch through a handle's apply.
template <typename Apply>
void ApplyOnce(int64_t dim, Apply apply) {
  if (dim < 1 || dim > 256) return;
  std::vector<int64_t> pos = {3}, ps = {1}, xs = {1, dim};
  std::vector<double> x(static_cast<size_t>(dim), 0.5), y(x.size());
  DLTensor tp{}, tx{}, ty{};
  tp.data = pos.data();
  tp.device.device_type = kDLCPU;
  tp.ndim = 1;
  tp.dtype = {kDLInt, 64, 1};
  tp.shape = ps.data();
  tx = tp;
  tx.data = x.data();
  tx.ndim = 2;
  tx.dtype = {kDLFloat, 64, 1};
  tx.shape = xs.data();
  ty = tx;
  ty.data = y.data();
  CheckStatus(apply(&tp, &tx, &ty));
}

void Planes(FuzzInput* in) {
  gpe_so_planes_options o = GPE_SO_PLANES_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  o.pairing = in->Read<uint8_t>() % 4 == 0 ? in->Read<int32_t>() : in->Read<uint8_t>() % 2;
  o.dim = in->Size(64);
  o.rotary_dim = in->Size(64);
  o.base = in->Real();
  std::vector<double> thetas;
  if (in->Read<uint8_t>() % 2) {
    const int64_t rotary = o.rotary_dim == 0 ? o.dim : o.rotary_dim;
    // The library reads rotary / 2 values once its checks pass (rotary <= dim <= 2^20).
    if (rotary >= 0 && rotary / 2 <= kMaxValues) {
      thetas = Values(in, rotary / 2);
      o.thetas = thetas.data();
    } else {
      return;  // no valid pointer to give
    }
  }
  gpe_so_rep* rep = nullptr;
  const gpe_status s = gpe_so_rep_create_planes(&o, &rep);
  CheckStatus(s);
  if ((s == GPE_OK) != (rep != nullptr)) __builtin_trap();
  if (rep != nullptr) {
    ApplyOnce(o.dim, [&](const DLTensor* p, const DLTensor* x, DLTensor* y) {
      return gpe_so_rep_apply(rep, p, x, y);
    });
  }
  gpe_so_rep_destroy(rep);
}

void Rank2(FuzzInput* in) {
  gpe_so_rank2_options o = GPE_SO_RANK2_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  o.dim = in->Size(64);
  std::vector<double> a, b;
  if (o.dim >= 0 && o.dim <= kMaxValues) {
    a = Values(in, o.dim);
    b = Values(in, o.dim);
    o.a = a.data();
    o.b = b.data();
  }
  o.omega = in->Real();
  gpe_so_rep* rep = nullptr;
  CheckStatus(gpe_so_rep_create_rank2(&o, &rep));
  if (rep != nullptr) {
    ApplyOnce(o.dim, [&](const DLTensor* p, const DLTensor* x, DLTensor* y) {
      return gpe_so_rep_apply(rep, p, x, y);
    });
  }
  gpe_so_rep_destroy(rep);
}

void GrapeM(FuzzInput* in) {
  gpe_grape_m_options o = GPE_GRAPE_M_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  o.dim = in->Size(32);
  o.num_generators = in->Size(4);
  std::vector<double> a, b, w;
  // The library reads m * dim values of a and b, and m of omega, after range checks.
  if (o.dim >= 0 && o.num_generators >= 0 && o.dim <= kMaxValues &&
      o.num_generators <= kMaxValues && o.dim * o.num_generators <= kMaxValues) {
    a = Values(in, o.dim * o.num_generators);
    b = Values(in, o.dim * o.num_generators);
    w = Values(in, o.num_generators);
    o.a = a.data();
    o.b = b.data();
    o.omega = w.data();
  }
  gpe_grape_m* g = nullptr;
  CheckStatus(gpe_grape_m_create(&o, &g));
  if (g != nullptr) {
    ApplyOnce(o.dim, [&](const DLTensor* p, const DLTensor* x, DLTensor* y) {
      return gpe_grape_m_apply(g, p, x, y);
    });
  }
  gpe_grape_m_destroy(g);
}

void Algebraic(FuzzInput* in) {
  gpe_algebraic_sequence_options o = GPE_ALGEBRAIC_SEQUENCE_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  o.dim = in->Size(16);
  std::vector<double> s;
  if (o.dim >= 0 && o.dim <= 256) {
    s = Values(in, o.dim * o.dim);
    // Half the time make it exactly skew so creation gets past the check.
    if (in->Read<uint8_t>() % 2) {
      for (int64_t i = 0; i < o.dim; ++i) {
        for (int64_t j = 0; j < i; ++j) s[j * o.dim + i] = -s[i * o.dim + j];
        s[i * o.dim + i] = 0.0;
      }
    }
    o.skew = s.data();
  }
  gpe_algebraic_sequence* seq = nullptr;
  CheckStatus(gpe_algebraic_sequence_create(&o, &seq));
  if (seq != nullptr) {
    ApplyOnce(o.dim, [&](const DLTensor* p, const DLTensor* x, DLTensor* y) {
      return gpe_algebraic_sequence_apply(seq, p, x, y);
    });
  }
  gpe_algebraic_sequence_destroy(seq);
}

// Algebraic trees: the options (dim, num_branches, k skews), then apply with fuzzed
// addresses (int64 [N, L]: child indices, -1 padding; mostly in [-1, k], sometimes
// anything) and a float32 or float64 batch; tree_matrix with a fuzzed address.
void AlgebraicTree(FuzzInput* in) {
  gpe_algebraic_tree_options o = GPE_ALGEBRAIC_TREE_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  o.dim = in->Size(8);
  o.num_branches = in->Size(4);
  std::vector<double> s;
  if (o.dim >= 0 && o.dim <= 64 && o.num_branches >= 0 && o.num_branches <= 8) {
    const int64_t d = o.dim;
    s = Values(in, o.num_branches * d * d);
    if (in->Read<uint8_t>() % 4 != 0) {  // mostly exactly skew: creation gets past the check
      for (int64_t c = 0; c < o.num_branches; ++c) {
        double* m = s.data() + c * d * d;
        for (int64_t i = 0; i < d; ++i) {
          for (int64_t j = 0; j < i; ++j) m[j * d + i] = -m[i * d + j];
          m[i * d + i] = 0.0;
        }
      }
    }
    o.skews = s.data();
  }
  gpe_algebraic_tree* tree = nullptr;
  const gpe_status cs = gpe_algebraic_tree_create(&o, &tree);
  CheckStatus(cs);
  if ((cs == GPE_OK) != (tree != nullptr)) __builtin_trap();
  if (tree == nullptr) return;
  const int64_t n = in->Size(6), depth = in->Size(6);
  std::vector<int64_t> as = {n, depth}, xs = {n, o.dim};
  const bool ok_shape = n >= 0 && depth >= 0 && n <= 64 && depth <= 64;
  std::vector<int64_t> addr(ok_shape ? static_cast<size_t>(n * depth) : 0);
  const bool wild = in->Read<uint8_t>() % 4 == 0;
  for (int64_t& a : addr) {
    a = wild ? in->Read<int64_t>() : static_cast<int64_t>(in->Read<uint8_t>() % (o.num_branches + 2)) - 1;
  }
  const bool f32 = in->Read<uint8_t>() % 2;
  std::vector<double> x(ok_shape ? static_cast<size_t>(n * o.dim) : 0), y(x.size());
  for (double& v : x) v = in->Real();
  if (f32) {  // the same buffers hold n * dim floats in their first half
    float* xf = reinterpret_cast<float*>(x.data());
    for (size_t i = 0; i < x.size(); ++i) xf[i] = static_cast<float>(x[i]);
  }
  DLTensor ta{}, tx{}, ty{};
  ta.data = ok_shape && !addr.empty() ? addr.data() : nullptr;
  ta.device.device_type = kDLCPU;
  ta.ndim = 2;
  ta.dtype = {kDLInt, 64, 1};
  ta.shape = as.data();
  tx = ta;
  tx.data = ok_shape && !x.empty() ? x.data() : nullptr;
  tx.dtype = {kDLFloat, static_cast<uint8_t>(f32 ? 32 : 64), 1};
  tx.shape = xs.data();
  ty = tx;
  ty.data = ok_shape && !y.empty() ? y.data() : nullptr;
  if (in->Read<uint8_t>() % 4 == 0) ty.data = tx.data;  // in place
  CheckStatus(gpe_algebraic_tree_apply(tree, &ta, &tx, &ty));
  // rho(address) for the first row's address (depth values, or NULL when 0).
  std::vector<double> m(static_cast<size_t>(o.dim * o.dim));
  std::vector<int64_t> ms = {o.dim, o.dim};
  DLTensor tm = tx;
  tm.data = m.data();
  tm.dtype = {kDLFloat, 64, 1};
  tm.shape = ms.data();
  const int64_t* first = addr.size() >= static_cast<size_t>(depth) && depth > 0 ? addr.data() : nullptr;
  CheckStatus(gpe_algebraic_tree_matrix(tree, first, first ? depth : 0, &tm));
  gpe_algebraic_tree_destroy(tree);
}

void Sinusoidal(FuzzInput* in) {
  gpe_sinusoidal_options o = GPE_SINUSOIDAL_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  o.base = in->Real();
  std::vector<int64_t> pos = {in->Read<int64_t>(), in->Read<int64_t>()}, ps = {2}, os = {2, 5};
  std::vector<double> out(10);
  DLTensor tp{}, to{};
  tp.data = pos.data();
  tp.device.device_type = kDLCPU;
  tp.ndim = 1;
  tp.dtype = {kDLInt, 64, 1};
  tp.shape = ps.data();
  to = tp;
  to.data = out.data();
  to.ndim = 2;
  to.dtype = {kDLFloat, 64, 1};
  to.shape = os.data();
  CheckStatus(gpe_sinusoidal_encode(&o, &tp, &to));
}

void ShiftedAndFit(FuzzInput* in) {
  gpe_shifted_basis_options o = GPE_SHIFTED_BASIS_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  o.kind = in->Read<uint8_t>() % 8 == 0 ? in->Read<int32_t>() : in->Read<uint8_t>() % 6;
  o.num_shifts = in->Size(8);
  o.width = in->Real();
  o.lo = in->Real();
  o.hi = in->Read<uint8_t>() % 2 ? in->Real() : o.lo + 1.0;
  const int64_t n = 6, k = o.num_shifts >= 1 && o.num_shifts <= 64 ? o.num_shifts : 4;
  std::vector<double> coords = Values(in, n), psi(static_cast<size_t>(n * k));
  std::vector<int64_t> cs = {n}, es = {n, k}, is = {n, n}, ws = {k, k};
  DLTensor tc{}, te{};
  tc.data = coords.data();
  tc.device.device_type = kDLCPU;
  tc.ndim = 1;
  tc.dtype = {kDLFloat, 64, 1};
  tc.shape = cs.data();
  te = tc;
  te.data = psi.data();
  te.ndim = 2;
  te.shape = es.data();
  const gpe_status s = gpe_shifted_basis_encode(&o, &tc, &te);
  CheckStatus(s);
  if (s != GPE_OK) return;
  gpe_separable_fit_options f = GPE_SEPARABLE_FIT_OPTIONS_INIT;
  f.struct_size = StructSize(in, f.struct_size);
  f.float32_image_products = in->Read<uint8_t>() % 2;
  f.lambda = in->Real();
  std::vector<double> image = Values(in, n * n), w(static_cast<size_t>(k * k)), pred(image.size());
  DLTensor ti = te, tw = te, tpr = te;
  ti.data = image.data();
  ti.shape = is.data();
  tw.data = w.data();
  tw.shape = ws.data();
  tpr.data = pred.data();
  tpr.shape = is.data();
  const gpe_status fs = gpe_inr_fit_separable_2d(&f, &te, &te, &ti, &tw);
  CheckStatus(fs);
  // Nothing silently wrong (issue 24): every input was finite or the call refused it, so
  // a W returned with GPE_OK is finite (float32 image products included).
  if (fs == GPE_OK) {
    for (double v : w) {
      if (!(v - v == 0.0)) __builtin_trap();
    }
  }
  if (fs == GPE_OK) CheckStatus(gpe_inr_predict_separable_2d(&te, &te, &tw, &tpr));
  double rank = 0.0;
  CheckStatus(gpe_stable_rank(&te, &rank));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  switch (in.Below(7)) {
    case 0: Planes(&in); break;
    case 1: Rank2(&in); break;
    case 2: GrapeM(&in); break;
    case 3: Algebraic(&in); break;
    case 4: Sinusoidal(&in); break;
    case 5: AlgebraicTree(&in); break;
    default: ShiftedAndFit(&in); break;
  }
  return 0;
}
