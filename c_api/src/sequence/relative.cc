// The C ABI's relative position terms (gpe/relative.h): Shaw et al.'s relative key scores
// and value terms, and Transformer-XL's relative score terms, validated here and handed
// to encodings/sequence/relative.h. Every entry point runs under Guard.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <Eigen/Dense>
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "c_api/include/gpe/relative.h"
#include "c_api/src/common/checks.h"
#include "c_api/src/common/error.h"
#include "c_api/src/common/tensor_view.h"
#include "c_api/src/sequence/batch.h"
#include "encodings/sequence/absolute.h"
#include "encodings/sequence/relative.h"

using gpe::c_api::CheckDim;
using gpe::c_api::CheckDisjoint;
using gpe::c_api::CheckNoSelfOverlap;
using gpe::c_api::CheckStructSize;
using gpe::c_api::ContiguousPositions;
using gpe::c_api::DType;
using gpe::c_api::Guard;
using gpe::c_api::NamedView;
using gpe::c_api::ReadAt;
using gpe::c_api::Shape;
using gpe::c_api::TensorView;
using gpe::c_api::ViewOptionalOut;
using gpe::c_api::ViewShaped;
using gpe::c_api::ViewTensor;
using gpe::c_api::kFloat;
using gpe::c_api::kInt;
namespace seq = gpe::encodings::sequence;

namespace {

absl::Status CheckFiniteMatrix(const seq::RowMatrixXd& m, const char* name) {
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) {
      if (!std::isfinite(m(i, j))) {
        return absl::InvalidArgumentError(absl::StrCat(name, "[", i, ", ", j, "] is ", m(i, j),
                                                       "; values must be finite"));
      }
    }
  }
  return absl::OkStatus();
}

// A float32/float64 2-D view as a double row-major matrix.
seq::RowMatrixXd ReadMatrix(const TensorView& v) {
  seq::RowMatrixXd m(v.shape[0], v.shape[1]);
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) {
      m(i, j) = v.dtype == DType::kFloat32 ? ReadAt<float>(v, i, j) : ReadAt<double>(v, i, j);
    }
  }
  return m;
}

// Writes (or, with `add`, adds) `m` into a float32/float64 2-D view.
template <class T>
void StoreMatrixTyped(const seq::RowMatrixXd& m, const TensorView& v, bool add) {
  T* dst = v.typed<T>();
  for (int64_t i = 0; i < m.rows(); ++i) {
    for (int64_t j = 0; j < m.cols(); ++j) {
      T& e = dst[i * v.strides[0] + j * v.strides[1]];
      e = add ? static_cast<T>(static_cast<double>(e) + m(i, j)) : static_cast<T>(m(i, j));
    }
  }
}
void StoreMatrix(const seq::RowMatrixXd& m, const TensorView& v, bool add) {
  if (v.dtype == DType::kFloat32) {
    StoreMatrixTyped<float>(m, v, add);
  } else {
    StoreMatrixTyped<double>(m, v, add);
  }
}

// The views every Shaw call shares: query_positions and key_positions (int64 [N]) and
// label_table (float32/float64 [2k + 1, width], `width_name` in messages), into
// in->qp, in->kp, in->table and in->k.
template <class Inputs>
absl::Status ViewLabelTable(const DLTensor* label_table, const DLTensor* query_positions,
                            const DLTensor* key_positions, const char* width_name,
                            Inputs* in) {
  absl::StatusOr<TensorView> v = ViewTensor(query_positions, "query_positions", 1, kInt);
  if (!v.ok()) return v.status();
  in->qp = std::move(*v);
  v = ViewTensor(key_positions, "key_positions", 1, kInt);
  if (!v.ok()) return v.status();
  in->kp = std::move(*v);
  v = ViewTensor(label_table, "label_table", 2, kFloat);
  if (!v.ok()) return v.status();
  // Copied whole (MakeShaw): a broadcast view may not stand for a table nothing bounds.
  if (absl::Status s = gpe::c_api::CheckMaterialised(*v, "label_table"); !s.ok()) return s;
  in->table = std::move(*v);
  const int64_t rows = in->table.shape[0];
  if (rows < 1 || rows % 2 == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "label_table must have an odd number 2k + 1 of rows; got ", Shape(in->table)));
  }
  if (absl::Status s = CheckDim(in->table.shape[1], width_name, 1); !s.ok()) return s;
  in->k = (rows - 1) / 2;
  return absl::OkStatus();
}

