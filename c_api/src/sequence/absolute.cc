// The C ABI's absolute sequence encodings (gpe/sequence.h): the sinusoidal encoding and
// the learned position table, validated here and handed to encodings/sequence/absolute.h.
// Every entry point runs under Guard: failures become a status code plus the
// thread-local message, and no exception crosses the boundary.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c_api/include/gpe/sequence.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/sequence/batch.h"
#include "c_api/src/sequence/handles.h"
#include "encodings/sequence/absolute.h"

using gpe::c_api::CheckDim;
using gpe::c_api::CheckDisjoint;
using gpe::c_api::CheckNoSelfOverlap;
using gpe::c_api::CheckStructSize;
using gpe::c_api::ContiguousPositions;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::NamedView;
using gpe::c_api::ReadAt;
using gpe::c_api::RowsOf;
using gpe::c_api::Shape;
using gpe::c_api::TensorView;
using gpe::c_api::ViewBatch;
using gpe::c_api::ViewTensor;
using gpe::c_api::WriteRowsAny;
using gpe::c_api::kFloat;
using gpe::c_api::kInt;
namespace seq = gpe::encodings::sequence;

namespace {

// Checks `out` (one float32/float64 row per position of the int64 [N] view `p`) is
// disjoint from p and from itself, then writes fn(positions, rows, stride) into it.
template <class Fn>
absl::Status WritePositionRows(const TensorView& p, const TensorView& out, Fn fn) {
  if (gpe::c_api::Overlaps(p, out)) {
    return absl::InvalidArgumentError("out overlaps positions; pass disjoint memory");
  }
  if (absl::Status s = CheckNoSelfOverlap(out, "out"); !s.ok()) return s;
  if (p.shape[0] == 0) return absl::OkStatus();
  std::vector<int64_t> pstore;
  absl::Span<const int64_t> ps = ContiguousPositions(p, &pstore);
  return WriteRowsAny(out, /*gather=*/false,
                      [&](auto* rows, int64_t stride) { return fn(ps, rows, stride); });
}

template <class T>
void AddRows(const seq::RowMatrixXd& acc, const std::vector<char>& touched, const TensorView& g) {
  T* dst = g.typed<T>();
  for (int64_t i = 0; i < acc.rows(); ++i) {
    if (!touched[i]) continue;
    for (int64_t j = 0; j < acc.cols(); ++j) {
      dst[i * g.strides[0] + j * g.strides[1]] += static_cast<T>(acc(i, j));
    }
  }
}

}  // namespace

extern "C" {

// ---- Sinusoidal --------------------------------------------------------------------

gpe_status gpe_sinusoidal_encode(const gpe_sinusoidal_options* options, const DLTensor* positions,
                                 DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
    if (absl::Status s = CheckStructSize(options->struct_size,
                                         offsetof(gpe_sinusoidal_options, base) + sizeof(double),
                                         sizeof(gpe_sinusoidal_options), "gpe_sinusoidal_options");
        !s.ok()) {
      return s;
    }
    if (!std::isfinite(options->base) || options->base <= 0.0) {
      return absl::InvalidArgumentError(
          absl::StrCat("base must be finite and > 0; got ", options->base));
    }
    absl::StatusOr<TensorView> p = ViewTensor(positions, "positions", 1, kInt);
    if (!p.ok()) return p.status();
    absl::StatusOr<TensorView> ov = ViewTensor(out, "out", 2, kFloat);
    if (!ov.ok()) return ov.status();
    const int64_t dim = ov->shape[1];
    if (absl::Status s = CheckDim(dim, "out's second size (dim)", 1); !s.ok()) return s;
    if (ov->shape[0] != p->shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat("out has ", ov->shape[0],
                                                     " rows but positions has ", p->shape[0]));
    }
    return WritePositionRows(*p, *ov, [&](absl::Span<const int64_t> ps, auto* rows,
                                          int64_t stride) {
      using T = std::remove_pointer_t<decltype(rows)>;
      return seq::SinusoidalEncoding<T>(ps, dim, options->base, rows, stride);
    });
  });
}

// ---- Learned position table ----------------------------------------------------------

gpe_status gpe_learned_positions_create(const DLTensor* table, gpe_learned_positions** out) {
  return Guard([&]() -> absl::Status {
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    *out = nullptr;
    absl::StatusOr<TensorView> tv = ViewTensor(table, "table", 2, kFloat);
    if (!tv.ok()) return tv.status();
    // Copied whole: a broadcast view may not stand for a table nothing else bounds.
    if (absl::Status s = gpe::c_api::CheckMaterialised(*tv, "table"); !s.ok()) return s;
    if (tv->shape[0] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("table must have at least one row (max_positions >= 1); got ",
                       Shape(*tv)));
    }
    if (absl::Status s = CheckDim(tv->shape[1], "table's second size (dim)", 1); !s.ok()) {
      return s;
    }
    seq::RowMatrixXd m(tv->shape[0], tv->shape[1]);
    for (int64_t i = 0; i < m.rows(); ++i) {
      for (int64_t j = 0; j < m.cols(); ++j) {
        const double v = tv->dtype == DType::kFloat32 ? ReadAt<float>(*tv, i, j)
                                                      : ReadAt<double>(*tv, i, j);
        if (!std::isfinite(v)) {
          return absl::InvalidArgumentError(
              absl::StrCat("table[", i, ", ", j, "] is ", v, "; values must be finite"));
        }
        m(i, j) = v;
      }
    }
    absl::StatusOr<seq::LearnedPositionTable> t = seq::LearnedPositionTable::Create(std::move(m));
    if (!t.ok()) return t.status();
    *out = new gpe_learned_positions{std::move(*t)};
    return absl::OkStatus();
  });
}

