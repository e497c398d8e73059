# Analysis: stable rank, embedded distances, the embedders' closed forms (gpe/analysis.h).
# Part of module GroupPE: included by ../GroupPE.jl, whose helpers it uses.

"""Stable rank ‖A‖_F² / ‖A‖_2²."""
function stable_rank(a::StridedMatrix{Float64})
    out = Ref{Float64}(0.0)
    @tensor ta a mat_parts
    GC.@preserve ta begin
        check(ccall((:gpe_stable_rank, libgpe), Int32, (Ref{DLTensor}, Ref{Float64}), ref(ta), out))
    end
    return out[]
end

"""Zheng et al. eq. 6: spacing ⋅ features[:, i] ⋅ features[:, j] (N × N), features F × N."""
function embedded_distance_matrix(features::StridedMatrix{Float64}, sample_spacing::Real)
    n = size(features, 2)
    out = zeros(Float64, n, n)
    @tensor tf features batch_parts
    @tensor to out mat_parts
    GC.@preserve tf to begin
        check(ccall((:gpe_embedded_distance_matrix, libgpe), Int32, (Ref{DLTensor}, Float64, Ref{DLTensor}),
                    ref(tf), sample_spacing, ref(to)))
    end
    return out
end

const EMBEDDERS = (:gaussian, :rectangle, :triangle, :rff)
function embedder_code(e::Symbol)
    k = findfirst(==(e), EMBEDDERS)
    k === nothing && argerror("embedder must be one of $(EMBEDDERS); got $e")
    return Int32(k - 1)
end
"""Closed-form stable rank of an embedder sampled on [0, 1] at num_points points."""
function embedder_stable_rank(embedder::Symbol, parameter::Real, num_points::Integer)
    out = Ref{Float64}(0.0)
    check(ccall((:gpe_embedder_stable_rank, libgpe), Int32, (Int32, Float64, Int64, Ref{Float64}),
                embedder_code(embedder), parameter, num_points, out))
    return out[]
end
"""Closed-form distance preservation D(δ)."""
function embedder_distance(embedder::Symbol, parameter::Real, delta::Real)
    out = Ref{Float64}(0.0)
    check(ccall((:gpe_embedder_distance, libgpe), Int32, (Int32, Float64, Float64, Ref{Float64}),
                embedder_code(embedder), parameter, delta, out))
    return out[]
end