// Validated inputs of the Shaw key-score calls, and the ShawRelative built from them.
struct ShawInputs {
  TensorView q, table, qp, kp;
  int64_t k = 0;
};
absl::StatusOr<ShawInputs> ViewShaw(const DLTensor* q, const DLTensor* label_table,
                                    const DLTensor* query_positions,
                                    const DLTensor* key_positions) {
  ShawInputs in;
  if (absl::Status s = ViewLabelTable(label_table, query_positions, key_positions,
                                      "label_table's second size (d)", &in);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<TensorView> v = ViewTensor(q, "q", 2, kFloat);
  if (!v.ok()) return v.status();
  in.q = std::move(*v);
  if (in.q.shape[0] != in.qp.shape[0] || in.q.shape[1] != in.table.shape[1]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "q must have shape [", in.qp.shape[0], ", ", in.table.shape[1],
        "] (query_positions, label_table columns); got ", Shape(in.q)));
  }
  return in;
}

absl::StatusOr<seq::ShawRelative> MakeShaw(const ShawInputs& in) {
  seq::RowMatrixXd table = ReadMatrix(in.table);
  if (absl::Status s = CheckFiniteMatrix(table, "label_table"); !s.ok()) return s;
  // Only the key side is used here: the value table is a placeholder column.
  return seq::ShawRelative::Create(in.k, std::move(table),
                                   seq::RowMatrixXd::Zero(2 * in.k + 1, 1));
}

