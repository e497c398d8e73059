# Sequence encodings: sinusoidal, learned positions, GRAPE-M (gpe/sequence.h).
# Part of module GroupPE: included by ../GroupPE.jl, whose helpers it uses.

struct SinusoidalOptions
    struct_size::UInt32
    base::Float64
end
struct GrapeMOptions
    struct_size::UInt32
    dim::Int64
    num_generators::Int64
    a::Ptr{Float64}
    b::Ptr{Float64}
    omega::Ptr{Float64}
end

# ---- Sequence encodings ----
"""Sinusoidal encoding (Vaswani et al., sec. 3.5): dim × N, column n for positions[n]."""
function sinusoidal_encode(positions::Vector{Int64}, dim::Integer; base::Real=10000.0, T::Type=Float64)
    out = zeros(T, dim, length(positions))
    @tensor tp positions vec_parts
    @tensor to out batch_parts
    o = SinusoidalOptions(ssize(SinusoidalOptions), base)
    GC.@preserve tp to begin
        check(ccall((:gpe_sinusoidal_encode, libgpe), Int32, (Ref{SinusoidalOptions}, Ref{DLTensor}, Ref{DLTensor}),
                    o, ref(tp), ref(to)))
    end
    return out
end

"""A learned position table: `table` is dim × max_positions (column p for position p)."""
mutable struct LearnedPositions
    ptr::Ptr{Cvoid}
    max_positions::Int
    dim::Int
end
function LearnedPositions(table::StridedMatrix{Float64})
    out = Ref{Ptr{Cvoid}}(C_NULL)
    @tensor tt table batch_parts
    GC.@preserve tt begin
        check(ccall((:gpe_learned_positions_create, libgpe), Int32, (Ref{DLTensor}, Ref{Ptr{Cvoid}}), ref(tt), out))
    end
    h = LearnedPositions(out[], 0, 0)
    finalizer(close, h)
    m, d = Ref{Int64}(0), Ref{Int64}(0)
    check(ccall((:gpe_learned_positions_shape, libgpe), Int32, (Ptr{Cvoid}, Ref{Int64}, Ref{Int64}), h.ptr, m, d))
    h.max_positions, h.dim = m[], d[]
    return h
end
function Base.close(h::LearnedPositions)
    h.ptr == C_NULL && return
    ccall((:gpe_learned_positions_destroy, libgpe), Cvoid, (Ptr{Cvoid},), h.ptr)
    h.ptr = C_NULL
    return
end
learned_shape(h::LearnedPositions) = (h.max_positions, h.dim)
function learned_lookup(h::LearnedPositions, positions::Vector{Int64})
    out = zeros(Float64, h.dim, length(positions))
    @tensor tp positions vec_parts
    @tensor to out batch_parts
    GC.@preserve tp to h begin
        check(ccall((:gpe_learned_positions_lookup, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}),
                    h.ptr, ref(tp), ref(to)))
    end
    return out
end
"""grad_table[:, p + 1] += grad_out[:, n] for p = positions[n] (accumulates)."""
function learned_backward!(grad_table::StridedMatrix{Float64}, h::LearnedPositions, positions::Vector{Int64},
                           grad_out::StridedMatrix{Float64})
    check_batch(grad_out, h.dim, positions)
    @tensor tp positions vec_parts
    @tensor tg grad_out batch_parts
    @tensor tt grad_table batch_parts
    GC.@preserve tp tg tt h begin
        check(ccall((:gpe_learned_positions_backward, libgpe), Int32,
                    (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}), h.ptr, ref(tp), ref(tg), ref(tt)))
    end
    return grad_table
end

# ---- GRAPE-M ----
"""GRAPE-M: G(p) = prod_k exp(p omega_k (a_k b_k' - b_k a_k')); a, b are dim × m (column k)."""
mutable struct GrapeM
    ptr::Ptr{Cvoid}
    dim::Int
    m::Int
end
function GrapeM(a::Matrix{Float64}, b::Matrix{Float64}, omega::Vector{Float64})
    size(a) == size(b) || argerror("a is $(size(a)) but b is $(size(b))")
    size(a, 2) == length(omega) || argerror("omega has $(length(omega)) values; a has $(size(a, 2)) columns")
    out = Ref{Ptr{Cvoid}}(C_NULL)
    # Column k of a dim × m Julia matrix is a_k: the row-major m × dim layout gpe.h asks for.
    GC.@preserve a b omega begin
        o = GrapeMOptions(ssize(GrapeMOptions), size(a, 1), size(a, 2), pointer(a), pointer(b), pointer(omega))
        check(ccall((:gpe_grape_m_create, libgpe), Int32, (Ref{GrapeMOptions}, Ref{Ptr{Cvoid}}), o, out))
    end
    g = GrapeM(out[], size(a, 1), size(a, 2))
    finalizer(close, g)
    return g
end
function Base.close(g::GrapeM)
    g.ptr == C_NULL && return
    ccall((:gpe_grape_m_destroy, libgpe), Cvoid, (Ptr{Cvoid},), g.ptr)
    g.ptr = C_NULL
    return
end
function grape_m_shape(g::GrapeM)
    d, m = Ref{Int64}(0), Ref{Int64}(0)
    check(ccall((:gpe_grape_m_shape, libgpe), Int32, (Ptr{Cvoid}, Ref{Int64}, Ref{Int64}), g.ptr, d, m))
    return (Int(d[]), Int(m[]))
end
function grape_m_apply(g::GrapeM, positions::Vector{Int64}, x::StridedMatrix{T}) where {T<:Union{Float32,Float64}}
    check_batch(x, g.dim, positions)
    out = similar(x, T, size(x))
    @tensor tp positions vec_parts
    @tensor tx x batch_parts
    @tensor to out batch_parts
    GC.@preserve tp tx to g begin
        check(ccall((:gpe_grape_m_apply, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    g.ptr, ref(tp), ref(tx), ref(to)))
    end
    return out
end
function grape_m_matrix(g::GrapeM, position::Integer)
    m = zeros(Float64, g.dim, g.dim)
    @tensor tm m mat_parts
    GC.@preserve tm g begin
        check(ccall((:gpe_grape_m_matrix, libgpe), Int32, (Ptr{Cvoid}, Int64, Ref{DLTensor}), g.ptr, position, ref(tm)))
    end
    return m
end
"""(grad_x, grad_a, grad_b, grad_omega) of apply given grad_out (Float64); grad_a/b are dim × m."""
function grape_m_backward(g::GrapeM, positions::Vector{Int64}, x::StridedMatrix{Float64}, grad_out::StridedMatrix{Float64})
    check_batch(x, g.dim, positions)
    check_batch(grad_out, g.dim, positions)
    gx = zeros(Float64, size(x))
    ga, gb, gw = zeros(Float64, g.dim, g.m), zeros(Float64, g.dim, g.m), zeros(Float64, g.m)
    @tensor tp positions vec_parts
    @tensor tx x batch_parts
    @tensor tg grad_out batch_parts
    @tensor tgx gx batch_parts
    @tensor ta ga batch_parts
    @tensor tb gb batch_parts
    @tensor tw gw vec_parts
    GC.@preserve tp tx tg tgx ta tb tw g begin
        check(ccall((:gpe_grape_m_backward, libgpe), Int32,
                    (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    g.ptr, ref(tp), ref(tx), ref(tg), ref(tgx), ref(ta), ref(tb), ref(tw)))
    end
    return gx, ga, gb, gw
end
