"""
    GroupPE

GroupPE from Julia: `ccall` bindings to libgpe's stable C ABI (c_api/include/gpe/gpe.h).

Layouts (no copies: Julia arrays are described to the library by their strides):
- a batch of vectors is a `dim × N` matrix, one column per position (`positions[n]`
  goes with column `n`); Float32 or Float64;
- a matrix in the mathematical sense (rho(p), the skew generator, psi, an image, W) is an
  ordinary Julia matrix of that shape, Float64.

Every failing call throws `GPEError` with the library's status and message. The library
is `ENV["GPE_LIBRARY"]` when set at load time (a path to libgpe.so), else `libgpe` on the
loader's path. Handles are freed by finalizers (or `close`); they are immutable and may be
shared between threads (gpe.h, thread safety).
"""
module GroupPE

export GPEError, SoRep, so_rep_planes, so_rep_rank2, so_rep_dim, so_rep_apply, so_rep_matrix,
       sinusoidal_encode, LearnedPositions, learned_shape, learned_lookup, learned_backward!,
       GrapeM, grape_m_shape, grape_m_apply, grape_m_matrix, grape_m_backward,
       AlgebraicSequence, algebraic_dim, algebraic_apply, algebraic_matrix, algebraic_backward,
       shaw_key_scores, shaw_key_scores_backward, shifted_basis_encode, stable_rank,
       fit_separable_2d, predict_separable_2d, gpe_version

const libgpe = get(ENV, "GPE_LIBRARY", "libgpe")

# ---- DLPack 0.6 structs (isbits: C layout) ----
struct DLDevice
    device_type::Int32
    device_id::Int32
end
struct DLDataType
    code::UInt8
    bits::UInt8
    lanes::UInt16
end
struct DLTensor
    data::Ptr{Cvoid}
    device::DLDevice
    ndim::Int32
    dtype::DLDataType
    shape::Ptr{Int64}
    strides::Ptr{Int64}
    byte_offset::UInt64
end

const KDL_CPU = Int32(1)
dlcode(::Type{Float32}) = (UInt8(2), UInt8(32))
dlcode(::Type{Float64}) = (UInt8(2), UInt8(64))
dlcode(::Type{Int64}) = (UInt8(0), UInt8(64))

# ---- Option structs (gpe.h; struct_size = sizeof of this layout) ----
struct SoPlanesOptions
    struct_size::UInt32
    pairing::Int32
    dim::Int64
    rotary_dim::Int64
    base::Float64
    thetas::Ptr{Float64}
end
struct SoRank2Options
    struct_size::UInt32
    dim::Int64
    a::Ptr{Float64}
    b::Ptr{Float64}
    omega::Float64
end
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
struct AlgebraicOptions
    struct_size::UInt32
    dim::Int64
    skew::Ptr{Float64}
end
struct ShiftedBasisOptions
    struct_size::UInt32
    kind::Int32
    num_shifts::Int64
    width::Float64
    lo::Float64
    hi::Float64
end
struct SeparableFitOptions
    struct_size::UInt32
    float32_image_products::Int32
    lambda::Float64
    rcond::Float64
end
ssize(T) = UInt32(sizeof(T))

# ---- Errors ----
"""A failed call: `status` (gpe.h's code), `name` ("GPE_ERROR_...") and the message."""
struct GPEError <: Exception
    status::Int32
    name::String
    message::String
end
Base.showerror(io::IO, e::GPEError) = print(io, e.name, ": ", e.message)

status_name(code::Integer) = unsafe_string(ccall((:gpe_status_name, libgpe), Cstring, (Int32,), code))

function check(code::Int32)
    code == 0 && return nothing
    msg = unsafe_string(ccall((:gpe_last_error_message, libgpe), Cstring, ()))
    throw(GPEError(code, status_name(code), msg))
end
argerror(msg) = throw(GPEError(Int32(1), "GPE_ERROR_INVALID_ARGUMENT", msg))

"""(number, "MAJOR.MINOR.PATCH") of the loaded library."""
gpe_version() = (Int(ccall((:gpe_version, libgpe), Cint, ())),
                 unsafe_string(ccall((:gpe_version_string, libgpe), Cstring, ())))

# ---- Tensors: a DLTensor over a Julia array plus the shape/stride vectors it points to.
# Keep the returned tuple referenced (GC.@preserve) while the C call runs.
function dl(a::StridedArray{T}, shape::Vector{Int64}, strides::Vector{Int64}) where {T}
    code, bits = dlcode(T)
    t = DLTensor(pointer(a), DLDevice(KDL_CPU, 0), Int32(length(shape)), DLDataType(code, bits, 1),
                 pointer(shape), pointer(strides), 0)
    return Ref(t)
end
# A vector of length n: shape [n], stride 1.
vec_parts(v::StridedVector) = (Int64[length(v)], Int64[stride(v, 1)])
# A mathematical matrix m (r × c): shape [r, c], strides [stride(m,1), stride(m,2)].
mat_parts(m::StridedMatrix) = (Int64[size(m, 1), size(m, 2)], Int64[stride(m, 1), stride(m, 2)])
# A batch x (dim × N, one column per row of the C tensor): shape [N, dim].
batch_parts(x::StridedMatrix) = (Int64[size(x, 2), size(x, 1)], Int64[stride(x, 2), stride(x, 1)])

macro tensor(name, array, parts)
    quote
        local p = $(esc(parts))($(esc(array)))
        local s = p[1]
        local st = p[2]
        $(esc(name)) = (dl($(esc(array)), s, st), s, st, $(esc(array)))
    end
end
# The Ref{DLTensor} of a tensor made by @tensor; `nothing` stays C NULL.
ref(t) = t === nothing ? Ptr{DLTensor}(C_NULL) : t[1]

# ---- SO(n) representations ----
mutable struct SoRep
    ptr::Ptr{Cvoid}
    dim::Int
    function SoRep(ptr::Ptr{Cvoid})
        d = Ref{Int64}(0)
        r = new(ptr, 0)
        finalizer(close, r)
        check(ccall((:gpe_so_rep_dim, libgpe), Int32, (Ptr{Cvoid}, Ref{Int64}), ptr, d))
        r.dim = d[]
        return r
    end
end
function Base.close(r::SoRep)
    r.ptr == C_NULL && return
    ccall((:gpe_so_rep_destroy, libgpe), Cvoid, (Ptr{Cvoid},), r.ptr)
    r.ptr = C_NULL
    return
end

"""RoPE planes: `pairing` is `:interleaved` (RoFormer) or `:half_split` (NeoX, Llama)."""
function so_rep_planes(dim::Integer; rotary_dim::Integer=0, pairing::Symbol=:interleaved,
                       base::Real=10000.0, thetas::Union{Nothing,Vector{Float64}}=nothing)
    pairing in (:interleaved, :half_split) || argerror("pairing must be :interleaved or :half_split; got $pairing")
    rd = rotary_dim == 0 ? dim : rotary_dim
    if thetas !== nothing && length(thetas) != div(max(rd, 0), 2)
        argerror("thetas has $(length(thetas)) values; expected $(div(rd, 2))")
    end
    th = thetas === nothing ? Float64[] : thetas
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve th begin
        o = SoPlanesOptions(ssize(SoPlanesOptions), pairing == :interleaved ? 0 : 1, dim, rotary_dim,
                            base, thetas === nothing ? C_NULL : pointer(th))
        check(ccall((:gpe_so_rep_create_planes, libgpe), Int32, (Ref{SoPlanesOptions}, Ref{Ptr{Cvoid}}), o, out))
    end
    return SoRep(out[])
end

"""One rank-2 generator: S = omega (a b' - b a')."""
function so_rep_rank2(a::Vector{Float64}, b::Vector{Float64}, omega::Real)
    length(a) == length(b) || argerror("a and b differ in length")
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve a b begin
        o = SoRank2Options(ssize(SoRank2Options), length(a), pointer(a), pointer(b), omega)
        check(ccall((:gpe_so_rep_create_rank2, libgpe), Int32, (Ref{SoRank2Options}, Ref{Ptr{Cvoid}}), o, out))
    end
    return SoRep(out[])
end

so_rep_dim(r::SoRep) = r.dim

function check_batch(x::AbstractMatrix, dim::Integer, positions::AbstractVector)
    size(x) == (dim, length(positions)) ||
        argerror("x is $(size(x, 1)) × $(size(x, 2)); expected dim × N = $dim × $(length(positions))")
end

