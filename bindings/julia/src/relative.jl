# Relative scores: Shaw et al.'s keys and values, Transformer-XL (gpe/relative.h).
# Part of module GroupPE: included by ../GroupPE.jl, whose helpers it uses.

struct TransformerXlOptions
    struct_size::UInt32
    base::Float64
end

# ---- Shaw relative scores ----
"""scores (Lq × Lk): q is d × Lq (column per query), label_table d × (2k + 1)."""
function shaw_key_scores(q::StridedMatrix{Float64}, label_table::StridedMatrix{Float64},
                         query_positions::Vector{Int64}, key_positions::Vector{Int64})
    scores = zeros(Float64, length(query_positions), length(key_positions))
    @tensor tq q batch_parts
    @tensor tl label_table batch_parts
    @tensor tqp query_positions vec_parts
    @tensor tkp key_positions vec_parts
    @tensor ts scores mat_parts
    GC.@preserve tq tl tqp tkp ts begin
        check(ccall((:gpe_shaw_key_scores, libgpe), Int32,
                    (Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    ref(tq), ref(tl), ref(tqp), ref(tkp), ref(ts)))
    end
    return scores
end
"""(grad_q, grad_label_table) given grad_scores (Lq × Lk)."""
function shaw_key_scores_backward(q::StridedMatrix{Float64}, label_table::StridedMatrix{Float64},
                                  query_positions::Vector{Int64}, key_positions::Vector{Int64},
                                  grad_scores::StridedMatrix{Float64})
    gq = zeros(Float64, size(q))
    gl = zeros(Float64, size(label_table))
    @tensor tq q batch_parts
    @tensor tl label_table batch_parts
    @tensor tqp query_positions vec_parts
    @tensor tkp key_positions vec_parts
    @tensor tgs grad_scores mat_parts
    @tensor tgq gq batch_parts
    @tensor tgl gl batch_parts
    GC.@preserve tq tl tqp tkp tgs tgq tgl begin
        check(ccall((:gpe_shaw_key_scores_backward, libgpe), Int32,
                    (Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    ref(tq), ref(tl), ref(tqp), ref(tkp), ref(tgs), ref(tgq), ref(tgl)))
    end
    return gq, gl
end

"""Shaw et al. eq. 3: out[:, a] = Σ_b P[a, b] table[:, clip(kp[b] - qp[a], -k, k) + k + 1];
P is Lq × Lk, table dv × (2k + 1); out dv × Lq."""
function shaw_value_output(probabilities::StridedMatrix{Float64}, label_table::StridedMatrix{Float64},
                           query_positions::Vector{Int64}, key_positions::Vector{Int64})
    out = zeros(Float64, size(label_table, 1), size(probabilities, 1))
    @tensor tp probabilities mat_parts
    @tensor tl label_table batch_parts
    @tensor tqp query_positions vec_parts
    @tensor tkp key_positions vec_parts
    @tensor to out batch_parts
    GC.@preserve tp tl tqp tkp to begin
        check(ccall((:gpe_shaw_value_output, libgpe), Int32,
                    (Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    ref(tp), ref(tl), ref(tqp), ref(tkp), ref(to)))
    end
    return out
end
"""(grad_probabilities (Lq × Lk), grad_label_table (dv × (2k + 1))) given grad_out (dv × Lq)."""
function shaw_value_output_backward(probabilities::StridedMatrix{Float64}, label_table::StridedMatrix{Float64},
                                    query_positions::Vector{Int64}, key_positions::Vector{Int64},
                                    grad_out::StridedMatrix{Float64})
    gp = zeros(Float64, size(probabilities))
    gl = zeros(Float64, size(label_table))
    @tensor tp probabilities mat_parts
    @tensor tl label_table batch_parts
    @tensor tqp query_positions vec_parts
    @tensor tkp key_positions vec_parts
    @tensor tgo grad_out batch_parts
    @tensor tgp gp mat_parts
    @tensor tgl gl batch_parts
    GC.@preserve tp tl tqp tkp tgo tgp tgl begin
        check(ccall((:gpe_shaw_value_output_backward, libgpe), Int32,
                    (Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    ref(tp), ref(tl), ref(tqp), ref(tkp), ref(tgo), ref(tgp), ref(tgl)))
    end
    return gp, gl
end

"""Transformer-XL's relative terms (Dai et al. sec. 3.3), Lq × Lk: q d × Lq, k d × Lk,
w_r d × d_r, u and v of length d; R_t the sinusoidal encoding with `base`."""
function transformer_xl_score_terms(q::StridedMatrix{Float64}, k::StridedMatrix{Float64}, query_positions::Vector{Int64},
                                    key_positions::Vector{Int64}, w_r::StridedMatrix{Float64}, u::Vector{Float64},
                                    v::Vector{Float64}; base::Real=10000.0)
    o = TransformerXlOptions(ssize(TransformerXlOptions), base)
    terms = zeros(Float64, size(q, 2), size(k, 2))
    @tensor tq q batch_parts
    @tensor tk k batch_parts
    @tensor tqp query_positions vec_parts
    @tensor tkp key_positions vec_parts
    @tensor tw w_r mat_parts
    @tensor tu u vec_parts
    @tensor tv v vec_parts
    @tensor tt terms mat_parts
    GC.@preserve tq tk tqp tkp tw tu tv tt begin
        check(ccall((:gpe_transformer_xl_score_terms, libgpe), Int32,
                    (Ref{TransformerXlOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor},
                     Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    o, ref(tq), ref(tk), ref(tqp), ref(tkp), ref(tw), ref(tu), ref(tv), ref(tt)))
    end
    return terms
end
"""Every input's gradient given grad_terms (Lq × Lk): (q=, k=, w_r=, u=, v=)."""
function transformer_xl_score_terms_backward(q::StridedMatrix{Float64}, k::StridedMatrix{Float64},
                                             query_positions::Vector{Int64}, key_positions::Vector{Int64},
                                             w_r::StridedMatrix{Float64}, u::Vector{Float64}, v::Vector{Float64},
                                             grad_terms::StridedMatrix{Float64}; base::Real=10000.0)
    o = TransformerXlOptions(ssize(TransformerXlOptions), base)
    gq, gk, gw, gu, gv = zeros(size(q)), zeros(size(k)), zeros(size(w_r)), zeros(length(u)), zeros(length(v))
    @tensor tq q batch_parts
    @tensor tk k batch_parts
    @tensor tqp query_positions vec_parts
    @tensor tkp key_positions vec_parts
    @tensor tw w_r mat_parts
    @tensor tu u vec_parts
    @tensor tv v vec_parts
    @tensor tg grad_terms mat_parts
    @tensor tgq gq batch_parts
    @tensor tgk gk batch_parts
    @tensor tgw gw mat_parts
    @tensor tgu gu vec_parts
    @tensor tgv gv vec_parts
    GC.@preserve tq tk tqp tkp tw tu tv tg tgq tgk tgw tgu tgv begin
        check(ccall((:gpe_transformer_xl_score_terms_backward, libgpe), Int32,
                    (Ref{TransformerXlOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor},
                     Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor},
                     Ref{DLTensor}),
                    o, ref(tq), ref(tk), ref(tqp), ref(tkp), ref(tw), ref(tu), ref(tv), ref(tg), ref(tgq), ref(tgk),
                    ref(tgw), ref(tgu), ref(tgv)))
    end
    return (q=gq, k=gk, w_r=gw, u=gu, v=gv)
end
