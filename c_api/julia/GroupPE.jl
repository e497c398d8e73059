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

end # module