"""rho(positions[n]) applied to column n of x (dim × N)."""
function so_rep_apply(r::SoRep, positions::Vector{Int64}, x::StridedMatrix{T}) where {T<:Union{Float32,Float64}}
    check_batch(x, r.dim, positions)
    out = similar(x, T, size(x))
    @tensor tp positions vec_parts
    @tensor tx x batch_parts
    @tensor to out batch_parts
    GC.@preserve tp tx to r begin
        check(ccall((:gpe_so_rep_apply, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    r.ptr, ref(tp), ref(tx), ref(to)))
    end
    return out
end

"""The dim × dim matrix rho(position)."""
function so_rep_matrix(r::SoRep, position::Integer)
    m = zeros(Float64, r.dim, r.dim)
    @tensor tm m mat_parts
    GC.@preserve tm r begin
        check(ccall((:gpe_so_rep_matrix, libgpe), Int32, (Ptr{Cvoid}, Int64, Ref{DLTensor}), r.ptr, position, ref(tm)))
    end
    return m
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

# ---- Algebraic sequence encoding ----
"""W^p = exp(p S) for a skew-symmetric dim × dim `skew` (Kogkalidis et al., sec. 3.1)."""
mutable struct AlgebraicSequence
    ptr::Ptr{Cvoid}
    dim::Int
end
function AlgebraicSequence(skew::Matrix{Float64})
    size(skew, 1) == size(skew, 2) || argerror("skew is $(size(skew)); it must be square")
    # gpe.h reads skew row-major: pass the transpose's memory (S' = -S is also skew, so
    # a plain pointer would silently negate S; copy to row-major instead).
    rowmajor = Matrix(transpose(skew))
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve rowmajor begin
        o = AlgebraicOptions(ssize(AlgebraicOptions), size(skew, 1), pointer(rowmajor))
        check(ccall((:gpe_algebraic_sequence_create, libgpe), Int32, (Ref{AlgebraicOptions}, Ref{Ptr{Cvoid}}), o, out))
    end
    h = AlgebraicSequence(out[], size(skew, 1))
    finalizer(close, h)
    return h
end
function Base.close(h::AlgebraicSequence)
    h.ptr == C_NULL && return
    ccall((:gpe_algebraic_sequence_destroy, libgpe), Cvoid, (Ptr{Cvoid},), h.ptr)
    h.ptr = C_NULL
    return
end
function algebraic_dim(h::AlgebraicSequence)
    d = Ref{Int64}(0)
    check(ccall((:gpe_algebraic_sequence_dim, libgpe), Int32, (Ptr{Cvoid}, Ref{Int64}), h.ptr, d))
    return Int(d[])
end
function algebraic_apply(h::AlgebraicSequence, positions::Vector{Int64}, x::StridedMatrix{T}) where {T<:Union{Float32,Float64}}
    check_batch(x, h.dim, positions)
    out = similar(x, T, size(x))
    @tensor tp positions vec_parts
    @tensor tx x batch_parts
    @tensor to out batch_parts
    GC.@preserve tp tx to h begin
        check(ccall((:gpe_algebraic_sequence_apply, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    h.ptr, ref(tp), ref(tx), ref(to)))
    end
    return out
end
function algebraic_matrix(h::AlgebraicSequence, position::Integer)
    m = zeros(Float64, h.dim, h.dim)
    @tensor tm m mat_parts
    GC.@preserve tm h begin
        check(ccall((:gpe_algebraic_sequence_matrix, libgpe), Int32, (Ptr{Cvoid}, Int64, Ref{DLTensor}), h.ptr, position, ref(tm)))
    end
    return m
end
"""(grad_x, grad_skew) given grad_out; grad_skew is dL/dS entrywise (dim × dim)."""
function algebraic_backward(h::AlgebraicSequence, positions::Vector{Int64}, x::StridedMatrix{Float64}, grad_out::StridedMatrix{Float64})
    check_batch(x, h.dim, positions)
    check_batch(grad_out, h.dim, positions)
    gx = zeros(Float64, size(x))
    gs = zeros(Float64, h.dim, h.dim)
    @tensor tp positions vec_parts
    @tensor tx x batch_parts
    @tensor tg grad_out batch_parts
    @tensor tgx gx batch_parts
    @tensor tgs gs mat_parts
    GC.@preserve tp tx tg tgx tgs h begin
        check(ccall((:gpe_algebraic_sequence_backward, libgpe), Int32,
                    (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    h.ptr, ref(tp), ref(tx), ref(tg), ref(tgx), ref(tgs)))
    end
    return gx, gs
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

# ---- Coordinate encodings, analysis, INR ----
const SHIFTED_KINDS = (:gaussian, :triangle, :rectangle, :impulse, :sine, :square)

"""psi (N × K): psi[n, i] = psi(t_i - coords[n]), t_i = lo + (i - 1)(hi - lo) / K."""
function shifted_basis_encode(coords::Vector{Float64}; kind::Symbol=:gaussian, num_shifts::Integer,
                              width::Real=0.0, lo::Real=0.0, hi::Real=1.0)
    k = findfirst(==(kind), SHIFTED_KINDS)
    k === nothing && argerror("kind must be one of $(SHIFTED_KINDS); got $kind")
    num_shifts >= 1 || argerror("num_shifts must be >= 1; got $num_shifts")
    out = zeros(Float64, length(coords), num_shifts)
    @tensor tc coords vec_parts
    @tensor to out mat_parts
    o = ShiftedBasisOptions(ssize(ShiftedBasisOptions), k - 1, num_shifts, width, lo, hi)
    GC.@preserve tc to begin
        check(ccall((:gpe_shifted_basis_encode, libgpe), Int32, (Ref{ShiftedBasisOptions}, Ref{DLTensor}, Ref{DLTensor}),
                    o, ref(tc), ref(to)))
    end
    return out
end

"""Stable rank ‖A‖_F² / ‖A‖_2²."""
function stable_rank(a::StridedMatrix{Float64})
    out = Ref{Float64}(0.0)
    @tensor ta a mat_parts
    GC.@preserve ta begin
        check(ccall((:gpe_stable_rank, libgpe), Int32, (Ref{DLTensor}, Ref{Float64}), ref(ta), out))
    end
    return out[]
end

"""W (Ky × Kx) = A_y S A_x' with A = (Ψ'Ψ + λI)⁻¹Ψ' (Zheng et al. eq. 10)."""
function fit_separable_2d(psi_y::StridedMatrix{Float64}, psi_x::StridedMatrix{Float64}, image::StridedMatrix{Float64};
                          lambda::Real=0.0, float32_image_products::Bool=false, rcond::Real=0.0)
    w = zeros(Float64, size(psi_y, 2), size(psi_x, 2))
    @tensor ty psi_y mat_parts
    @tensor tx psi_x mat_parts
    @tensor ti image mat_parts
    @tensor tw w mat_parts
    o = SeparableFitOptions(ssize(SeparableFitOptions), float32_image_products ? 1 : 0, lambda, rcond)
    GC.@preserve ty tx ti tw begin
        check(ccall((:gpe_inr_fit_separable_2d, libgpe), Int32,
                    (Ref{SeparableFitOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    o, ref(ty), ref(tx), ref(ti), ref(tw)))
    end
    return w
end

"""Ψ_y W Ψ_x' (Ny × Nx)."""
function predict_separable_2d(psi_y::StridedMatrix{Float64}, psi_x::StridedMatrix{Float64}, w::StridedMatrix{Float64})
    out = zeros(Float64, size(psi_y, 1), size(psi_x, 1))
    @tensor ty psi_y mat_parts
    @tensor tx psi_x mat_parts
    @tensor tw w mat_parts
    @tensor to out mat_parts
    GC.@preserve ty tx tw to begin
        check(ccall((:gpe_inr_predict_separable_2d, libgpe), Int32,
                    (Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}), ref(ty), ref(tx), ref(tw), ref(to)))
    end
    return out
end

# ==== Since 0.4.0: coordinate encoders, graph encodings, analysis, 3D and blended fits ====
export CoordinateEncoder, fourier_features, fourier_features_from_frequencies, so2_bessel_sampled, so2_bessel,
       shifted_encoder, spherical_harmonics, encoder_dims, coordinate_encode, coordinate_backward,
       angular_frequencies, so2_bessel_terms, bessel_j, laplacian_eigenvectors, embedded_distance_matrix,
       embedder_stable_rank, embedder_distance, condition_number, fit_separable_3d, predict_separable_3d,
       fit_blended_2d, predict_blended_2d

struct FourierFeaturesOptions
    struct_size::UInt32
    kind::Int32
    dim::Int64
    num_frequencies::Int64
    scale::Float64
    convention::Int32
    seed::UInt64
end
struct So2BesselOptions
    struct_size::UInt32
    polar::Int32
    num_terms::Int64
    max_scale::Float64
    max_k::Int32
    order_m::Int32
    seed::UInt64
end
struct LaplacianOptions
    struct_size::UInt32
    kind::Int32
    skip_first::Int32
end
struct BlendedFitOptions
    struct_size::UInt32
    max_iterations::Int32
    lambda::Float64
    tolerance::Float64
end

# A 3-D array a (n0 × n1 × n2) as the C tensor [n0, n1, n2] with a's strides.
arr3_parts(a::StridedArray{T,3}) where {T} = (Int64[size(a)...], Int64[strides(a)...])

"""A point encoding of encodings/coordinate/ (gpe_coordinate_encoder). Points are
D × N (one column per point), features F × N; `encoder_dims` gives (D, F)."""
mutable struct CoordinateEncoder
    ptr::Ptr{Cvoid}
    input_dim::Int
    output_dim::Int
end
function wrap_encoder(code::Int32, out::Ref{Ptr{Cvoid}})
    check(code)
    e = CoordinateEncoder(out[], 0, 0)
    finalizer(close, e)
    d, f = Ref{Int64}(0), Ref{Int64}(0)
    check(ccall((:gpe_coordinate_encoder_dims, libgpe), Int32, (Ptr{Cvoid}, Ref{Int64}, Ref{Int64}), e.ptr, d, f))
    e.input_dim, e.output_dim = d[], f[]
    return e
end
function Base.close(e::CoordinateEncoder)
    e.ptr == C_NULL && return
    ccall((:gpe_coordinate_encoder_destroy, libgpe), Cvoid, (Ptr{Cvoid},), e.ptr)
    e.ptr = C_NULL
    return
end
encoder_dims(e::CoordinateEncoder) = (e.input_dim, e.output_dim)

const FOURIER_KINDS = (:gaussian, :linear, :log_linear, :nerf, :txt)
convention_code(c::Symbol) = c == :two_pi ? 0 : c == :angular ? 1 : argerror("convention must be :two_pi or :angular; got $c")

"""Fourier features [cos(w_f ⋅ x); sin(w_f ⋅ x)]: kind in $(FOURIER_KINDS) (gpe.h's GPE_FOURIER_*)."""
function fourier_features(kind::Symbol, dim::Integer, num_frequencies::Integer; scale::Real=1.0,
                          convention::Symbol=:two_pi, seed::Integer=0)
    k = findfirst(==(kind), FOURIER_KINDS)
    k === nothing && argerror("kind must be one of $(FOURIER_KINDS); got $kind")
    o = FourierFeaturesOptions(ssize(FourierFeaturesOptions), k - 1, dim, num_frequencies, scale,
                               convention_code(convention), UInt64(seed))
    out = Ref{Ptr{Cvoid}}(C_NULL)
    code = ccall((:gpe_fourier_features_create, libgpe), Int32, (Ref{FourierFeaturesOptions}, Ref{Ptr{Cvoid}}), o, out)
    return wrap_encoder(code, out)
end

"""Fourier features of given frequency rows b (F × D)."""
function fourier_features_from_frequencies(b::StridedMatrix{Float64}; convention::Symbol=:two_pi)
    c = convention_code(convention)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    @tensor tb b mat_parts
    code = GC.@preserve tb begin
        ccall((:gpe_fourier_features_create_from_frequencies, libgpe), Int32, (Ref{DLTensor}, Int32, Ref{Ptr{Cvoid}}),
              ref(tb), c, out)
    end
    return wrap_encoder(code, out)
end

"""Lim et al.'s SO(2) encoding with sampled terms (appendix D.2); points (x, y), or (r, θ) when polar."""
function so2_bessel_sampled(num_terms::Integer; max_scale::Real=1.0, max_k::Integer=2, order_m::Integer=0,
                            polar::Bool=false, seed::Integer=0)
    o = So2BesselOptions(ssize(So2BesselOptions), polar ? 1 : 0, num_terms, max_scale, max_k, order_m, UInt64(seed))
    out = Ref{Ptr{Cvoid}}(C_NULL)
    code = ccall((:gpe_so2_bessel_create_sampled, libgpe), Int32, (Ref{So2BesselOptions}, Ref{Ptr{Cvoid}}), o, out)
    return wrap_encoder(code, out)
end

"""SO(2) terms J_orders[t](scales[t] r) cos(weights[t] θ), then the sines."""
function so2_bessel(orders::Vector{Int64}, scales::Vector{Float64}, weights::Vector{Int64}; polar::Bool=false)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    @tensor to orders vec_parts
    @tensor ts scales vec_parts
    @tensor tw weights vec_parts
    code = GC.@preserve to ts tw begin
        ccall((:gpe_so2_bessel_create, libgpe), Int32, (Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Int32, Ref{Ptr{Cvoid}}),
              ref(to), ref(ts), ref(tw), polar ? 1 : 0, out)
    end
    return wrap_encoder(code, out)
end

"""Zheng et al.'s shifted bases over axes (NamedTuples with kind, num_shifts, width, lo,
hi): form :simple concatenates (eq. 16), :complex is the Kronecker product (eq. 17)."""
function shifted_encoder(form::Symbol, axes::Vector)
    form in (:simple, :complex) || argerror("form must be :simple or :complex; got $form")
    opts = ShiftedBasisOptions[]
    for a in axes
        k = findfirst(==(a.kind), SHIFTED_KINDS)
        k === nothing && argerror("kind must be one of $(SHIFTED_KINDS); got $(a.kind)")
        push!(opts, ShiftedBasisOptions(ssize(ShiftedBasisOptions), k - 1, a.num_shifts, a.width, a.lo, a.hi))
    end
    out = Ref{Ptr{Cvoid}}(C_NULL)
    code = GC.@preserve opts begin
        ccall((:gpe_shifted_encoder_create, libgpe), Int32, (Int32, Ptr{ShiftedBasisOptions}, Int64, Ref{Ptr{Cvoid}}),
              form == :simple ? 0 : 1, isempty(opts) ? C_NULL : pointer(opts), length(opts), out)
    end
    return wrap_encoder(code, out)
end

"""Real spherical harmonics Y_lm, l ≤ max_degree, feature l² + l + m + 1; points 3 × N."""
function spherical_harmonics(max_degree::Integer)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    code = ccall((:gpe_spherical_harmonics_create, libgpe), Int32, (Int32, Ref{Ptr{Cvoid}}), max_degree, out)
    return wrap_encoder(code, out)
end

function check_points(e::CoordinateEncoder, points::AbstractMatrix)
    size(points, 1) == e.input_dim ||
        argerror("points is $(size(points, 1)) × $(size(points, 2)); expected D × N with D = $(e.input_dim)")
end

"""Features F × N of points D × N."""
function coordinate_encode(e::CoordinateEncoder, points::StridedMatrix{Float64})
    check_points(e, points)
    out = zeros(Float64, e.output_dim, size(points, 2))
    @tensor tp points batch_parts
    @tensor to out batch_parts
    GC.@preserve tp to e begin
        check(ccall((:gpe_coordinate_encode, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}),
                    e.ptr, ref(tp), ref(to)))
    end
    return out
end

"""grad_points (D × N) = Σ_f grad_features[f, n] ∂features[f, n]/∂points[:, n]."""
function coordinate_backward(e::CoordinateEncoder, points::StridedMatrix{Float64}, grad_features::StridedMatrix{Float64})
    check_points(e, points)
    out = zeros(Float64, size(points))
    @tensor tp points batch_parts
    @tensor tg grad_features batch_parts
    @tensor to out batch_parts
    GC.@preserve tp tg to e begin
        check(ccall((:gpe_coordinate_backward, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    e.ptr, ref(tp), ref(tg), ref(to)))
    end
    return out
end

"""The angular frequencies w ((F/2) × D; angle = w ⋅ x) of a Fourier-feature encoder."""
function angular_frequencies(e::CoordinateEncoder)
    w = zeros(Float64, div(e.output_dim, 2), e.input_dim)
    @tensor tw w mat_parts
    GC.@preserve tw e begin
        check(ccall((:gpe_fourier_features_angular_frequencies, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}), e.ptr, ref(tw)))
    end
    return w
end

"""(orders, scales, weights) of an SO(2) encoder."""
function so2_bessel_terms(e::CoordinateEncoder)
    t = div(e.output_dim, 2)
    orders, scales, weights = zeros(Int64, t), zeros(Float64, t), zeros(Int64, t)
    @tensor to orders vec_parts
    @tensor ts scales vec_parts
    @tensor tw weights vec_parts
    GC.@preserve to ts tw e begin
        check(ccall((:gpe_so2_bessel_terms, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    e.ptr, ref(to), ref(ts), ref(tw)))
    end
    return orders, scales, weights
end

"""J_order.(x), the Bessel function of the first kind (order 0..20, x ≥ 0)."""
function bessel_j(order::Integer, x::Vector{Float64})
    out = zeros(Float64, length(x))
    @tensor tx x vec_parts
    @tensor to out vec_parts
    GC.@preserve tx to begin
        check(ccall((:gpe_bessel_j, libgpe), Int32, (Int32, Ref{DLTensor}, Ref{DLTensor}), order, ref(tx), ref(to)))
    end
    return out
end

"""The k smallest Laplacian eigenpairs of an undirected graph on nodes 0..num_nodes-1:
(eigenvalues, eigenvectors num_nodes × k). kind :combinatorial (D - A) or :symmetric."""
function laplacian_eigenvectors(num_nodes::Integer, edges::Vector{Tuple{Int,Int}}, k::Integer;
                                weights::Union{Nothing,Vector{Float64}}=nothing, kind::Symbol=:combinatorial,
                                skip_first::Bool=false)
    kind in (:combinatorial, :symmetric) || argerror("kind must be :combinatorial or :symmetric; got $kind")
    e = Int64[x for (a, b) in edges for x in (a, b)]
    em = reshape(e, 2, length(edges))  # column per edge: the C tensor [E, 2]
    o = LaplacianOptions(ssize(LaplacianOptions), kind == :combinatorial ? 0 : 1, skip_first ? 1 : 0)
    values = zeros(Float64, k)
    vectors = zeros(Float64, num_nodes, k)
    @tensor te em batch_parts
    @tensor tv values vec_parts
    @tensor tm vectors mat_parts
    tw = nothing
    if weights !== nothing
        length(weights) == length(edges) || argerror("weights has $(length(weights)) values; expected one per edge")
        @tensor tw weights vec_parts
    end
    GC.@preserve te tv tm tw begin
        check(ccall((:gpe_laplacian_eigenvectors, libgpe), Int32,
                    (Ref{LaplacianOptions}, Int64, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    o, num_nodes, ref(te), ref(tw), ref(tv), ref(tm)))
    end
    return values, vectors
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
"""cond(Ψ) = s_max / s_min (Inf when rank deficient)."""
function condition_number(psi::StridedMatrix{Float64})
    out = Ref{Float64}(0.0)
    @tensor tp psi mat_parts
    GC.@preserve tp begin
        check(ccall((:gpe_inr_condition_number, libgpe), Int32, (Ref{DLTensor}, Ref{Float64}), ref(tp), out))
    end
    return out[]
end

"""Volumes on a separable grid (Zheng et al. sec. 5): W (K0 × K1 × K2) from Ψ_d (n_d × K_d)
and volume (n0 × n1 × n2)."""
function fit_separable_3d(psi0::StridedMatrix{Float64}, psi1::StridedMatrix{Float64}, psi2::StridedMatrix{Float64},
                          volume::StridedArray{Float64,3}; lambda::Real=0.0, rcond::Real=0.0)
    w = zeros(Float64, size(psi0, 2), size(psi1, 2), size(psi2, 2))
    o = SeparableFitOptions(ssize(SeparableFitOptions), 0, lambda, rcond)
    @tensor t0 psi0 mat_parts
    @tensor t1 psi1 mat_parts
    @tensor t2 psi2 mat_parts
    @tensor tv volume arr3_parts
    @tensor tw w arr3_parts
    GC.@preserve t0 t1 t2 tv tw begin
        check(ccall((:gpe_inr_fit_separable_3d, libgpe), Int32,
                    (Ref{SeparableFitOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    o, ref(t0), ref(t1), ref(t2), ref(tv), ref(tw)))
    end
    return w
end
"""W ×₀ Ψ0 ×₁ Ψ1 ×₂ Ψ2 (n0 × n1 × n2)."""
function predict_separable_3d(psi0::StridedMatrix{Float64}, psi1::StridedMatrix{Float64}, psi2::StridedMatrix{Float64},
                              w::StridedArray{Float64,3})
    out = zeros(Float64, size(psi0, 1), size(psi1, 1), size(psi2, 1))
    @tensor t0 psi0 mat_parts
    @tensor t1 psi1 mat_parts
    @tensor t2 psi2 mat_parts
    @tensor tw w arr3_parts
    @tensor to out arr3_parts
    GC.@preserve t0 t1 t2 tw to begin
        check(ccall((:gpe_inr_predict_separable_3d, libgpe), Int32,
                    (Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    ref(t0), ref(t1), ref(t2), ref(tw), ref(to)))
    end
    return out
end

"""Blended fit of scattered samples (Zheng et al. sec. 5, app. B.2): 1-D encoders ex, ey,
grids, points 2 × P (x; y), values P. Returns (W (Ky × Kx), iterations, rms_residual)."""
function fit_blended_2d(ex::CoordinateEncoder, ey::CoordinateEncoder, grid_x::Vector{Float64}, grid_y::Vector{Float64},
                        points::StridedMatrix{Float64}, values::Vector{Float64};
                        max_iterations::Integer=500, lambda::Real=1e-6, tolerance::Real=1e-6)
    w = zeros(Float64, ey.output_dim, ex.output_dim)
    o = BlendedFitOptions(ssize(BlendedFitOptions), max_iterations, lambda, tolerance)
    iterations, rms = Ref{Int32}(0), Ref{Float64}(0.0)
    @tensor tgx grid_x vec_parts
    @tensor tgy grid_y vec_parts
    @tensor tp points batch_parts
    @tensor tv values vec_parts
    @tensor tw w mat_parts
    GC.@preserve tgx tgy tp tv tw ex ey begin
        check(ccall((:gpe_inr_fit_blended_2d, libgpe), Int32,
                    (Ref{BlendedFitOptions}, Ptr{Cvoid}, Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor},
                     Ref{DLTensor}, Ref{DLTensor}, Ref{Int32}, Ref{Float64}),
                    o, ex.ptr, ey.ptr, ref(tgx), ref(tgy), ref(tp), ref(tv), ref(tw), iterations, rms))
    end
    return w, Int(iterations[]), rms[]
end
"""The blended model's values at points (2 × P) for weights W (Ky × Kx)."""
function predict_blended_2d(ex::CoordinateEncoder, ey::CoordinateEncoder, grid_x::Vector{Float64}, grid_y::Vector{Float64},
                            points::StridedMatrix{Float64}, w::StridedMatrix{Float64})
    out = zeros(Float64, size(points, 2))
    @tensor tgx grid_x vec_parts
    @tensor tgy grid_y vec_parts
    @tensor tp points batch_parts
    @tensor tw w mat_parts
    @tensor to out vec_parts
    GC.@preserve tgx tgy tp tw to ex ey begin
        check(ccall((:gpe_inr_predict_blended_2d, libgpe), Int32,
                    (Ptr{Cvoid}, Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    ex.ptr, ey.ptr, ref(tgx), ref(tgy), ref(tp), ref(tw), ref(to)))
    end
    return out
end

# ==== Since 0.4.0: algebraic trees, grids, periodic domains, locality; Shaw values; Transformer-XL ====
export AlgebraicTree, algebraic_tree_shape, algebraic_tree_apply, algebraic_tree_matrix, algebraic_tree_backward,
       algebraic_tree_node_matrices,
       AlgebraicGrid, algebraic_grid_shape, algebraic_grid_apply, algebraic_grid_backward,
       algebraic_periodic_apply, locality_scale!, shaw_value_output, shaw_value_output_backward,
       transformer_xl_score_terms, transformer_xl_score_terms_backward

struct AlgebraicTreeOptions
    struct_size::UInt32
    dim::Int64
    num_branches::Int64
    skews::Ptr{Float64}
end
struct AlgebraicGridOptions
    struct_size::UInt32
    num_axes::Int64
    dims::Ptr{Int64}
    skews::Ptr{Float64}
end
struct AlgebraicPeriodicOptions
    struct_size::UInt32
    dim::Int64
    period::Int64
    multipliers::Ptr{Int64}
end
struct TransformerXlOptions
    struct_size::UInt32
    base::Float64
end

# Square matrices as the C API's row-major blocks, one after another.
rowmajor(ms) = Float64[m[r, c] for m in ms for r in 1:size(m, 1) for c in 1:size(m, 2)]

"""Kogkalidis et al. sec. 3.2: branch c acts by W_c = exp(skews[c + 1]); the node at
address (c_1, ..., c_m) (0-based child indices) by W_{c_1} ⋯ W_{c_m}."""
mutable struct AlgebraicTree
    ptr::Ptr{Cvoid}
    dim::Int
    num_branches::Int
end
function AlgebraicTree(skews::Vector{Matrix{Float64}})
    d = isempty(skews) ? 0 : size(skews[1], 1)
    all(s -> size(s) == (d, d), skews) || argerror("skews must all be $d × $d")
    flat = rowmajor(skews)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve flat begin
        o = AlgebraicTreeOptions(ssize(AlgebraicTreeOptions), d, length(skews), isempty(flat) ? C_NULL : pointer(flat))
        check(ccall((:gpe_algebraic_tree_create, libgpe), Int32, (Ref{AlgebraicTreeOptions}, Ref{Ptr{Cvoid}}), o, out))
    end
    t = AlgebraicTree(out[], d, length(skews))
    finalizer(close, t)
    return t
end
function Base.close(t::AlgebraicTree)
    t.ptr == C_NULL && return
    ccall((:gpe_algebraic_tree_destroy, libgpe), Cvoid, (Ptr{Cvoid},), t.ptr)
    t.ptr = C_NULL
    return
end
function algebraic_tree_shape(t::AlgebraicTree)
    d, k = Ref{Int64}(0), Ref{Int64}(0)
    check(ccall((:gpe_algebraic_tree_shape, libgpe), Int32, (Ptr{Cvoid}, Ref{Int64}, Ref{Int64}), t.ptr, d, k))
    return (Int(d[]), Int(k[]))
end
# Addresses as the C tensor [N, L]: an L × N Int64 matrix, -1 padded.
function address_matrix(addresses::Vector{Vector{Int64}})
    depth = max(1, maximum(length, addresses; init=0))
    a = fill(Int64(-1), depth, length(addresses))
    for (n, addr) in enumerate(addresses)
        a[1:length(addr), n] = addr
    end
    return a
end
"""Column n of x (dim × N) moved by ρ(addresses[n])."""
function algebraic_tree_apply(t::AlgebraicTree, addresses::Vector{Vector{Int64}}, x::StridedMatrix{T}) where {T<:Union{Float32,Float64}}
    check_batch(x, t.dim, addresses)
    a = address_matrix(addresses)
    out = similar(x, T, size(x))
    @tensor ta a batch_parts
    @tensor tx x batch_parts
    @tensor to out batch_parts
    GC.@preserve ta tx to t begin
        check(ccall((:gpe_algebraic_tree_apply, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    t.ptr, ref(ta), ref(tx), ref(to)))
    end
    return out
end
"""ρ(address) (dim × dim)."""
function algebraic_tree_matrix(t::AlgebraicTree, address::Vector{Int64})
    m = zeros(Float64, t.dim, t.dim)
    @tensor tm m mat_parts
    GC.@preserve tm address t begin
        check(ccall((:gpe_algebraic_tree_matrix, libgpe), Int32, (Ptr{Cvoid}, Ptr{Int64}, Int64, Ref{DLTensor}),
                    t.ptr, isempty(address) ? C_NULL : pointer(address), length(address), ref(tm)))
    end
    return m
end
"""Every node of depth <= max_depth as dim × dim × count (count = Σ_{t ≤ max_depth} k^t),
built one depth at a time (level t + 1 = level t times each W_c; Kogkalidis et al. sec.
3.2.3), in level order: the root first, then within a depth the addresses as base-k
numbers (m[:, :, n] is the n-th node's ρ)."""
function algebraic_tree_node_matrices(t::AlgebraicTree, max_depth::Integer)
    max_depth >= 0 || argerror("max_depth must be >= 0; got $max_depth")
    # The library holds at most 2^27 doubles: stop counting well before Int overflows.
    limit = 2^27
    count, level = 0, 1
    for _ in 0:max_depth
        count += level
        count <= limit ÷ max(1, t.dim * t.dim) ||
            argerror("the nodes of depth <= $max_depth need more than 2^27 doubles")
        level *= t.num_branches
    end
    m = zeros(Float64, t.dim, t.dim, count)
    # The C tensor [count, row, col] over m[row, col, node].
    ms, mst = Int64[count, t.dim, t.dim], Int64[t.dim * t.dim, 1, t.dim]
    tm = (dl(m, ms, mst), ms, mst, m)
    GC.@preserve tm t begin
        check(ccall((:gpe_algebraic_tree_node_matrices, libgpe), Int32, (Ptr{Cvoid}, Int64, Ref{DLTensor}),
                    t.ptr, max_depth, ref(tm)))
    end
    return m
end
"""(grad_x (dim × N), grad_skews (dim × dim × num_branches, entrywise dL/dS_c)) given grad_out."""
function algebraic_tree_backward(t::AlgebraicTree, addresses::Vector{Vector{Int64}}, x::StridedMatrix{Float64},
                                 grad_out::StridedMatrix{Float64})
    check_batch(x, t.dim, addresses)
    check_batch(grad_out, t.dim, addresses)
    a = address_matrix(addresses)
    gx = zeros(Float64, size(x))
    gs = zeros(Float64, t.dim, t.dim, t.num_branches)
    @tensor ta a batch_parts
    @tensor tx x batch_parts
    @tensor tg grad_out batch_parts
    @tensor tgx gx batch_parts
    # The C tensor [branch, row, col] over gs[row, col, branch].
    gss, gst = Int64[t.num_branches, t.dim, t.dim], Int64[t.dim * t.dim, 1, t.dim]
    tgs = (dl(gs, gss, gst), gss, gst, gs)
    GC.@preserve ta tx tg tgx tgs t begin
        check(ccall((:gpe_algebraic_tree_backward, libgpe), Int32,
                    (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    t.ptr, ref(ta), ref(tx), ref(tg), ref(tgx), ref(tgs)))
    end
    return gx, gs
end

"""Kogkalidis et al. sec. 3.3: a grid point acts by blockdiag(exp(p_1 S_1), ..., exp(p_A S_A))."""
mutable struct AlgebraicGrid
    ptr::Ptr{Cvoid}
    dims::Vector{Int}
    dim::Int
end
function AlgebraicGrid(skews::Vector{Matrix{Float64}})
    all(s -> size(s, 1) == size(s, 2), skews) || argerror("skews must be square")
    dims = Int64[size(s, 1) for s in skews]
    flat = rowmajor(skews)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve dims flat begin
        o = AlgebraicGridOptions(ssize(AlgebraicGridOptions), length(skews), isempty(dims) ? C_NULL : pointer(dims),
                                 isempty(flat) ? C_NULL : pointer(flat))
        check(ccall((:gpe_algebraic_grid_create, libgpe), Int32, (Ref{AlgebraicGridOptions}, Ref{Ptr{Cvoid}}), o, out))
    end
    g = AlgebraicGrid(out[], Int.(dims), sum(dims; init=0))
    finalizer(close, g)
    return g
end
function Base.close(g::AlgebraicGrid)
    g.ptr == C_NULL && return
    ccall((:gpe_algebraic_grid_destroy, libgpe), Cvoid, (Ptr{Cvoid},), g.ptr)
    g.ptr = C_NULL
    return
end
function algebraic_grid_shape(g::AlgebraicGrid)
    d, a = Ref{Int64}(0), Ref{Int64}(0)
    check(ccall((:gpe_algebraic_grid_shape, libgpe), Int32, (Ptr{Cvoid}, Ref{Int64}, Ref{Int64}), g.ptr, d, a))
    return (Int(d[]), Int(a[]))
end
"""Column n of x (dim × N) moved by ρ(positions[:, n]); positions num_axes × N."""
function algebraic_grid_apply(g::AlgebraicGrid, positions::StridedMatrix{Int64}, x::StridedMatrix{T}) where {T<:Union{Float32,Float64}}
    size(positions, 1) == length(g.dims) || argerror("positions must be num_axes × N")
    check_batch(x, g.dim, 1:size(positions, 2))
    out = similar(x, T, size(x))
    @tensor tp positions batch_parts
    @tensor tx x batch_parts
    @tensor to out batch_parts
    GC.@preserve tp tx to g begin
        check(ccall((:gpe_algebraic_grid_apply, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    g.ptr, ref(tp), ref(tx), ref(to)))
    end
    return out
end
"""(grad_x, [dL/dS_a for each axis]) given grad_out."""
function algebraic_grid_backward(g::AlgebraicGrid, positions::StridedMatrix{Int64}, x::StridedMatrix{Float64},
                                 grad_out::StridedMatrix{Float64})
    size(positions, 1) == length(g.dims) || argerror("positions must be num_axes × N")
    check_batch(x, g.dim, 1:size(positions, 2))
    check_batch(grad_out, g.dim, 1:size(positions, 2))
    gx = zeros(Float64, size(x))
    gs = zeros(Float64, sum(d * d for d in g.dims; init=0))
    @tensor tp positions batch_parts
    @tensor tx x batch_parts
    @tensor tg grad_out batch_parts
    @tensor tgx gx batch_parts
    @tensor tgs gs vec_parts
    GC.@preserve tp tx tg tgx tgs g begin
        check(ccall((:gpe_algebraic_grid_backward, libgpe), Int32,
                    (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    g.ptr, ref(tp), ref(tx), ref(tg), ref(tgx), ref(tgs)))
    end
    mats = Matrix{Float64}[]
    at = 0
    for d in g.dims
        push!(mats, permutedims(reshape(gs[at+1:at+d*d], d, d)))  # row-major block
        at += d * d
    end
    return gx, mats
end

"""Kogkalidis et al. sec. 3.4.2: plane i of x (dim × N) rotates by 2π multipliers[i] p / period."""
function algebraic_periodic_apply(period::Integer, multipliers::Vector{Int64}, positions::Vector{Int64},
                                  x::StridedMatrix{T}) where {T<:Union{Float32,Float64}}
    check_batch(x, 2 * length(multipliers), positions)
    out = similar(x, T, size(x))
    @tensor tp positions vec_parts
    @tensor tx x batch_parts
    @tensor to out batch_parts
    GC.@preserve multipliers tp tx to begin
        o = AlgebraicPeriodicOptions(ssize(AlgebraicPeriodicOptions), 2 * length(multipliers), period,
                                     isempty(multipliers) ? C_NULL : pointer(multipliers))
        check(ccall((:gpe_algebraic_periodic_apply, libgpe), Int32,
                    (Ref{AlgebraicPeriodicOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}), o, ref(tp), ref(tx), ref(to)))
    end
    return out
end

"""scores[r, c] *= c^|q_positions[r] - k_positions[c]| in place (Lq × Lk; sec. 4)."""
function locality_scale!(scores::StridedMatrix{T}, c::Real, q_positions::Vector{Int64}, k_positions::Vector{Int64}) where {T<:Union{Float32,Float64}}
    @tensor tq q_positions vec_parts
    @tensor tk k_positions vec_parts
    @tensor ts scores mat_parts
    GC.@preserve tq tk ts begin
        check(ccall((:gpe_locality_scale, libgpe), Int32, (Float64, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    c, ref(tq), ref(tk), ref(ts)))
    end
    return scores
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

# ==== Since 0.3.0 (with 0.4.0's GRAPE-A, published schedules and parameter gradients):
# ==== RoPE, additive biases, attention ====
export Rope, rope_shape, rope_frequencies, rope_forward, rope_backward, published_schedule,
       RopeTable, rope_table, rope_table_forward, rope_table_backward,
       Bias, bias_alibi, bias_t5, bias_fox, bias_grape_ap, bias_grape_a, bias_info, bias_alibi_slopes,
       bias_fill_tile, bias_accumulate_gradient!, bias_fox_logit_gradient, bias_grape_a_lift,
       attention_forward, attention_backward, attention_backward_v2, attention_backward_with_parameters

struct RopeOptions
    struct_size::UInt32
    pairing::Int32
    head_dim::Int64
    rotary_dim::Int64
    base::Float64
    schedule::Int32
    num_threads::Int32
    factor::Float64
    original_max_position::Int64
    current_length::Int64
    beta_fast::Float64
    beta_slow::Float64
    yarn_truncate::Int32
    has_mscale::Int32
    mscale::Float64
    mscale_all_dim::Float64
    has_attention_factor::Int32
    attention_factor::Float64
    short_factor::Ptr{Float64}
    short_factor_len::Int64
    long_factor::Ptr{Float64}
    long_factor_len::Int64
    max_position::Int64
    low_freq_factor::Float64
    high_freq_factor::Float64
    xpos::Int32
    xpos_gamma::Float64
    xpos_scale_base::Float64
    xpos_centre::Int64
    axes::Int32
    num_axes::Int32
    mrope_sections::Ptr{Int64}
    num_mrope_sections::Int64
end
struct RopeTokens
    struct_size::UInt32
    layout::Int32
    role::Int32
    position_ids::Ptr{DLTensor}
    offsets::Ptr{DLTensor}
    cu_seqlens::Ptr{DLTensor}
end
struct AlibiOptions
    struct_size::UInt32
    form::Int32
    num_heads::Int64
    slopes::Ptr{Float64}
end
struct T5Options
    struct_size::UInt32
    bidirectional::Int32
    num_heads::Int64
    num_buckets::Int64
    max_distance::Int64
    table::Ptr{Float64}
end
struct FoxOptions
    struct_size::UInt32
    length::Int64
    num_heads::Int64
    first_position::Int64
    gate_logits::Ptr{Float64}
end
struct GrapeApOptions
    struct_size::UInt32
    length::Int64
    num_heads::Int64
    rank::Int64
    first_position::Int64
    w::Ptr{Float64}
    u::Ptr{Float64}
end
struct GrapeAOptions
    struct_size::UInt32
    path::Int32
    num_heads::Int64
    head_dim::Int64
    slopes::Ptr{Float64}
    gated::Int32
    length::Int64
    first_position::Int64
    gate_logits::Ptr{Float64}
end
# gpe_attention_options, structured positions and Shaw labels included (struct_size
# tells the library which fields exist).
struct AttentionOptions
    struct_size::UInt32
    causal::Int32
    softmax_scale::Float64
    num_threads::Int32
    rope_dim::Int64
    rope_base::Float64
    rope_pairing::Int32
    grape_m::Ptr{Cvoid}
    algebraic::Ptr{Cvoid}
    bias::Ptr{Cvoid}
    q_positions::Ptr{DLTensor}
    k_positions::Ptr{DLTensor}
    cu_seqlens_q::Ptr{DLTensor}
    cu_seqlens_k::Ptr{DLTensor}
    rope_axes::Int32
    rope_sections_interleaved::Int32
    rope_sections::Ptr{DLTensor}
    algebraic_tree::Ptr{DLTensor}
    algebraic_grid::Ptr{DLTensor}
    q_axes::Ptr{DLTensor}
    k_axes::Ptr{DLTensor}
    q_tree_offsets::Ptr{DLTensor}
    q_tree_children::Ptr{DLTensor}
    k_tree_offsets::Ptr{DLTensor}
    k_tree_children::Ptr{DLTensor}
    shaw_max_distance::Int64
    shaw_key_table::Ptr{DLTensor}
    shaw_value_table::Ptr{DLTensor}
end
struct AttentionParamGrads
    struct_size::UInt32
    d_bias_a::Ptr{DLTensor}
    d_bias_b::Ptr{DLTensor}
    d_grape_a::Ptr{DLTensor}
    d_grape_b::Ptr{DLTensor}
    d_grape_omega::Ptr{DLTensor}
    d_shaw_key_table::Ptr{DLTensor}
    d_shaw_value_table::Ptr{DLTensor}
end

# An N-d Julia array as the C tensor with the dimensions reversed (the first Julia
# dimension, contiguous, is the last C one): head_dim × heads × seq × batch is bshd.
rev_parts(a::StridedArray) = (Int64[reverse(size(a))...], Int64[reverse(strides(a))...])
# The address of a tensor made by @tensor (C_NULL for nothing), for struct fields.
tptr(t) = t === nothing ? Ptr{DLTensor}(C_NULL) : Base.unsafe_convert(Ptr{DLTensor}, t[1])

const SCHEDULES = (:default, :linear, :dynamic_ntk, :yarn, :longrope, :llama3)
const ROPE_AXES = (:single, :axial, :mrope, :mrope_interleaved)

"""A schedule's published parameters (gpe_rope_options_use_schedule) as keyword
arguments for `Rope`: e.g. `Rope(128; base=500000.0, published_schedule(:llama3)...)`."""
function published_schedule(schedule::Symbol)
    s = findfirst(==(schedule), SCHEDULES)
    s === nothing && argerror("schedule must be one of $(SCHEDULES); got $schedule")
    r = Ref(rope_options_struct(2))
    check(ccall((:gpe_rope_options_use_schedule, libgpe), Int32, (Int32, Ref{RopeOptions}), s - 1, r))
    o = r[]
    return (schedule=schedule, factor=o.factor, original_max_position=o.original_max_position,
            current_length=o.current_length, beta_fast=o.beta_fast, beta_slow=o.beta_slow,
            low_freq_factor=o.low_freq_factor, high_freq_factor=o.high_freq_factor, max_position=o.max_position)
end

# GPE_ROPE_OPTIONS_INIT with head_dim, and the given fields replaced.
function rope_options_struct(head_dim::Integer; rotary_dim::Integer=0, base::Real=10000.0, pairing::Symbol=:half_split,
                             schedule::Symbol=:default, num_threads::Integer=1, factor::Real=1.0,
                             original_max_position::Integer=4096, current_length::Integer=0, beta_fast::Real=32.0,
                             beta_slow::Real=1.0, attention_factor::Union{Nothing,Real}=nothing,
                             short_factor::Ptr{Float64}=Ptr{Float64}(C_NULL), short_factor_len::Integer=0,
                             long_factor::Ptr{Float64}=Ptr{Float64}(C_NULL), long_factor_len::Integer=0,
                             max_position::Integer=131072, low_freq_factor::Real=1.0, high_freq_factor::Real=4.0,
                             xpos::Union{Nothing,NamedTuple}=nothing, axes::Symbol=:single, num_axes::Integer=1,
                             mrope_sections::Ptr{Int64}=Ptr{Int64}(C_NULL), num_mrope_sections::Integer=0)
    pairing in (:interleaved, :half_split) || argerror("pairing must be :interleaved or :half_split; got $pairing")
    s = findfirst(==(schedule), SCHEDULES)
    s === nothing && argerror("schedule must be one of $(SCHEDULES); got $schedule")
    a = findfirst(==(axes), ROPE_AXES)
    a === nothing && argerror("axes must be one of $(ROPE_AXES); got $axes")
    return RopeOptions(ssize(RopeOptions), pairing == :interleaved ? 0 : 1, head_dim, rotary_dim, base, s - 1,
                       num_threads, factor, original_max_position, current_length, beta_fast, beta_slow, 1, 0, 1.0,
                       1.0, attention_factor === nothing ? 0 : 1, attention_factor === nothing ? 1.0 : attention_factor,
                       short_factor, short_factor_len, long_factor, long_factor_len, max_position, low_freq_factor,
                       high_freq_factor, xpos === nothing ? 0 : 1, xpos === nothing ? 0.4 : xpos.gamma,
                       xpos === nothing ? 512.0 : xpos.scale_base, xpos === nothing ? 0 : xpos.centre, a - 1,
                       num_axes, mrope_sections, num_mrope_sections)
end

"""RoPE with a frequency schedule (gpe_rope_create). Keywords: rotary_dim, base,
pairing (:half_split or :interleaved), schedule ($(SCHEDULES)) and its parameters
(factor, original_max_position, current_length, beta_fast, beta_slow,
attention_factor, short_factor / long_factor vectors, max_position, low_freq_factor,
high_freq_factor), xpos (gamma=, scale_base=, centre=), axes ($(ROPE_AXES)) with num_axes
or mrope_sections, num_threads."""
mutable struct Rope
    ptr::Ptr{Cvoid}
    head_dim::Int
    rotary_dim::Int
    num_axes::Int
end
function Rope(head_dim::Integer; short_factor::Vector{Float64}=Float64[], long_factor::Vector{Float64}=Float64[],
              mrope_sections::Vector{Int64}=Int64[], kwargs...)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    GC.@preserve short_factor long_factor mrope_sections begin
        o = rope_options_struct(head_dim; kwargs...,
                                short_factor=isempty(short_factor) ? Ptr{Float64}(C_NULL) : pointer(short_factor),
                                short_factor_len=length(short_factor),
                                long_factor=isempty(long_factor) ? Ptr{Float64}(C_NULL) : pointer(long_factor),
                                long_factor_len=length(long_factor),
                                mrope_sections=isempty(mrope_sections) ? Ptr{Int64}(C_NULL) : pointer(mrope_sections),
                                num_mrope_sections=length(mrope_sections))
        check(ccall((:gpe_rope_create, libgpe), Int32, (Ref{RopeOptions}, Ref{Ptr{Cvoid}}), o, out))
    end
    r = Rope(out[], 0, 0, 0)
    finalizer(close, r)
    h, rd, a = Ref{Int64}(0), Ref{Int64}(0), Ref{Int64}(0)
    check(ccall((:gpe_rope_shape, libgpe), Int32, (Ptr{Cvoid}, Ref{Int64}, Ref{Int64}, Ref{Int64}), r.ptr, h, rd, a))
    r.head_dim, r.rotary_dim, r.num_axes = h[], rd[], a[]
    return r
end
function Base.close(r::Rope)
    r.ptr == C_NULL && return
    ccall((:gpe_rope_destroy, libgpe), Cvoid, (Ptr{Cvoid},), r.ptr)
    r.ptr = C_NULL
    return
end
rope_shape(r::Rope) = (r.head_dim, r.rotary_dim, r.num_axes)
"""(θ_i for the rotary_dim / 2 planes, attention factor)."""
function rope_frequencies(r::Rope)
    thetas = zeros(Float64, div(r.rotary_dim, 2))
    m = Ref{Float64}(0.0)
    check(ccall((:gpe_rope_frequencies, libgpe), Int32, (Ptr{Cvoid}, Ptr{Float64}, Int64, Ref{Float64}),
                r.ptr, thetas, length(thetas), m))
    return thetas, m[]
end

function rope_call(backward::Bool, r::Rope, x::StridedArray{T}, layout::Symbol, key::Bool, position_ids, offsets,
                   cu_seqlens) where {T<:Union{Float32,Float64}}
    l = findfirst(==(layout), (:bshd, :sbhd, :thd))
    l === nothing && argerror("layout must be :bshd, :sbhd or :thd; got $layout")
    out = similar(x, T, size(x))
    @tensor tx x rev_parts
    @tensor to out rev_parts
    tid = position_ids === nothing ? nothing : (@tensor t_ position_ids rev_parts; t_)
    toff = offsets === nothing ? nothing : (@tensor t_ offsets vec_parts; t_)
    tcu = cu_seqlens === nothing ? nothing : (@tensor t_ cu_seqlens vec_parts; t_)
    GC.@preserve tx to tid toff tcu r begin
        tok = RopeTokens(ssize(RopeTokens), l - 1, key ? 1 : 0, tptr(tid), tptr(toff), tptr(tcu))
        # ccall needs a constant function name: one call per direction.
        if backward
            check(ccall((:gpe_rope_backward, libgpe), Int32, (Ptr{Cvoid}, Ref{RopeTokens}, Ref{DLTensor}, Ref{DLTensor}),
                        r.ptr, tok, ref(tx), ref(to)))
        else
            check(ccall((:gpe_rope_forward, libgpe), Int32, (Ptr{Cvoid}, Ref{RopeTokens}, Ref{DLTensor}, Ref{DLTensor}),
                        r.ptr, tok, ref(tx), ref(to)))
        end
    end
    return out
end
"""RoPE of x: head_dim × heads × seq × batch (:bshd), head_dim × heads × batch × seq
(:sbhd) or head_dim × heads × tokens (:thd, with cu_seqlens). position_ids: tokens, or
tokens × num_axes for multi-axis RoPE; offsets: one per sequence; key: xPos's role."""
rope_forward(r::Rope, x::StridedArray; layout::Symbol=:bshd, key::Bool=false, position_ids=nothing, offsets=nothing,
             cu_seqlens=nothing) = rope_call(false, r, x, layout, key, position_ids, offsets, cu_seqlens)
"""The backward pass (the transposed rotation) of `rope_forward`, same arguments."""
rope_backward(r::Rope, dy::StridedArray; layout::Symbol=:bshd, key::Bool=false, position_ids=nothing, offsets=nothing,
              cu_seqlens=nothing) = rope_call(true, r, dy, layout, key, position_ids, offsets, cu_seqlens)

"""RoPE's cos/sin table for one token numbering (gpe_rope_table), built once by
`rope_table` and applied to q, k and every layer with the same tokens (any number of
heads): forming the angles costs far more than applying them. A table built from a
Float64 array serves Float64 arrays; one built from Float32 serves Float32."""
mutable struct RopeTable
    ptr::Ptr{Cvoid}
end
function Base.close(t::RopeTable)
    t.ptr == C_NULL && return
    ccall((:gpe_rope_table_destroy, libgpe), Cvoid, (Ptr{Cvoid},), t.ptr)
    t.ptr = C_NULL
    return
end
"""The table for the tokens of `like` (an array shaped and typed as the ones to rotate;
its values are not read), with `rope_forward`'s keywords (layout, key, position_ids,
offsets, cu_seqlens). It copies what it needs: `r` may be closed afterwards."""
function rope_table(r::Rope, like::StridedArray{T}; layout::Symbol=:bshd, key::Bool=false, position_ids=nothing,
                    offsets=nothing, cu_seqlens=nothing) where {T<:Union{Float32,Float64}}
    l = findfirst(==(layout), (:bshd, :sbhd, :thd))
    l === nothing && argerror("layout must be :bshd, :sbhd or :thd; got $layout")
    out = Ref{Ptr{Cvoid}}(C_NULL)
    @tensor tl like rev_parts
    tid = position_ids === nothing ? nothing : (@tensor t_ position_ids rev_parts; t_)
    toff = offsets === nothing ? nothing : (@tensor t_ offsets vec_parts; t_)
    tcu = cu_seqlens === nothing ? nothing : (@tensor t_ cu_seqlens vec_parts; t_)
    GC.@preserve tl tid toff tcu r begin
        tok = RopeTokens(ssize(RopeTokens), l - 1, key ? 1 : 0, tptr(tid), tptr(toff), tptr(tcu))
        check(ccall((:gpe_rope_table_create, libgpe), Int32, (Ptr{Cvoid}, Ref{RopeTokens}, Ref{DLTensor}, Ref{Ptr{Cvoid}}),
                    r.ptr, tok, ref(tl), out))
    end
    t = RopeTable(out[])
    finalizer(close, t)
    return t
end
function rope_table_call(backward::Bool, t::RopeTable, x::StridedArray{T}) where {T<:Union{Float32,Float64}}
    out = similar(x, T, size(x))
    @tensor tx x rev_parts
    @tensor to out rev_parts
    GC.@preserve tx to t begin
        if backward
            check(ccall((:gpe_rope_table_backward, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}),
                        t.ptr, ref(tx), ref(to)))
        else
            check(ccall((:gpe_rope_table_forward, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}),
                        t.ptr, ref(tx), ref(to)))
        end
    end
    return out
end
"""`rope_forward` with the table's tokens: x has the table's layout and token count."""
rope_table_forward(t::RopeTable, x::StridedArray) = rope_table_call(false, t, x)
"""`rope_backward` with the table's tokens."""
rope_table_backward(t::RopeTable, dy::StridedArray) = rope_table_call(true, t, dy)

"""An additive attention bias b_h(i, j) (gpe_bias); `grad_size` is the shape of
`bias_accumulate_gradient!`'s gradient (Julia order)."""
mutable struct Bias
    ptr::Ptr{Cvoid}
    num_heads::Int
    grad_size::Tuple
    two_grads::Bool
end
function make_bias(code::Int32, out::Ref{Ptr{Cvoid}}, num_heads, grad_size, two_grads=false)
    check(code)
    b = Bias(out[], num_heads, grad_size, two_grads)
    finalizer(close, b)
    return b
end
function Base.close(b::Bias)
    b.ptr == C_NULL && return
    ccall((:gpe_bias_destroy, libgpe), Cvoid, (Ptr{Cvoid},), b.ptr)
    b.ptr = C_NULL
    return
end
optr(v) = v === nothing || isempty(v) ? Ptr{Float64}(C_NULL) : pointer(v)

"""ALiBi (Press et al.): -m_h (i - j) (causal) or -m_h |i - j| (symmetric); slopes nothing: the published rule."""
function bias_alibi(num_heads::Integer; symmetric::Bool=false, slopes::Union{Nothing,Vector{Float64}}=nothing)
    slopes === nothing || length(slopes) == num_heads || argerror("slopes has $(length(slopes)) values; expected $num_heads")
    out = Ref{Ptr{Cvoid}}(C_NULL)
    code = GC.@preserve slopes begin
        o = AlibiOptions(ssize(AlibiOptions), symmetric ? 1 : 0, num_heads, optr(slopes))
        ccall((:gpe_bias_create_alibi, libgpe), Int32, (Ref{AlibiOptions}, Ref{Ptr{Cvoid}}), o, out)
    end
    return make_bias(code, out, num_heads, (num_heads,))
end
"""T5's bucketed bias: table num_heads × num_buckets (column per bucket)."""
function bias_t5(table::Matrix{Float64}; bidirectional::Bool=true, max_distance::Integer=128)
    h, nb = size(table)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    code = GC.@preserve table begin
        o = T5Options(ssize(T5Options), bidirectional ? 1 : 0, h, nb, max_distance, pointer(table))
        ccall((:gpe_bias_create_t5, libgpe), Int32, (Ref{T5Options}, Ref{Ptr{Cvoid}}), o, out)
    end
    return make_bias(code, out, h, (h, nb))
end
"""FoX (Lin et al.): gate_logits num_heads × length (column per token)."""
function bias_fox(gate_logits::Matrix{Float64}; first_position::Integer=0)
    h, len = size(gate_logits)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    code = GC.@preserve gate_logits begin
        o = FoxOptions(ssize(FoxOptions), len, h, first_position, pointer(gate_logits))
        ccall((:gpe_bias_create_fox, libgpe), Int32, (Ref{FoxOptions}, Ref{Ptr{Cvoid}}), o, out)
    end
    return make_bias(code, out, h, (h, len))
end
"""GRAPE-AP: w, u rank × num_heads × length arrays."""
function bias_grape_ap(w::Array{Float64,3}, u::Array{Float64,3}; first_position::Integer=0)
    size(w) == size(u) || argerror("w and u differ in size")
    r, h, len = size(w)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    code = GC.@preserve w u begin
        o = GrapeApOptions(ssize(GrapeApOptions), len, h, r, first_position, pointer(w), pointer(u))
        ccall((:gpe_bias_create_grape_ap, libgpe), Int32, (Ref{GrapeApOptions}, Ref{Ptr{Cvoid}}), o, out)
    end
    return make_bias(code, out, h, (r, h, len), true)
end
"""GRAPE-A: m_h (j - i) with slopes (nothing: Press et al.'s), or content-gated by
gate_logits (num_heads × length); lifted = true fills tiles through the lift."""
function bias_grape_a(num_heads::Integer, head_dim::Integer; slopes::Union{Nothing,Vector{Float64}}=nothing,
                      gate_logits::Union{Nothing,Matrix{Float64}}=nothing, first_position::Integer=0, lifted::Bool=false)
    slopes === nothing || length(slopes) == num_heads || argerror("slopes has $(length(slopes)) values; expected $num_heads")
    gate_logits === nothing || size(gate_logits, 1) == num_heads || argerror("gate_logits must be num_heads × length")
    len = gate_logits === nothing ? 0 : size(gate_logits, 2)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    code = GC.@preserve slopes gate_logits begin
        o = GrapeAOptions(ssize(GrapeAOptions), lifted ? 1 : 0, num_heads, head_dim, optr(slopes),
                          gate_logits === nothing ? 0 : 1, len, first_position, optr(gate_logits))
        ccall((:gpe_bias_create_grape_a, libgpe), Int32, (Ref{GrapeAOptions}, Ref{Ptr{Cvoid}}), o, out)
    end
    return make_bias(code, out, num_heads, gate_logits === nothing ? (num_heads,) : (num_heads, len))
end
"""(kind code, num_heads, causal)."""
function bias_info(b::Bias)
    k, h, c = Ref{Int32}(0), Ref{Int64}(0), Ref{Int32}(0)
    check(ccall((:gpe_bias_info, libgpe), Int32, (Ptr{Cvoid}, Ref{Int32}, Ref{Int64}, Ref{Int32}), b.ptr, k, h, c))
    return (Int(k[]), Int(h[]), c[] != 0)
end
function bias_alibi_slopes(b::Bias)
    s = zeros(Float64, b.num_heads)
    check(ccall((:gpe_bias_alibi_slopes, libgpe), Int32, (Ptr{Cvoid}, Ptr{Float64}, Int64), b.ptr, s, length(s)))
    return s
end
"""out[r, c] = b_head(q_positions[r], k_positions[c]) (head 0-based)."""
function bias_fill_tile(b::Bias, head::Integer, q_positions::Vector{Int64}, k_positions::Vector{Int64})
    out = zeros(Float64, length(q_positions), length(k_positions))
    @tensor tq q_positions vec_parts
    @tensor tk k_positions vec_parts
    @tensor to out mat_parts
    GC.@preserve tq tk to b begin
        check(ccall((:gpe_bias_fill_tile, libgpe), Int32, (Ptr{Cvoid}, Int64, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    b.ptr, head, ref(tq), ref(tk), ref(to)))
    end
    return out
end
"""Adds one tile's parameter gradient into grad_a (and grad_b for GRAPE-AP), shaped b.grad_size."""
function bias_accumulate_gradient!(grad_a::Array{Float64}, b::Bias, head::Integer, q_positions::Vector{Int64},
                                   k_positions::Vector{Int64}, grad_tile::StridedMatrix{Float64};
                                   grad_b::Union{Nothing,Array{Float64}}=nothing)
    size(grad_a) == b.grad_size || argerror("grad_a is $(size(grad_a)); expected $(b.grad_size)")
    grad_b === nothing || size(grad_b) == b.grad_size || argerror("grad_b is $(size(grad_b)); expected $(b.grad_size)")
    @tensor tq q_positions vec_parts
    @tensor tk k_positions vec_parts
    @tensor tg grad_tile mat_parts
    @tensor ta grad_a rev_parts
    tb = grad_b === nothing ? nothing : (@tensor t_ grad_b rev_parts; t_)
    GC.@preserve tq tk tg ta tb b begin
        check(ccall((:gpe_bias_accumulate_gradient, libgpe), Int32,
                    (Ptr{Cvoid}, Int64, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    b.ptr, head, ref(tq), ref(tk), ref(tg), ref(ta), ref(tb)))
    end
    return grad_a
end
"""FoX / gated GRAPE-A: dL/dgate_logits (num_heads × length) from the accumulated dL/dc."""
function bias_fox_logit_gradient(b::Bias, grad_prefix::Matrix{Float64})
    out = zeros(Float64, size(grad_prefix))
    @tensor tp grad_prefix rev_parts
    @tensor to out rev_parts
    GC.@preserve tp to b begin
        check(ccall((:gpe_bias_fox_logit_gradient, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}),
                    b.ptr, ref(tp), ref(to)))
    end
    return out
end
"""GRAPE-A's lifted rows ((head_dim + 2) × N) of x (head_dim × N) for one head."""
function bias_grape_a_lift(b::Bias, head::Integer, positions::Vector{Int64}, x::StridedMatrix{Float64}; key::Bool=false)
    out = zeros(Float64, size(x, 1) + 2, size(x, 2))
    @tensor tp positions vec_parts
    @tensor tx x batch_parts
    @tensor to out batch_parts
    GC.@preserve tp tx to b begin
        check(ccall((:gpe_bias_grape_a_lift, libgpe), Int32,
                    (Ptr{Cvoid}, Int64, Int32, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    b.ptr, head, key ? 1 : 0, ref(tp), ref(tx), ref(to)))
    end
    return out
end

# Tree addresses (one vector of 0-based child indices per token) as CSR offsets and
# children: token t's address is children[offsets[t] + 1 : offsets[t + 1]].
function tree_csr(addresses::Vector{Vector{Int64}})
    offsets = zeros(Int64, length(addresses) + 1)
    children = Int64[]
    for (t, a) in enumerate(addresses)
        append!(children, a)
        offsets[t+1] = length(children)
    end
    return offsets, children
end
# Skew generators as the C tensor [count, m, m] (row-major matrices).
function skew_tensor(skews::Vector{Matrix{Float64}})
    m = isempty(skews) ? 0 : size(skews[1], 1)
    all(s -> size(s) == (m, m), skews) || argerror("skew generators must all be $m × $m")
    return rowmajor(skews), Int64[length(skews), m, m], Int64[m * m, m, 1]
end

# Builds the options struct (with the tensors it points to kept alive by `keep`).
# Structured positions: q_axes / k_axes are axes × tokens Int64 matrices, q_tree / k_tree
# one address per token; Shaw tables are head_dim × (2 shaw_max_distance + 1).
function attention_options(keep::Vector{Any}; causal::Bool=false, softmax_scale::Real=0.0, num_threads::Integer=0,
                           rope_dim::Integer=0, rope_base::Real=10000.0, rope_pairing::Symbol=:half_split,
                           grape_m::Union{Nothing,GrapeM}=nothing, algebraic::Union{Nothing,AlgebraicSequence}=nothing,
                           bias::Union{Nothing,Bias}=nothing, q_positions=nothing, k_positions=nothing,
                           cu_seqlens_q=nothing, cu_seqlens_k=nothing, rope_axes::Integer=0,
                           rope_sections::Union{Nothing,Vector{Int64}}=nothing, rope_sections_interleaved::Bool=false,
                           q_axes::Union{Nothing,StridedMatrix{Int64}}=nothing,
                           k_axes::Union{Nothing,StridedMatrix{Int64}}=nothing,
                           q_tree::Union{Nothing,Vector{Vector{Int64}}}=nothing,
                           k_tree::Union{Nothing,Vector{Vector{Int64}}}=nothing,
                           algebraic_tree::Union{Nothing,Vector{Matrix{Float64}}}=nothing,
                           algebraic_grid::Union{Nothing,Vector{Matrix{Float64}}}=nothing,
                           shaw_max_distance::Integer=0,
                           shaw_key_table::Union{Nothing,StridedMatrix{Float64}}=nothing,
                           shaw_value_table::Union{Nothing,StridedMatrix{Float64}}=nothing)
    mk(v) = v === nothing ? nothing : (@tensor t_ v vec_parts; push!(keep, t_); t_)
    mkb(x) = x === nothing ? nothing : (@tensor t_ x batch_parts; push!(keep, t_); t_)
    function mks(skews)
        skews === nothing && return nothing
        flat, shape, strides = skew_tensor(skews)
        t_ = (dl(flat, shape, strides), shape, strides, flat)
        push!(keep, t_)
        return t_
    end
    tqp, tkp, tcq, tck = mk(q_positions), mk(k_positions), mk(cu_seqlens_q), mk(cu_seqlens_k)
    push!(keep, grape_m, algebraic, bias)
    (q_tree === nothing) == (k_tree === nothing) || argerror("give both q_tree and k_tree, or neither")
    tqo, tqc, tko, tkc = nothing, nothing, nothing, nothing
    if q_tree !== nothing
        qo, qc = tree_csr(q_tree)
        ko, kc = tree_csr(k_tree)
        tqo, tqc, tko, tkc = mk(qo), mk(qc), mk(ko), mk(kc)
    end
    return AttentionOptions(ssize(AttentionOptions), causal ? 1 : 0, softmax_scale, num_threads, rope_dim, rope_base,
                            rope_pairing == :interleaved ? 0 : 1, grape_m === nothing ? C_NULL : grape_m.ptr,
                            algebraic === nothing ? C_NULL : algebraic.ptr, bias === nothing ? C_NULL : bias.ptr,
                            tptr(tqp), tptr(tkp), tptr(tcq), tptr(tck), rope_axes, rope_sections_interleaved ? 1 : 0,
                            tptr(mk(rope_sections)), tptr(mks(algebraic_tree)), tptr(mks(algebraic_grid)),
                            tptr(mkb(q_axes)), tptr(mkb(k_axes)), tptr(tqo), tptr(tqc), tptr(tko), tptr(tkc),
                            shaw_max_distance, tptr(mkb(shaw_key_table)), tptr(mkb(shaw_value_table)))
end

"""Attention with the encoding inside the kernel: q head_dim × heads_q × seq_q × batch,
k and v head_dim × heads_kv × seq_k × batch (or head_dim × heads × tokens with
cu_seqlens_q / cu_seqlens_k). Returns (o like q, lse heads_q × tokens_q). Keywords:
causal, softmax_scale, num_threads, rope_dim, rope_base, rope_pairing, grape_m,
algebraic, bias, q_positions, k_positions, cu_seqlens_q, cu_seqlens_k; structured
positions (q_positions / k_positions still order the tokens for masks, biases and Shaw
labels): q_axes / k_axes (axes × tokens Int64) for axial RoPE (rope_axes = 2 or 3 with
rope_dim), M-RoPE (rope_sections, planes per axis summing to rope_dim / 2;
rope_sections_interleaved) and algebraic_grid (skew generators, axes × m = head_dim);
q_tree / k_tree (one 0-based child-index vector per token) for algebraic_tree (one skew
generator per branch, head_dim × head_dim); Shaw et al.'s shaw_max_distance with
shaw_key_table / shaw_value_table (head_dim × (2 shaw_max_distance + 1), column r for
label r - k, shared by every head)."""
function attention_forward(q::StridedArray{T}, k::StridedArray{T}, v::StridedArray{T}; kwargs...) where {T<:Union{Float32,Float64}}
    o = similar(q, T, size(q))
    lse = zeros(T, size(q, 2), div(length(q), size(q, 1) * size(q, 2)))
    keep = Any[]
    @tensor tq q rev_parts
    @tensor tk k rev_parts
    @tensor tv v rev_parts
    @tensor to o rev_parts
    @tensor tl lse rev_parts
    GC.@preserve keep tq tk tv to tl begin
        opts = attention_options(keep; kwargs...)
        GC.@preserve keep begin
            check(ccall((:gpe_attention_forward, libgpe), Int32,
                        (Ref{AttentionOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                        opts, ref(tq), ref(tk), ref(tv), ref(to), ref(tl)))
        end
    end
    return o, lse
end

"""(dq, dk, dv) from d_o (like q), o and lse recomputed; same keywords as attention_forward."""
function attention_backward(q::StridedArray{T}, k::StridedArray{T}, v::StridedArray{T}, d_o::StridedArray{T};
                            kwargs...) where {T<:Union{Float32,Float64}}
    dq, dk, dv = similar(q, T, size(q)), similar(k, T, size(k)), similar(v, T, size(v))
    keep = Any[]
    @tensor tq q rev_parts
    @tensor tk k rev_parts
    @tensor tv v rev_parts
    @tensor tdo d_o rev_parts
    @tensor tdq dq rev_parts
    @tensor tdk dk rev_parts
    @tensor tdv dv rev_parts
    GC.@preserve keep tq tk tv tdo tdq tdk tdv begin
        opts = attention_options(keep; kwargs...)
        GC.@preserve keep begin
            check(ccall((:gpe_attention_backward, libgpe), Int32,
                        (Ref{AttentionOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor},
                         Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                        opts, ref(tq), ref(tk), ref(tv), C_NULL, C_NULL, ref(tdo), ref(tdq), ref(tdk), ref(tdv)))
        end
    end
    return dq, dk, dv
end

"""`attention_backward` plus the Shaw tables' gradients (gpe_attention_backward_v2):
(dq, dk, dv, tables) with tables.shaw_key_table / shaw_value_table shaped like the tables
given (`nothing` for a table not given)."""
function attention_backward_v2(q::StridedArray{T}, k::StridedArray{T}, v::StridedArray{T}, d_o::StridedArray{T};
                               kwargs...) where {T<:Union{Float32,Float64}}
    dq, dk, dv = similar(q, T, size(q)), similar(k, T, size(k)), similar(v, T, size(v))
    skt, svt = get(kwargs, :shaw_key_table, nothing), get(kwargs, :shaw_value_table, nothing)
    gsk = skt === nothing ? nothing : zeros(Float64, size(skt))
    gsv = svt === nothing ? nothing : zeros(Float64, size(svt))
    keep = Any[]
    mk(a) = a === nothing ? nothing : (@tensor t_ a rev_parts; push!(keep, t_); t_)
    @tensor tq q rev_parts
    @tensor tk k rev_parts
    @tensor tv v rev_parts
    @tensor tdo d_o rev_parts
    @tensor tdq dq rev_parts
    @tensor tdk dk rev_parts
    @tensor tdv dv rev_parts
    GC.@preserve keep tq tk tv tdo tdq tdk tdv gsk gsv begin
        opts = attention_options(keep; kwargs...)
        tsk, tsv = mk(gsk), mk(gsv)
        GC.@preserve keep begin
            check(ccall((:gpe_attention_backward_v2, libgpe), Int32,
                        (Ref{AttentionOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor},
                         Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor}),
                        opts, ref(tq), ref(tk), ref(tv), C_NULL, C_NULL, ref(tdo), ref(tdq), ref(tdk), ref(tdv),
                        tptr(tsk), tptr(tsv)))
        end
    end
    return dq, dk, dv, (shaw_key_table=gsk, shaw_value_table=gsv)
end

"""`attention_backward` plus the encoding's parameter gradients: (dq, dk, dv, params)
with params.bias_a / bias_b (shaped like the bias's `grad_size`; bias_b for GRAPE-AP),
params.grape_a / grape_b (head_dim × m) / grape_omega (m) for GRAPE-M, and
params.shaw_key_table / shaw_value_table (shaped like the tables given)."""
function attention_backward_with_parameters(q::StridedArray{T}, k::StridedArray{T}, v::StridedArray{T},
                                            d_o::StridedArray{T}; kwargs...) where {T<:Union{Float32,Float64}}
    dq, dk, dv = similar(q, T, size(q)), similar(k, T, size(k)), similar(v, T, size(v))
    bias = get(kwargs, :bias, nothing)
    gm = get(kwargs, :grape_m, nothing)
    ba = bias === nothing ? nothing : zeros(Float64, bias.grad_size...)
    bb = bias === nothing || !bias.two_grads ? nothing : zeros(Float64, bias.grad_size...)
    ga = gm === nothing ? nothing : zeros(Float64, gm.dim, gm.m)
    gb = gm === nothing ? nothing : zeros(Float64, gm.dim, gm.m)
    gw = gm === nothing ? nothing : zeros(Float64, gm.m)
    skt, svt = get(kwargs, :shaw_key_table, nothing), get(kwargs, :shaw_value_table, nothing)
    gsk = skt === nothing ? nothing : zeros(Float64, size(skt))
    gsv = svt === nothing ? nothing : zeros(Float64, size(svt))
    keep = Any[]
    mk(a) = a === nothing ? nothing : (@tensor t_ a rev_parts; push!(keep, t_); t_)
    @tensor tq q rev_parts
    @tensor tk k rev_parts
    @tensor tv v rev_parts
    @tensor tdo d_o rev_parts
    @tensor tdq dq rev_parts
    @tensor tdk dk rev_parts
    @tensor tdv dv rev_parts
    GC.@preserve keep tq tk tv tdo tdq tdk tdv ba bb ga gb gw gsk gsv begin
        opts = attention_options(keep; kwargs...)
        tba, tbb, tga, tgb, tgw = mk(ba), mk(bb), mk(ga), mk(gb), mk(gw)
        tsk, tsv = mk(gsk), mk(gsv)
        GC.@preserve keep begin
            grads = AttentionParamGrads(ssize(AttentionParamGrads), tptr(tba), tptr(tbb), tptr(tga), tptr(tgb), tptr(tgw),
                                        tptr(tsk), tptr(tsv))
            check(ccall((:gpe_attention_backward_with_parameters, libgpe), Int32,
                        (Ref{AttentionOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor},
                         Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{AttentionParamGrads}),
                        opts, ref(tq), ref(tk), ref(tv), C_NULL, C_NULL, ref(tdo), ref(tdq), ref(tdk), ref(tdv), grads))
        end
    end
    return dq, dk, dv, (bias_a=ba, bias_b=bb, grape_a=ga, grape_b=gb, grape_omega=gw, shaw_key_table=gsk,
                        shaw_value_table=gsv)
end

# ---- INR training, data, metrics and image files (C ABI 0.5.0) ----
export MlpOptions, mlp_options, mlp_num_parameters, mlp_init, mlp_fit, mlp_predict,
       mlp_num_evaluations, mlp_fit_validated,
       LinearAdamOptions, linear_adam_options, fit_dense_adam, fit_separable_adam_2d,
       synthetic_image, synthetic_vector_field, grid_coordinates, random_split, regular_grid_split,
       inr_mse, inr_psnr, GPEImage, image_read, image_shape, image_pixels, image_write_png,
       image_write_jpeg

"""The MLP's architecture and Adam schedule (gpe_mlp_options; Lim et al., appendix D.2).
Build it with `mlp_options`; progress callbacks are not exposed (C_NULL)."""
struct MlpOptions
    struct_size::UInt32
    hidden_width::Int64
    num_hidden_layers::Int64
    steps::Int64
    learning_rate::Float64
    beta1::Float64
    beta2::Float64
    epsilon::Float64
    seed::UInt64
    report_every::Int64
    progress::Ptr{Cvoid}
    progress_user_data::Ptr{Cvoid}
end
"""Lim et al.'s defaults: width 128, 3 hidden layers, 500 full-batch Adam steps at 1e-3."""
mlp_options(; hidden_width::Integer=128, num_hidden_layers::Integer=3, steps::Integer=500,
            learning_rate::Real=1e-3, beta1::Real=0.9, beta2::Real=0.999, epsilon::Real=1e-8,
            seed::Integer=0) =
    MlpOptions(ssize(MlpOptions), hidden_width, num_hidden_layers, steps, learning_rate, beta1, beta2,
               epsilon, UInt64(seed), 0, C_NULL, C_NULL)

"""The flat parameter count for input_dim -> ... -> output_dim (W_0 row-major, b_0, W_1, ...)."""
function mlp_num_parameters(o::MlpOptions, input_dim::Integer, output_dim::Integer)
    n = Ref{Int64}(0)
    check(ccall((:gpe_inr_mlp_num_parameters, libgpe), Int32, (Ref{MlpOptions}, Int64, Int64, Ref{Int64}),
                o, input_dim, output_dim, n))
    return Int(n[])
end

"""The seeded initial parameters (PyTorch's nn.Linear default from o.seed)."""
function mlp_init(o::MlpOptions, input_dim::Integer, output_dim::Integer; T::Type=Float64)
    p = zeros(T, mlp_num_parameters(o, input_dim, output_dim))
    @tensor tp p vec_parts
    GC.@preserve tp begin
        check(ccall((:gpe_inr_mlp_init, libgpe), Int32, (Ref{MlpOptions}, Int64, Int64, Ref{DLTensor}),
                    o, input_dim, output_dim, ref(tp)))
    end
    return p
end

"""Full-batch Adam on features (input_dim × N, one column per sample) and targets
(output_dim × N), from `initial` or the seeded initialisation. Returns
(parameters, train_loss (MSE before each step), final_loss)."""
function mlp_fit(o::MlpOptions, features::StridedMatrix{T}, targets::StridedMatrix{T};
                 initial::Union{Nothing,StridedVector{T}}=nothing) where {T<:Union{Float32,Float64}}
    size(features, 2) == size(targets, 2) ||
        argerror("features has $(size(features, 2)) columns, targets $(size(targets, 2))")
    o.steps >= 0 || argerror("steps is $(o.steps); expected >= 0")
    p = zeros(T, mlp_num_parameters(o, size(features, 1), size(targets, 1)))
    initial === nothing || length(initial) == length(p) ||
        argerror("initial has $(length(initial)) parameters; expected $(length(p))")
    loss = zeros(Float64, o.steps)
    final = Ref{Float64}(0.0)
    @tensor tf features batch_parts
    @tensor tt targets batch_parts
    @tensor tp p vec_parts
    @tensor tl loss vec_parts
    ti = initial === nothing ? nothing : (@tensor ti_ initial vec_parts; ti_)
    GC.@preserve tf tt tp tl ti begin
        check(ccall((:gpe_inr_mlp_fit, libgpe), Int32,
                    (Ref{MlpOptions}, Ref{DLTensor}, Ref{DLTensor}, Ptr{DLTensor}, Ref{DLTensor}, Ref{DLTensor},
                     Ref{Float64}),
                    o, ref(tf), ref(tt), tptr(ti), ref(tp), ref(tl), final))
    end
    return p, loss, final[]
end

# gpe_mlp_validation: the held-out set (inputs), the validation curve (optional outputs)
# and (0.7.0) the progress callback that also gets the validation loss.
struct MlpValidation
    struct_size::UInt32
    features::Ptr{DLTensor}
    targets::Ptr{DLTensor}
    steps::Ptr{DLTensor}
    loss::Ptr{DLTensor}
    progress::Ptr{Cvoid}
    progress_user_data::Ptr{Cvoid}
end

# The Julia function behind gpe_mlp_validation.progress_user_data, and the first exception
# it threw (an exception must not unwind through the library's C frames: it is kept and
# thrown once the fit has returned).
mutable struct ValidationProgressState
    f::Any
    error::Any
end

function validation_progress_trampoline(user::Ptr{Cvoid}, step::Int64, train_loss::Float64,
                                        validation_loss::Float64)::Cvoid
    state = unsafe_pointer_to_objref(user)::ValidationProgressState
    state.error === nothing || return nothing
    try
        state.f(step, train_loss, validation_loss)
    catch e
        state.error = e
    end
    return nothing
end

"""K, the number of validation evaluations of a fit of `steps` updates evaluated after
every `eval_every` updates and after the last (0: the last only); 1 when steps is 0."""
function mlp_num_evaluations(steps::Integer, eval_every::Integer=0)
    o = MlpOptions(ssize(MlpOptions), 1, 0, steps, 1e-3, 0.9, 0.999, 1e-8, UInt64(0), eval_every, C_NULL, C_NULL)
    n = Ref{Int64}(0)
    check(ccall((:gpe_inr_mlp_num_evaluations, libgpe), Int32, (Ref{MlpOptions}, Ref{Int64}), o, n))
    return Int(n[])
end

"""`mlp_fit` with a held-out validation set (gpe_inr_mlp_fit_v2): validation_features
(input_dim × M) and validation_targets (output_dim × M), evaluated after every
`eval_every` updates and after the last (0: the last only). The training is unchanged,
bit for bit. Returns (parameters, train_loss, final_loss, validation_steps,
validation_loss): after validation_steps[k] updates the held-out MSE was
validation_loss[k]. `validation_progress(step, train_loss, validation_loss)` (C ABI 0.7.0)
is called at each evaluation as it is made, with validation_loss[k]; an exception thrown
in it stops the calls and is thrown when the fit returns."""
function mlp_fit_validated(o::MlpOptions, features::StridedMatrix{T}, targets::StridedMatrix{T},
                           validation_features::StridedMatrix{T}, validation_targets::StridedMatrix{T};
                           eval_every::Integer=0,
                           initial::Union{Nothing,StridedVector{T}}=nothing,
                           validation_progress=nothing) where {T<:Union{Float32,Float64}}
    size(features, 2) == size(targets, 2) ||
        argerror("features has $(size(features, 2)) columns, targets $(size(targets, 2))")
    k = mlp_num_evaluations(o.steps, eval_every)
    ov = MlpOptions(o.struct_size, o.hidden_width, o.num_hidden_layers, o.steps, o.learning_rate, o.beta1,
                    o.beta2, o.epsilon, o.seed, eval_every, o.progress, o.progress_user_data)
    p = zeros(T, mlp_num_parameters(o, size(features, 1), size(targets, 1)))
    initial === nothing || length(initial) == length(p) ||
        argerror("initial has $(length(initial)) parameters; expected $(length(p))")
    loss = zeros(Float64, o.steps)
    vsteps = zeros(Int64, k)
    vloss = zeros(Float64, k)
    final = Ref{Float64}(0.0)
    @tensor tf features batch_parts
    @tensor tt targets batch_parts
    @tensor tp p vec_parts
    @tensor tl loss vec_parts
    @tensor tvf validation_features batch_parts
    @tensor tvt validation_targets batch_parts
    @tensor tvs vsteps vec_parts
    @tensor tvl vloss vec_parts
    ti = initial === nothing ? nothing : (@tensor ti_ initial vec_parts; ti_)
    state = validation_progress === nothing ? nothing : ValidationProgressState(validation_progress, nothing)
    cb = state === nothing ? C_NULL :
         @cfunction(validation_progress_trampoline, Cvoid, (Ptr{Cvoid}, Int64, Float64, Float64))
    status = GC.@preserve tf tt tp tl tvf tvt tvs tvl ti state begin
        user = state === nothing ? C_NULL : pointer_from_objref(state)
        val = MlpValidation(ssize(MlpValidation), tptr(tvf), tptr(tvt), tptr(tvs), tptr(tvl), cb, user)
        ccall((:gpe_inr_mlp_fit_v2, libgpe), Int32,
              (Ref{MlpOptions}, Ref{DLTensor}, Ref{DLTensor}, Ptr{DLTensor}, Ref{DLTensor}, Ref{DLTensor},
               Ref{Float64}, Ref{MlpValidation}),
              ov, ref(tf), ref(tt), tptr(ti), ref(tp), ref(tl), final, val)
    end
    state === nothing || state.error === nothing || throw(state.error)
    check(status)
    return p, loss, final[], vsteps, vloss
end

"""The network's output (output_dim × N) on features (input_dim × N)."""
function mlp_predict(o::MlpOptions, parameters::StridedVector{T}, features::StridedMatrix{T},
                     output_dim::Integer) where {T<:Union{Float32,Float64}}
    out = zeros(T, output_dim, size(features, 2))
    @tensor tp parameters vec_parts
    @tensor tf features batch_parts
    @tensor to out batch_parts
    GC.@preserve tp tf to begin
        check(ccall((:gpe_inr_mlp_predict, libgpe), Int32, (Ref{MlpOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    o, ref(tp), ref(tf), ref(to)))
    end
    return out
end

"""Adam on a linear layer over a fixed encoding (gpe_linear_adam_options; Zheng et al.
sec. 6.2), the learning rate decayed exponentially to final_learning_rate."""
struct LinearAdamOptions
    struct_size::UInt32
    steps::Int64
    learning_rate::Float64
    final_learning_rate::Float64
    beta1::Float64
    beta2::Float64
    epsilon::Float64
    report_every::Int64
    progress::Ptr{Cvoid}
    progress_user_data::Ptr{Cvoid}
end
linear_adam_options(; steps::Integer=2000, learning_rate::Real=1e-2, final_learning_rate::Real=learning_rate,
                    beta1::Real=0.9, beta2::Real=0.999, epsilon::Real=1e-8) =
    LinearAdamOptions(ssize(LinearAdamOptions), steps, learning_rate, final_learning_rate, beta1, beta2, epsilon,
                      0, C_NULL, C_NULL)

"""Dense model Y_hat = Phi W (Zheng et al. eq. 16): features N × F, targets N × C.
Returns (W (F × C), train_loss, final_loss)."""
function fit_dense_adam(o::LinearAdamOptions, features::StridedMatrix{Float64}, targets::StridedMatrix{Float64})
    o.steps >= 1 || argerror("steps is $(o.steps); expected >= 1")
    w = zeros(Float64, size(features, 2), size(targets, 2))
    loss = zeros(Float64, o.steps)
    final = Ref{Float64}(0.0)
    @tensor tf features mat_parts
    @tensor tt targets mat_parts
    @tensor tw w mat_parts
    @tensor tl loss vec_parts
    GC.@preserve tf tt tw tl begin
        check(ccall((:gpe_inr_fit_dense_adam, libgpe), Int32,
                    (Ref{LinearAdamOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{Float64}),
                    o, ref(tf), ref(tt), ref(tw), ref(tl), final))
    end
    return w, loss, final[]
end

"""Separable model S_hat = Psi_y W Psi_x' (Zheng et al. eq. 10): psi_y Ny × Ky,
psi_x Nx × Kx, image Ny × Nx. Returns (W (Ky × Kx), train_loss, final_loss)."""
function fit_separable_adam_2d(o::LinearAdamOptions, psi_y::StridedMatrix{Float64}, psi_x::StridedMatrix{Float64},
                               image::StridedMatrix{Float64})
    o.steps >= 1 || argerror("steps is $(o.steps); expected >= 1")
    w = zeros(Float64, size(psi_y, 2), size(psi_x, 2))
    loss = zeros(Float64, o.steps)
    final = Ref{Float64}(0.0)
    @tensor ty psi_y mat_parts
    @tensor tx psi_x mat_parts
    @tensor ti image mat_parts
    @tensor tw w mat_parts
    @tensor tl loss vec_parts
    GC.@preserve ty tx ti tw tl begin
        check(ccall((:gpe_inr_fit_separable_adam_2d, libgpe), Int32,
                    (Ref{LinearAdamOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor},
                     Ref{Float64}),
                    o, ref(ty), ref(tx), ref(ti), ref(tw), ref(tl), final))
    end
    return w, loss, final[]
end

function synthetic_code(task::Symbol)
    task === :radial && return Int32(0)
    task === :spiral && return Int32(1)
    argerror("task must be :radial or :spiral; got $task")
end

"""Lim et al.'s analytic image (appendix D.1) on n × n pixel centres of [-1, 1]^2, row i
at y_i, column j at x_j: :radial |sin(15 sqrt(r))|, :spiral |sin(30 sqrt(0.1 r) + theta)|
(`signed=true`: the signed sine)."""
function synthetic_image(task::Symbol, n::Integer; signed::Bool=false)
    out = zeros(Float64, n, n)
    @tensor to out mat_parts
    GC.@preserve to begin
        check(ccall((:gpe_inr_synthetic_image, libgpe), Int32, (Int32, Int32, Ref{DLTensor}),
                    synthetic_code(task), signed ? 1 : 0, ref(to)))
    end
    return out
end

"""The vector field (eqs. 30, 31): out[i, j, :] = f(r, theta) (cos theta, sin theta), n × n × 2."""
function synthetic_vector_field(task::Symbol, n::Integer)
    out = zeros(Float64, n, n, 2)
    @tensor to out arr3_parts
    GC.@preserve to begin
        check(ccall((:gpe_inr_synthetic_vector_field, libgpe), Int32, (Int32, Ref{DLTensor}),
                    synthetic_code(task), ref(to)))
    end
    return out
end

"""The pixel centres as 2 × n² (column i * n + j + 1 is (x_j, y_i): row-major pixel order)."""
function grid_coordinates(n::Integer)
    out = zeros(Float64, 2, n * n)
    @tensor to out batch_parts
    GC.@preserve to begin
        check(ccall((:gpe_inr_grid_coordinates, libgpe), Int32, (Int64, Ref{DLTensor}), n, ref(to)))
    end
    return out
end

function split_parts(idx::Vector{Int64}, counts::Vector{Int64})
    a, b = counts[1], counts[1] + counts[2]
    return (train=idx[1:a], validation=idx[a+1:b], test=idx[b+1:end])
end

"""Lim et al. D.2: random train / validation / test parts of the 0-based pixel indices
0:num_points-1, each ascending; deterministic in seed."""
function random_split(num_points::Integer, train_fraction::Real, validation_fraction::Real, seed::Integer)
    idx = zeros(Int64, num_points)
    counts = zeros(Int64, 3)
    @tensor ti idx vec_parts
    GC.@preserve ti counts begin
        check(ccall((:gpe_inr_random_split, libgpe), Int32, (Int64, Float64, Float64, UInt64, Ref{DLTensor}, Ptr{Int64}),
                    num_points, train_fraction, validation_fraction, UInt64(seed), ref(ti), pointer(counts)))
    end
    return split_parts(idx, counts)
end

"""Zheng et al.: train on the [::2] x [::2] sub-grid of a rows × cols image (0-based
row-major indices), test on the rest; validation is empty."""
function regular_grid_split(rows::Integer, cols::Integer)
    idx = zeros(Int64, rows * cols)
    counts = zeros(Int64, 3)
    @tensor ti idx vec_parts
    GC.@preserve ti counts begin
        check(ccall((:gpe_inr_regular_grid_split, libgpe), Int32, (Int64, Int64, Ref{DLTensor}, Ptr{Int64}),
                    rows, cols, ref(ti), pointer(counts)))
    end
    return split_parts(idx, counts)
end

# A 1- to 3-D array as the C tensor of its own dimensions and strides.
arr_parts(a::StridedArray) = (Int64[size(a)...], Int64[strides(a)...])

"""Mean of (a - b)^2 over two Float64 arrays of one shape (1 to 3 dimensions)."""
function inr_mse(a::StridedArray{Float64}, b::StridedArray{Float64})
    out = Ref{Float64}(0.0)
    @tensor ta a arr_parts
    @tensor tb b arr_parts
    GC.@preserve ta tb begin
        check(ccall((:gpe_inr_mse, libgpe), Int32, (Ref{DLTensor}, Ref{DLTensor}, Ref{Float64}), ref(ta), ref(tb), out))
    end
    return out[]
end

"""PSNR = 10 log10(peak^2 / MSE) in dB (Inf when a == b)."""
function inr_psnr(a::StridedArray{Float64}, b::StridedArray{Float64}; peak::Real=1.0)
    out = Ref{Float64}(0.0)
    @tensor ta a arr_parts
    @tensor tb b arr_parts
    GC.@preserve ta tb begin
        check(ccall((:gpe_inr_psnr, libgpe), Int32, (Ref{DLTensor}, Ref{DLTensor}, Float64, Ref{Float64}),
                    ref(ta), ref(tb), peak, out))
    end
    return out[]
end

"""A decoded PNG or JPEG file (gpe_image), values in [0, 1]."""
mutable struct GPEImage
    ptr::Ptr{Cvoid}
end
function Base.close(im::GPEImage)
    im.ptr == C_NULL && return
    ccall((:gpe_image_destroy, libgpe), Cvoid, (Ptr{Cvoid},), im.ptr)
    im.ptr = C_NULL
    return
end

"""Reads a PNG or JPEG; `grayscale=true` gives one channel, otherwise three (RGB)."""
function image_read(path::AbstractString; grayscale::Bool=false)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:gpe_image_read, libgpe), Int32, (Cstring, Int32, Ref{Ptr{Cvoid}}), path, grayscale ? 1 : 0, out))
    im = GPEImage(out[])
    finalizer(close, im)
    return im
end

"""(rows, cols, channels)."""
function image_shape(im::GPEImage)
    r, c, ch = Ref{Int64}(0), Ref{Int64}(0), Ref{Int64}(0)
    GC.@preserve im begin
        check(ccall((:gpe_image_shape, libgpe), Int32, (Ptr{Cvoid}, Ref{Int64}, Ref{Int64}, Ref{Int64}), im.ptr, r, c, ch))
    end
    return (Int(r[]), Int(c[]), Int(ch[]))
end

"""The pixels as rows × cols × channels (Float32 or Float64)."""
function image_pixels(im::GPEImage; T::Type=Float64)
    out = zeros(T, image_shape(im)...)
    @tensor to out arr3_parts
    GC.@preserve to im begin
        check(ccall((:gpe_image_pixels, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}), im.ptr, ref(to)))
    end
    return out
end

"""Writes pixels (rows × cols, or rows × cols × 1 or 3) as an 8-bit PNG, [lo, hi] to 0..255."""
function image_write_png(path::AbstractString, pixels::StridedArray{T}; lo::Real=0.0, hi::Real=1.0) where {T<:Union{Float32,Float64}}
    @tensor tp pixels arr_parts
    GC.@preserve tp begin
        check(ccall((:gpe_image_write_png, libgpe), Int32, (Cstring, Ref{DLTensor}, Float64, Float64),
                    path, ref(tp), lo, hi))
    end
    return nothing
end

"""As `image_write_png`, as a baseline JPEG of the given quality (1..100; lossy)."""
function image_write_jpeg(path::AbstractString, pixels::StridedArray{T}; quality::Integer=90, lo::Real=0.0,
                          hi::Real=1.0) where {T<:Union{Float32,Float64}}
    @tensor tp pixels arr_parts
    GC.@preserve tp begin
        check(ccall((:gpe_image_write_jpeg, libgpe), Int32, (Cstring, Ref{DLTensor}, Int32, Float64, Float64),
                    path, ref(tp), quality, lo, hi))
    end
    return nothing
end

end # module
