// Fuzz target: the coordinate entry points added after 0.3.0 that parse sizes, shapes and
// options: the coordinate encoders (gpe_fourier_features_create / _from_frequencies,
// gpe_so2_bessel_create_sampled / _create, gpe_shifted_encoder_create,
// gpe_spherical_harmonics_create) with gpe_coordinate_encode / _backward and the handle
// queries, gpe_bessel_j, gpe_laplacian_eigenvectors, the analysis functions
// (gpe_embedded_distance_matrix, gpe_embedder_stable_rank, gpe_embedder_distance,
// gpe_inr_condition_number), the closed-form fits (gpe_inr_fit_separable_2d /
// _predict, gpe_inr_fit_separable_3d / _predict) and the blended fit
// (gpe_inr_fit_blended_2d / _predict). The harness keeps its side of the contract: a
// tensor's data holds every element its shape promises, or is NULL when the shape is
// negative or too large to allocate (the library must reject it before reading); an
// option array holds as many entries as the count passed beside it. Work the caller
// asks for explicitly (a 4096-node eigensolve, 2^31 solver iterations) is kept small
// so each input runs in milliseconds. Each call must return a known status and leave a
// message on failure; ASan checks that nothing outside the buffers is touched.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "c_api/fuzz/fuzz_input.h"
#include "gpe/gpe.h"