// Every output disjoint from every input and from the other outputs.
absl::Status CheckOutputs(absl::Span<const NamedView> inputs, absl::Span<const NamedView> outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].first == nullptr) continue;
    for (const NamedView& in : inputs) {
      const NamedView pair[] = {in, outputs[i]};
      if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
    }
    for (size_t j = 0; j < i; ++j) {
      const NamedView pair[] = {outputs[j], outputs[i]};
      if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// A 1-D float view as a double vector.
Eigen::VectorXd ReadVector(const TensorView& v) {
  Eigen::VectorXd out(v.shape[0]);
  for (int64_t i = 0; i < v.shape[0]; ++i) {
    out[i] = v.dtype == DType::kFloat32
                 ? static_cast<double>(v.typed<const float>()[i * v.strides[0]])
                 : v.typed<const double>()[i * v.strides[0]];
  }
  return out;
}
void StoreVector(const Eigen::VectorXd& x, const TensorView& v) {
  for (int64_t i = 0; i < v.shape[0]; ++i) {
    if (v.dtype == DType::kFloat32) {
      v.typed<float>()[i * v.strides[0]] = static_cast<float>(x[i]);
    } else {
      v.typed<double>()[i * v.strides[0]] = x[i];
    }
  }
}

struct ShawValueInputs {
  TensorView p, table, qp, kp;
  int64_t k = 0;
};
absl::StatusOr<ShawValueInputs> ViewShawValue(const DLTensor* probabilities,
                                              const DLTensor* label_table,
                                              const DLTensor* query_positions,
                                              const DLTensor* key_positions) {
  ShawValueInputs in;
  if (absl::Status s = ViewLabelTable(label_table, query_positions, key_positions,
                                      "label_table's second size (dv)", &in);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<TensorView> v =
      ViewShaped(probabilities, "probabilities", {in.qp.shape[0], in.kp.shape[0]});
  if (!v.ok()) return v.status();
  in.p = std::move(*v);
  return in;
}

absl::StatusOr<seq::ShawRelative> MakeShawValue(const ShawValueInputs& in) {
  seq::RowMatrixXd table = ReadMatrix(in.table);
  if (absl::Status s = CheckFiniteMatrix(table, "label_table"); !s.ok()) return s;
  // Only the value side is used here: the key table is a placeholder column.
  return seq::ShawRelative::Create(in.k, seq::RowMatrixXd::Zero(2 * in.k + 1, 1),
                                   std::move(table));
}

struct TxlInputs {
  TensorView q, k, qp, kp, w_r, u, v;
  seq::TransformerXLParams params;
};
absl::StatusOr<TxlInputs> ViewTxl(const gpe_transformer_xl_options* options, const DLTensor* q,
                                  const DLTensor* k, const DLTensor* query_positions,
                                  const DLTensor* key_positions, const DLTensor* w_r,
                                  const DLTensor* u, const DLTensor* v) {
  if (options == nullptr) return absl::InvalidArgumentError("options is NULL");
  if (absl::Status s = CheckStructSize(options->struct_size, sizeof(gpe_transformer_xl_options),
                                       sizeof(gpe_transformer_xl_options),
                                       "gpe_transformer_xl_options");
      !s.ok()) {
    return s;
  }
  if (!std::isfinite(options->base) || options->base <= 0.0) {
    return absl::InvalidArgumentError(
        absl::StrCat("base must be finite and > 0; got ", options->base));
  }
  TxlInputs in;
  absl::StatusOr<TensorView> t = ViewTensor(query_positions, "query_positions", 1, kInt);
  if (!t.ok()) return t.status();
  in.qp = std::move(*t);
  t = ViewTensor(key_positions, "key_positions", 1, kInt);
  if (!t.ok()) return t.status();
  in.kp = std::move(*t);
  t = ViewTensor(w_r, "w_r", 2, kFloat);
  if (!t.ok()) return t.status();
  in.w_r = std::move(*t);
  const int64_t d = in.w_r.shape[0];
  if (absl::Status s = CheckDim(d, "w_r's first size (d)", 1); !s.ok()) return s;
  if (absl::Status s = CheckDim(in.w_r.shape[1], "w_r's second size (d_r)", 1); !s.ok()) return s;
  t = ViewShaped(q, "q", {in.qp.shape[0], d});
  if (!t.ok()) return t.status();
  in.q = std::move(*t);
  t = ViewShaped(k, "k", {in.kp.shape[0], d});
  if (!t.ok()) return t.status();
  in.k = std::move(*t);
  t = ViewShaped(u, "u", {d});
  if (!t.ok()) return t.status();
  in.u = std::move(*t);
  t = ViewShaped(v, "v", {d});
  if (!t.ok()) return t.status();
  in.v = std::move(*t);
  in.params.w_r = ReadMatrix(in.w_r);
  in.params.u = ReadVector(in.u);
  in.params.v = ReadVector(in.v);
  in.params.base = options->base;
  if (absl::Status s = CheckFiniteMatrix(in.params.w_r, "w_r"); !s.ok()) return s;
  if (!in.params.u.allFinite() || !in.params.v.allFinite()) {
    return absl::InvalidArgumentError("u and v must be finite");
  }
  return in;
}

}  // namespace

extern "C" {

// ---- Shaw relative key scores --------------------------------------------------------

gpe_status gpe_shaw_key_scores(const DLTensor* q, const DLTensor* label_table,
                               const DLTensor* query_positions, const DLTensor* key_positions,
                               DLTensor* scores) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<ShawInputs> in = ViewShaw(q, label_table, query_positions, key_positions);
    if (!in.ok()) return in.status();
    absl::StatusOr<TensorView> sv = ViewTensor(scores, "scores", 2, kFloat);
    if (!sv.ok()) return sv.status();
    if (sv->shape[0] != in->qp.shape[0] || sv->shape[1] != in->kp.shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "scores must have shape [", in->qp.shape[0], ", ", in->kp.shape[0],
          "] (query_positions, key_positions); got ", Shape(*sv)));
    }
    if (absl::Status s = CheckNoSelfOverlap(*sv, "scores"); !s.ok()) return s;
    const NamedView views[] = {{&in->q, "q"},
                               {&in->table, "label_table"},
                               {&in->qp, "query_positions"},
                               {&in->kp, "key_positions"}};
    for (const NamedView& other : views) {
      const NamedView pair[] = {other, {&*sv, "scores"}};
      if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
    }
    absl::StatusOr<seq::ShawRelative> shaw = MakeShaw(*in);
    if (!shaw.ok()) return shaw.status();
    std::vector<int64_t> qs, ks;
    absl::StatusOr<seq::RowMatrixXd> out = shaw->KeyScores(
        ReadMatrix(in->q), ContiguousPositions(in->qp, &qs), ContiguousPositions(in->kp, &ks));
    if (!out.ok()) return out.status();
    StoreMatrix(*out, *sv, /*add=*/false);
    return absl::OkStatus();
  });
}