void gpe_learned_positions_destroy(gpe_learned_positions* table) { delete table; }

gpe_status gpe_learned_positions_shape(const gpe_learned_positions* table, int64_t* max_positions,
                                       int64_t* dim) {
  return Guard([&]() -> absl::Status {
    if (table == nullptr) return absl::InvalidArgumentError("table is NULL");
    if (max_positions == nullptr) return absl::InvalidArgumentError("max_positions is NULL");
    if (dim == nullptr) return absl::InvalidArgumentError("dim is NULL");
    *max_positions = table->impl.max_positions();
    *dim = table->impl.dim();
    return absl::OkStatus();
  });
}

gpe_status gpe_learned_positions_lookup(const gpe_learned_positions* table,
                                        const DLTensor* positions, DLTensor* out) {
  return Guard([&]() -> absl::Status {
    if (table == nullptr) return absl::InvalidArgumentError("table is NULL");
    absl::StatusOr<TensorView> p = ViewTensor(positions, "positions", 1, kInt);
    if (!p.ok()) return p.status();
    absl::StatusOr<TensorView> ov = ViewBatch(out, "out", *p, table->impl.dim());
    if (!ov.ok()) return ov.status();
    return WritePositionRows(*p, *ov, [&](absl::Span<const int64_t> ps, auto* rows,
                                          int64_t stride) {
      using T = std::remove_pointer_t<decltype(rows)>;
      return table->impl.Lookup<T>(ps, rows, stride);
    });
  });
}

gpe_status gpe_learned_positions_backward(const gpe_learned_positions* table,
                                          const DLTensor* positions, const DLTensor* grad_out,
                                          DLTensor* grad_table) {
  return Guard([&]() -> absl::Status {
    if (table == nullptr) return absl::InvalidArgumentError("table is NULL");
    const seq::LearnedPositionTable& t = table->impl;
    absl::StatusOr<TensorView> p = ViewTensor(positions, "positions", 1, kInt);
    if (!p.ok()) return p.status();
    absl::StatusOr<TensorView> gv = ViewBatch(grad_out, "grad_out", *p, t.dim());
    if (!gv.ok()) return gv.status();
    absl::StatusOr<TensorView> gt = ViewTensor(grad_table, "grad_table", 2, kFloat);
    if (!gt.ok()) return gt.status();
    if (gt->shape[0] != t.max_positions() || gt->shape[1] != t.dim()) {
      return absl::InvalidArgumentError(absl::StrCat("grad_table must have shape [",
                                                     t.max_positions(), ", ", t.dim(),
                                                     "]; got ", Shape(*gt)));
    }
    if (absl::Status s = CheckNoSelfOverlap(*gt, "grad_table"); !s.ok()) return s;
    const NamedView views[] = {{&*p, "positions"}, {&*gv, "grad_out"}, {&*gt, "grad_table"}};
    if (absl::Status s = CheckDisjoint(views); !s.ok()) return s;
    if (p->shape[0] == 0) return absl::OkStatus();
    std::vector<int64_t> pstore;
    absl::Span<const int64_t> ps = ContiguousPositions(*p, &pstore);
    // The library accumulates into a float64 table (validating every position first);
    // only the rows it touched are then added into the caller's grad_table.
    seq::RowMatrixXd acc = seq::RowMatrixXd::Zero(t.max_positions(), t.dim());
    auto run = [&](auto zero) -> absl::Status {
      using T = decltype(zero);
      std::vector<T> buf;
      int64_t stride = 0;
      const T* rows = RowsOf<T>(*gv, true, &buf, &stride);
      return t.Backward<T>(ps, rows, stride, &acc);
    };
    if (absl::Status s = gv->dtype == DType::kFloat32 ? run(0.0f) : run(0.0); !s.ok()) return s;
    std::vector<char> touched(static_cast<size_t>(t.max_positions()), 0);
    for (int64_t q : ps) touched[q] = 1;  // in range: Backward validated every position
    if (gt->dtype == DType::kFloat32) {
      AddRows<float>(acc, touched, *gt);
    } else {
      AddRows<double>(acc, touched, *gt);
    }
    return absl::OkStatus();
  });
}

}  // extern "C"