namespace {

using gpe::fuzz::CheckStatus;
using gpe::fuzz::FuzzInput;

constexpr int64_t kMaxElements = int64_t{1} << 14;  // what the harness allocates per tensor

uint32_t StructSize(FuzzInput* in, uint32_t real) {
  switch (in->Read<uint8_t>() % 10) {
    case 0: return in->Read<uint32_t>();
    case 1: return real + 8;
    case 2: return real - 8;
    default: return real;
  }
}

// A tensor whose buffer matches its shape (NULL data when the shape cannot be
// allocated); 8-byte elements serve float64 and int64 alike.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> storage;
  DLTensor t{};
  Tensor(std::vector<int64_t> s, uint8_t code = kDLFloat) : shape(std::move(s)) {
    int64_t n = 1;
    bool ok = true;
    for (int64_t d : shape) {
      if (d < 0 || d > kMaxElements || (d > 0 && n > kMaxElements / d)) ok = false;
      if (ok) n *= d;
    }
    if (ok && n > 0) storage.assign(static_cast<size_t>(n), 0.0);
    t.data = ok && n > 0 ? storage.data() : nullptr;
    t.device.device_type = kDLCPU;
    t.ndim = static_cast<int32_t>(shape.size());
    t.dtype = {code, 64, 1};
    t.shape = shape.data();
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  double* d() { return t.data == nullptr ? nullptr : storage.data(); }
  int64_t* i() { return t.data == nullptr ? nullptr : reinterpret_cast<int64_t*>(storage.data()); }
  size_t size() const { return t.data == nullptr ? 0 : storage.size(); }
  void FillReal(FuzzInput* in) {
    for (size_t k = 0; k < size(); ++k) storage[k] = in->Real();
  }
  // Ordinary values in [lo, hi) most of the time, fuzzed ones (NaN, inf, huge) sometimes.
  void FillMostlyIn(FuzzInput* in, double lo, double hi) {
    for (size_t k = 0; k < size(); ++k) {
      storage[k] = in->Below(16) == 0 ? in->Real() : lo + (hi - lo) * (in->Read<uint16_t>() / 65536.0);
    }
  }
  // Sometimes a wrong dtype or a wrong rank (the rest of the description unchanged).
  void Perturb(FuzzInput* in) {
    switch (in->Below(24)) {
      case 0: t.dtype = {kDLFloat, 32, 1}; break;
      case 1: t.dtype = {kDLInt, 64, 1}; break;
      case 2: if (t.ndim > 0) t.ndim -= 1; break;
      case 3: t.device.device_type = kDLCUDA; break;
      default: break;
    }
  }
};

// Mostly `want`, sometimes a fuzzed size (which may be negative or huge).
int64_t Near(FuzzInput* in, int64_t want, int64_t small = 8) {
  return in->Below(6) == 0 ? in->Size(small) : want;
}

gpe_shifted_basis_options ShiftedAxis(FuzzInput* in) {
  gpe_shifted_basis_options o = GPE_SHIFTED_BASIS_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  o.kind = in->Below(8) == 0 ? in->Read<int32_t>() : static_cast<int32_t>(in->Below(6));
  o.num_shifts = in->Size(8);
  o.width = in->Below(4) == 0 ? in->Real() : 0.25;
  o.lo = in->Below(4) == 0 ? in->Real() : 0.0;
  o.hi = in->Below(4) == 0 ? in->Real() : o.lo + 1.0;
  return o;
}

// One coordinate encoder of a fuzzed kind with fuzzed options (NULL when refused).
gpe_coordinate_encoder* MakeEncoder(FuzzInput* in) {
  gpe_coordinate_encoder* e = nullptr;
  gpe_status s = GPE_OK;
  switch (in->Below(6)) {
    case 0: {
      gpe_fourier_features_options o = GPE_FOURIER_FEATURES_OPTIONS_INIT;
      o.struct_size = StructSize(in, o.struct_size);
      o.kind = in->Below(8) == 0 ? in->Read<int32_t>() : static_cast<int32_t>(in->Below(5));
      // dim capped at 256: axis-aligned kinds build a (dim K) x dim matrix, legal up to
      // 2^25 entries, which ASan and coverage make a 20 s input (a timeout finding of an
      // unseeded run, not a fault); fourier_features_test covers the bound itself.
      o.dim = std::min<int64_t>(in->Size(4), 256);
      o.num_frequencies = in->Size(8);
      o.scale = in->Below(3) == 0 ? in->Real() : 1.5;
      o.convention = in->Below(8) == 0 ? in->Read<int32_t>() : static_cast<int32_t>(in->Below(2));
      o.seed = in->Read<uint64_t>();
      s = gpe_fourier_features_create(&o, &e);
      break;
    }
    case 1: {
      Tensor b({in->Size(6), in->Size(4)});
      b.FillReal(in);
      b.Perturb(in);
      const int32_t convention = in->Below(8) == 0 ? in->Read<int32_t>() : in->Below(2);
      s = gpe_fourier_features_create_from_frequencies(&b.t, convention, &e);
      break;
    }
    case 2: {
      gpe_so2_bessel_options o = GPE_SO2_BESSEL_OPTIONS_INIT;
      o.struct_size = StructSize(in, o.struct_size);
      o.polar = in->Below(8) == 0 ? in->Read<int32_t>() : static_cast<int32_t>(in->Below(2));
      o.num_terms = in->Size(8);
      o.max_scale = in->Below(3) == 0 ? in->Real() : 4.0;
      o.max_k = in->Below(3) == 0 ? in->Read<int32_t>() : static_cast<int32_t>(in->Below(6));
      o.order_m = in->Below(3) == 0 ? in->Read<int32_t>() : static_cast<int32_t>(in->Below(4));
      o.seed = in->Read<uint64_t>();
      s = gpe_so2_bessel_create_sampled(&o, &e);
      break;
    }
    case 3: {
      const int64_t t = in->Size(6);
      Tensor orders({Near(in, t)}, kDLInt), scales({Near(in, t)}), weights({Near(in, t)}, kDLInt);
      for (size_t k = 0; k < orders.size(); ++k) {
        orders.i()[k] = in->Below(8) == 0 ? in->Read<int64_t>() : in->Below(22);
      }
      scales.FillMostlyIn(in, 0.0, 8.0);
      for (size_t k = 0; k < weights.size(); ++k) {
        weights.i()[k] = in->Below(8) == 0 ? in->Read<int64_t>() : static_cast<int64_t>(in->Below(9)) - 4;
      }
      orders.Perturb(in);
      scales.Perturb(in);
      const int32_t polar = in->Below(8) == 0 ? in->Read<int32_t>() : in->Below(2);
      s = gpe_so2_bessel_create(&orders.t, &scales.t, &weights.t, polar, &e);
      break;
    }
    case 4: {
      const int64_t axes = in->Size(3);
      // The harness holds as many axis structs as it says (none when it says too many).
      std::vector<gpe_shifted_basis_options> o(axes > 0 && axes <= 32 ? static_cast<size_t>(axes) : 0);
      for (auto& a : o) a = ShiftedAxis(in);
      const int32_t form = in->Below(8) == 0 ? in->Read<int32_t>() : in->Below(2);
      s = gpe_shifted_encoder_create(form, o.empty() ? nullptr : o.data(), axes, &e);
      break;
    }
    default: {
      const int32_t degree = in->Below(4) == 0 ? in->Read<int32_t>() : in->Below(8);
      s = gpe_spherical_harmonics_create(degree, &e);
      break;
    }
  }
  CheckStatus(s);
  if ((s == GPE_OK) != (e != nullptr)) __builtin_trap();
  return e;
}

void EncoderCalls(FuzzInput* in) {
  gpe_coordinate_encoder* e = MakeEncoder(in);
  if (e == nullptr) return;
  int64_t d = -1, f = -1;
  CheckStatus(gpe_coordinate_encoder_dims(e, &d, &f));
  if (d < 1 || f < 1) __builtin_trap();
  const int64_t n = in->Size(6);
  Tensor points({n, Near(in, d)}), features({Near(in, n), Near(in, f)});
  points.FillMostlyIn(in, -2.0, 2.0);
  points.Perturb(in);
  features.Perturb(in);
  // Sometimes features alias points (the library must refuse the overlap).
  DLTensor* out = in->Below(16) == 0 ? &points.t : &features.t;
  CheckStatus(gpe_coordinate_encode(e, &points.t, out));
  Tensor grad_f({Near(in, n), Near(in, f)}), grad_p({Near(in, n), Near(in, d)});
  grad_f.FillMostlyIn(in, -1.0, 1.0);
  grad_f.Perturb(in);
  DLTensor* gout = &grad_p.t;
  switch (in->Below(16)) {
    case 0: gout = &points.t; break;
    case 1: gout = &grad_f.t; break;
    default: break;
  }
  CheckStatus(gpe_coordinate_backward(e, &points.t, &grad_f.t, gout));
  // Handle queries; the kind-specific ones must refuse other kinds.
  Tensor freq({Near(in, f / 2), Near(in, d)});
  CheckStatus(gpe_fourier_features_angular_frequencies(e, &freq.t));
  const int64_t t = f / 2;
  Tensor orders({Near(in, t)}, kDLInt), scales({Near(in, t)}), weights({Near(in, t)}, kDLInt);
  CheckStatus(gpe_so2_bessel_terms(e, in->Below(4) ? &orders.t : nullptr,
                                   in->Below(4) ? &scales.t : nullptr,
                                   in->Below(4) ? &weights.t : nullptr));
  gpe_coordinate_encoder_destroy(e);
}

void BesselCalls(FuzzInput* in) {
  const int32_t order = in->Below(4) == 0 ? in->Read<int32_t>() : static_cast<int32_t>(in->Below(22));
  const int64_t n = in->Size(8);
  Tensor x({n}), out({Near(in, n)});
  x.FillMostlyIn(in, 0.0, in->Below(4) == 0 ? 5000.0 : 30.0);
  x.Perturb(in);
  out.Perturb(in);
  CheckStatus(gpe_bessel_j(order, &x.t, in->Below(8) == 0 ? &x.t : &out.t));  // in place allowed
}

void LaplacianCalls(FuzzInput* in) {
  gpe_laplacian_options o = GPE_LAPLACIAN_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  o.kind = in->Below(8) == 0 ? in->Read<int32_t>() : static_cast<int32_t>(in->Below(2));
  o.skip_first = in->Below(2);
  // A dense eigensolve of up to 4096 nodes is valid but slow: the harness asks for <= 48.
  int64_t nodes = in->Size(12);
  if (nodes > 48 && nodes <= 4096) nodes = 48;
  const int64_t edges_n = in->Size(16);
  Tensor edges({edges_n, Near(in, 2, 3)}, kDLInt);
  const int64_t id_range = nodes > 0 && nodes <= 48 ? nodes : 8;
  for (size_t k = 0; k < edges.size(); ++k) {
    edges.i()[k] = in->Below(16) == 0 ? in->Read<int64_t>()
                                      : static_cast<int64_t>(in->Below(static_cast<uint32_t>(id_range) + 1)) -
                                            (in->Below(16) == 0 ? 1 : 0);
  }
  edges.Perturb(in);
  Tensor weights({Near(in, edges_n)});
  weights.FillMostlyIn(in, 0.1, 2.0);
  weights.Perturb(in);
  const int64_t k = in->Size(6);
  Tensor values({k}), vectors({Near(in, nodes > 48 ? 8 : nodes), Near(in, k)});
  values.Perturb(in);
  vectors.Perturb(in);
  CheckStatus(gpe_laplacian_eigenvectors(in->Below(32) == 0 ? nullptr : &o, nodes, &edges.t,
                                         in->Below(3) == 0 ? nullptr : &weights.t, &values.t,
                                         &vectors.t));
}

void AnalysisCalls(FuzzInput* in) {
  const int64_t n = in->Size(8), f = in->Size(8);
  Tensor features({n, f}), out({Near(in, n), Near(in, n)});
  features.FillMostlyIn(in, -1.0, 1.0);
  features.Perturb(in);
  out.Perturb(in);
  const double spacing = in->Below(3) == 0 ? in->Real() : 0.125;
  CheckStatus(gpe_embedded_distance_matrix(&features.t, spacing,
                                           in->Below(16) == 0 ? &features.t : &out.t));
  double r = 0.0;
  CheckStatus(gpe_inr_condition_number(&features.t, in->Below(32) == 0 ? nullptr : &r));
  const int32_t embedder = in->Below(8) == 0 ? in->Read<int32_t>() : static_cast<int32_t>(in->Below(4));
  const double parameter = in->Below(2) ? in->Real() : 0.05;
  CheckStatus(gpe_embedder_stable_rank(embedder, parameter, in->Size(1000), &r));
  CheckStatus(gpe_embedder_distance(embedder, parameter, in->Real(), in->Below(32) ? &r : nullptr));
}

gpe_separable_fit_options FitOptions(FuzzInput* in) {
  gpe_separable_fit_options o = GPE_SEPARABLE_FIT_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  o.float32_image_products = in->Below(2);
  o.lambda = in->Below(3) == 0 ? in->Real() : 1e-3 * in->Below(2);
  o.rcond = in->Below(3) == 0 ? in->Real() : 1e-6 * in->Below(2);
  return o;
}

void Separable2dCalls(FuzzInput* in) {
  gpe_separable_fit_options o = FitOptions(in);
  const int64_t ny = in->Size(8), ky = in->Size(6), nx = in->Size(8), kx = in->Size(6);
  Tensor py({ny, ky}), px({nx, kx}), image({Near(in, ny), Near(in, nx)}), w({Near(in, ky), Near(in, kx)});
  py.FillMostlyIn(in, -1.0, 1.0);
  px.FillMostlyIn(in, -1.0, 1.0);
  image.FillMostlyIn(in, 0.0, 1.0);
  py.Perturb(in);
  image.Perturb(in);
  w.Perturb(in);
  const gpe_status s = gpe_inr_fit_separable_2d(&o, &py.t, &px.t, &image.t, in->Below(16) == 0 ? &image.t : &w.t);
  CheckStatus(s);
  Tensor pred({Near(in, ny), Near(in, nx)});
  pred.Perturb(in);
  CheckStatus(gpe_inr_predict_separable_2d(&py.t, &px.t, &w.t, in->Below(16) == 0 ? &w.t : &pred.t));
}

void Separable3dCalls(FuzzInput* in) {
  gpe_separable_fit_options o = FitOptions(in);
  int64_t n[3], k[3];
  for (int d = 0; d < 3; ++d) {
    n[d] = in->Size(5);
    k[d] = in->Size(4);
  }
  Tensor p0({n[0], k[0]}), p1({n[1], k[1]}), p2({n[2], k[2]});
  Tensor* psi[3] = {&p0, &p1, &p2};
  for (Tensor* p : psi) {
    p->FillMostlyIn(in, -1.0, 1.0);
    p->Perturb(in);
  }
  Tensor volume({Near(in, n[0]), Near(in, n[1]), Near(in, n[2])});
  volume.FillMostlyIn(in, 0.0, 1.0);
  volume.Perturb(in);
  Tensor w({Near(in, k[0]), Near(in, k[1]), Near(in, k[2])});
  w.Perturb(in);
  CheckStatus(gpe_inr_fit_separable_3d(in->Below(32) == 0 ? nullptr : &o, &p0.t, &p1.t, &p2.t,
                                       &volume.t, in->Below(16) == 0 ? &volume.t : &w.t));
  Tensor out({Near(in, n[0]), Near(in, n[1]), Near(in, n[2])});
  out.Perturb(in);
  CheckStatus(gpe_inr_predict_separable_3d(&p0.t, &p1.t, &p2.t, &w.t, in->Below(16) == 0 ? &w.t : &out.t));
}

// A one-axis shifted encoder (what the blended fit expects), or sometimes any encoder.
gpe_coordinate_encoder* AxisEncoder(FuzzInput* in) {
  if (in->Below(8) == 0) return MakeEncoder(in);
  gpe_shifted_basis_options o = GPE_SHIFTED_BASIS_OPTIONS_INIT;
  o.kind = static_cast<int32_t>(in->Below(6));
  o.num_shifts = 1 + in->Below(6);
  o.width = in->Below(8) == 0 ? in->Real() : 0.3;
  gpe_coordinate_encoder* e = nullptr;
  CheckStatus(gpe_shifted_encoder_create(GPE_SHIFTED_SIMPLE, &o, 1, &e));
  return e;
}

// A grid of n coordinates: increasing on [0, 1] most of the time, fuzzed sometimes.
void FillGrid(FuzzInput* in, Tensor* g) {
  const size_t n = g->size();
  if (in->Below(4) == 0) {
    g->FillReal(in);
    return;
  }
  for (size_t k = 0; k < n; ++k) g->storage[k] = n > 1 ? static_cast<double>(k) / (n - 1) : 0.0;
}

void BlendedCalls(FuzzInput* in) {
  gpe_coordinate_encoder* ex = AxisEncoder(in);
  gpe_coordinate_encoder* ey = AxisEncoder(in);
  gpe_blended_fit_options o = GPE_BLENDED_FIT_OPTIONS_INIT;
  o.struct_size = StructSize(in, o.struct_size);
  // Iterations are the caller's explicit request: at most 64 here (a fuzzed negative
  // count must still be refused).
  o.max_iterations = in->Below(4) == 0 ? static_cast<int32_t>(in->Size(64)) : 32;
  if (o.max_iterations > 64) o.max_iterations = 64;
  o.lambda = in->Below(4) == 0 ? in->Real() : 1e-6;
  o.tolerance = in->Below(4) == 0 ? in->Real() : 1e-6;
  const int64_t gx_n = in->Size(8), gy_n = in->Size(8), p = in->Size(16);
  Tensor gx({gx_n}), gy({gy_n}), points({p, Near(in, 2, 3)}), values({Near(in, p)});
  FillGrid(in, &gx);
  FillGrid(in, &gy);
  points.FillMostlyIn(in, 0.0, 1.0);
  values.FillMostlyIn(in, -1.0, 1.0);
  gx.Perturb(in);
  points.Perturb(in);
  int64_t kx = 1, ky = 1;
  if (ex != nullptr) CheckStatus(gpe_coordinate_encoder_dims(ex, nullptr, &kx));
  if (ey != nullptr) CheckStatus(gpe_coordinate_encoder_dims(ey, nullptr, &ky));
  Tensor w({Near(in, ky), Near(in, kx)});
  w.Perturb(in);
  int32_t iterations = -1;
  double rms = -1.0;
  const gpe_status s = gpe_inr_fit_blended_2d(in->Below(32) == 0 ? nullptr : &o, ex, ey, &gx.t,
                                              &gy.t, &points.t, &values.t, &w.t,
                                              in->Below(2) ? &iterations : nullptr,
                                              in->Below(2) ? &rms : nullptr);
  CheckStatus(s);
  Tensor out({Near(in, p)});
  out.Perturb(in);
  CheckStatus(gpe_inr_predict_blended_2d(ex, ey, &gx.t, &gy.t, &points.t, &w.t, &out.t));
  gpe_coordinate_encoder_destroy(ex);
  gpe_coordinate_encoder_destroy(ey);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput in(data, size);
  switch (in.Below(8)) {
    case 0:
    case 1: EncoderCalls(&in); break;
    case 2: BesselCalls(&in); break;
    case 3: LaplacianCalls(&in); break;
    case 4: AnalysisCalls(&in); break;
    case 5: Separable2dCalls(&in); break;
    case 6: Separable3dCalls(&in); break;
    default: BlendedCalls(&in); break;
  }
  return 0;
}