gpe_status gpe_shaw_key_scores_backward(const DLTensor* q, const DLTensor* label_table,
                                        const DLTensor* query_positions,
                                        const DLTensor* key_positions,
                                        const DLTensor* grad_scores, DLTensor* grad_q,
                                        DLTensor* grad_label_table) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<ShawInputs> in = ViewShaw(q, label_table, query_positions, key_positions);
    if (!in.ok()) return in.status();
    absl::StatusOr<TensorView> gv = ViewTensor(grad_scores, "grad_scores", 2, kFloat);
    if (!gv.ok()) return gv.status();
    if (gv->shape[0] != in->qp.shape[0] || gv->shape[1] != in->kp.shape[0]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "grad_scores must have shape [", in->qp.shape[0], ", ", in->kp.shape[0],
          "] (query_positions, key_positions); got ", Shape(*gv)));
    }
    TensorView gq, gt;
    if (grad_q != nullptr) {
      absl::StatusOr<TensorView> v = ViewTensor(grad_q, "grad_q", 2, kFloat);
      if (!v.ok()) return v.status();
      if (v->shape != in->q.shape) {
        return absl::InvalidArgumentError(
            absl::StrCat("grad_q must have q's shape ", Shape(in->q), "; got ", Shape(*v)));
      }
      if (absl::Status s = CheckNoSelfOverlap(*v, "grad_q"); !s.ok()) return s;
      gq = std::move(*v);
    }
    if (grad_label_table != nullptr) {
      absl::StatusOr<TensorView> v = ViewTensor(grad_label_table, "grad_label_table", 2, kFloat);
      if (!v.ok()) return v.status();
      if (v->shape != in->table.shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "grad_label_table must have label_table's shape ", Shape(in->table), "; got ",
            Shape(*v)));
      }
      if (absl::Status s = CheckNoSelfOverlap(*v, "grad_label_table"); !s.ok()) return s;
      gt = std::move(*v);
    }
    const NamedView views[] = {{&in->q, "q"},
                               {&in->table, "label_table"},
                               {&in->qp, "query_positions"},
                               {&in->kp, "key_positions"},
                               {&*gv, "grad_scores"},
                               {grad_q != nullptr ? &gq : nullptr, "grad_q"},
                               {grad_label_table != nullptr ? &gt : nullptr, "grad_label_table"}};
    for (size_t i = 5; i < 7; ++i) {
      for (size_t j = 0; j < i; ++j) {
        const NamedView pair[] = {views[j], views[i]};
        if (absl::Status s = CheckDisjoint(pair); !s.ok()) return s;
      }
    }
    absl::StatusOr<seq::ShawRelative> shaw = MakeShaw(*in);
    if (!shaw.ok()) return shaw.status();
    std::vector<int64_t> qs, ks;
    seq::RowMatrixXd dq, dt;
    if (grad_label_table != nullptr) dt.setZero(in->table.shape[0], in->table.shape[1]);
    if (absl::Status s = shaw->KeyScoresBackward(
            ReadMatrix(in->q), ContiguousPositions(in->qp, &qs), ContiguousPositions(in->kp, &ks),
            ReadMatrix(*gv), grad_q != nullptr ? &dq : nullptr,
            grad_label_table != nullptr ? &dt : nullptr);
        !s.ok()) {
      return s;
    }
    if (grad_q != nullptr) StoreMatrix(dq, gq, /*add=*/false);
    if (grad_label_table != nullptr) StoreMatrix(dt, gt, /*add=*/true);
    return absl::OkStatus();
  });
}

// ---- Shaw value terms and Transformer-XL ----------------------------------------------

gpe_status gpe_shaw_value_output(const DLTensor* probabilities, const DLTensor* label_table,
                                 const DLTensor* query_positions, const DLTensor* key_positions,
                                 DLTensor* out) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<ShawValueInputs> in =
        ViewShawValue(probabilities, label_table, query_positions, key_positions);
    if (!in.ok()) return in.status();
    if (out == nullptr) return absl::InvalidArgumentError("out is NULL");
    TensorView ov{};
    bool present = false;
    if (absl::Status s = ViewOptionalOut(out, "out", {in->qp.shape[0], in->table.shape[1]}, &ov,
                                         &present);
        !s.ok()) {
      return s;
    }
    const NamedView inputs[] = {{&in->p, "probabilities"},
                                {&in->table, "label_table"},
                                {&in->qp, "query_positions"},
                                {&in->kp, "key_positions"}};
    const NamedView outputs[] = {{&ov, "out"}};
    if (absl::Status s = CheckOutputs(inputs, outputs); !s.ok()) return s;
    absl::StatusOr<seq::ShawRelative> shaw = MakeShawValue(*in);
    if (!shaw.ok()) return shaw.status();
    std::vector<int64_t> qs, ks;
    absl::StatusOr<seq::RowMatrixXd> r = shaw->ValueOutput(
        ReadMatrix(in->p), ContiguousPositions(in->qp, &qs), ContiguousPositions(in->kp, &ks));
    if (!r.ok()) return r.status();
    StoreMatrix(*r, ov, /*add=*/false);
    return absl::OkStatus();
  });
}

gpe_status gpe_shaw_value_output_backward(const DLTensor* probabilities,
                                          const DLTensor* label_table,
                                          const DLTensor* query_positions,
                                          const DLTensor* key_positions,
                                          const DLTensor* grad_out, DLTensor* grad_probabilities,
                                          DLTensor* grad_label_table) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<ShawValueInputs> in =
        ViewShawValue(probabilities, label_table, query_positions, key_positions);
    if (!in.ok()) return in.status();
    absl::StatusOr<TensorView> gv =
        ViewShaped(grad_out, "grad_out", {in->qp.shape[0], in->table.shape[1]});
    if (!gv.ok()) return gv.status();
    TensorView gp{}, gt{};
    bool has_p = false, has_t = false;
    if (absl::Status s = ViewOptionalOut(grad_probabilities, "grad_probabilities", in->p.shape,
                                         &gp, &has_p);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = ViewOptionalOut(grad_label_table, "grad_label_table", in->table.shape,
                                         &gt, &has_t);
        !s.ok()) {
      return s;
    }
    const NamedView inputs[] = {{&in->p, "probabilities"},
                                {&in->table, "label_table"},
                                {&in->qp, "query_positions"},
                                {&in->kp, "key_positions"},
                                {&*gv, "grad_out"}};
    const NamedView outputs[] = {{has_p ? &gp : nullptr, "grad_probabilities"},
                                 {has_t ? &gt : nullptr, "grad_label_table"}};
    if (absl::Status s = CheckOutputs(inputs, outputs); !s.ok()) return s;
    absl::StatusOr<seq::ShawRelative> shaw = MakeShawValue(*in);
    if (!shaw.ok()) return shaw.status();
    std::vector<int64_t> qs, ks;
    seq::RowMatrixXd dp, dt;
    if (has_t) dt.setZero(in->table.shape[0], in->table.shape[1]);
    if (absl::Status s = shaw->ValueOutputBackward(
            ReadMatrix(in->p), ContiguousPositions(in->qp, &qs), ContiguousPositions(in->kp, &ks),
            ReadMatrix(*gv), has_p ? &dp : nullptr, has_t ? &dt : nullptr);
        !s.ok()) {
      return s;
    }
    if (has_p) StoreMatrix(dp, gp, /*add=*/false);
    if (has_t) StoreMatrix(dt, gt, /*add=*/true);
    return absl::OkStatus();
  });
}

gpe_status gpe_transformer_xl_score_terms(const gpe_transformer_xl_options* options,
                                          const DLTensor* q, const DLTensor* k,
                                          const DLTensor* query_positions,
                                          const DLTensor* key_positions, const DLTensor* w_r,
                                          const DLTensor* u, const DLTensor* v, DLTensor* terms) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<TxlInputs> in =
        ViewTxl(options, q, k, query_positions, key_positions, w_r, u, v);
    if (!in.ok()) return in.status();
    if (terms == nullptr) return absl::InvalidArgumentError("terms is NULL");
    TensorView tv{};
    bool present = false;
    if (absl::Status s = ViewOptionalOut(terms, "terms", {in->qp.shape[0], in->kp.shape[0]}, &tv,
                                         &present);
        !s.ok()) {
      return s;
    }
    const NamedView inputs[] = {{&in->q, "q"},   {&in->k, "k"},     {&in->qp, "query_positions"},
                                {&in->kp, "key_positions"},         {&in->w_r, "w_r"},
                                {&in->u, "u"},   {&in->v, "v"}};
    const NamedView outputs[] = {{&tv, "terms"}};
    if (absl::Status s = CheckOutputs(inputs, outputs); !s.ok()) return s;
    const seq::RowMatrixXd qm = ReadMatrix(in->q), km = ReadMatrix(in->k);
    if (absl::Status s = CheckFiniteMatrix(qm, "q"); !s.ok()) return s;
    if (absl::Status s = CheckFiniteMatrix(km, "k"); !s.ok()) return s;
    std::vector<int64_t> qs, ks;
    absl::StatusOr<seq::RowMatrixXd> r = seq::TransformerXLScoreTerms(
        qm, km, ContiguousPositions(in->qp, &qs), ContiguousPositions(in->kp, &ks), in->params);
    if (!r.ok()) return r.status();
    StoreMatrix(*r, tv, /*add=*/false);
    return absl::OkStatus();
  });
}

gpe_status gpe_transformer_xl_score_terms_backward(
    const gpe_transformer_xl_options* options, const DLTensor* q, const DLTensor* k,
    const DLTensor* query_positions, const DLTensor* key_positions, const DLTensor* w_r,
    const DLTensor* u, const DLTensor* v, const DLTensor* grad_terms, DLTensor* grad_q,
    DLTensor* grad_k, DLTensor* grad_w_r, DLTensor* grad_u, DLTensor* grad_v) {
  return Guard([&]() -> absl::Status {
    absl::StatusOr<TxlInputs> in =
        ViewTxl(options, q, k, query_positions, key_positions, w_r, u, v);
    if (!in.ok()) return in.status();
    absl::StatusOr<TensorView> gv =
        ViewShaped(grad_terms, "grad_terms", {in->qp.shape[0], in->kp.shape[0]});
    if (!gv.ok()) return gv.status();
    TensorView g[5] = {};
    bool has[5] = {};
    DLTensor* outs[5] = {grad_q, grad_k, grad_w_r, grad_u, grad_v};
    const char* names[5] = {"grad_q", "grad_k", "grad_w_r", "grad_u", "grad_v"};
    const TensorView* likes[5] = {&in->q, &in->k, &in->w_r, &in->u, &in->v};
    for (int i = 0; i < 5; ++i) {
      if (absl::Status s = ViewOptionalOut(outs[i], names[i], likes[i]->shape, &g[i], &has[i]);
          !s.ok()) {
        return s;
      }
    }
    const NamedView inputs[] = {{&in->q, "q"},   {&in->k, "k"},     {&in->qp, "query_positions"},
                                {&in->kp, "key_positions"},         {&in->w_r, "w_r"},
                                {&in->u, "u"},   {&in->v, "v"},     {&*gv, "grad_terms"}};
    NamedView outputs[5];
    for (int i = 0; i < 5; ++i) outputs[i] = {has[i] ? &g[i] : nullptr, names[i]};
    if (absl::Status s = CheckOutputs(inputs, outputs); !s.ok()) return s;
    const seq::RowMatrixXd qm = ReadMatrix(in->q), km = ReadMatrix(in->k);
    if (absl::Status s = CheckFiniteMatrix(qm, "q"); !s.ok()) return s;
    if (absl::Status s = CheckFiniteMatrix(km, "k"); !s.ok()) return s;
    std::vector<int64_t> qs, ks;
    seq::TransformerXLGradients grads;
    if (absl::Status s = seq::TransformerXLScoreTermsBackward(
            qm, km, ContiguousPositions(in->qp, &qs), ContiguousPositions(in->kp, &ks),
            in->params, ReadMatrix(*gv), &grads);
        !s.ok()) {
      return s;
    }
    if (has[0]) StoreMatrix(grads.q, g[0], /*add=*/false);
    if (has[1]) StoreMatrix(grads.k, g[1], /*add=*/false);
    if (has[2]) StoreMatrix(grads.w_r, g[2], /*add=*/false);
    if (has[3]) StoreVector(grads.u, g[3]);
    if (has[4]) StoreVector(grads.v, g[4]);
    return absl::OkStatus();
  });
}

}  // extern "C"
