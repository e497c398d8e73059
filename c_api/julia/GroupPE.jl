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
                          lambda::Real=0.0, float32_image_products::Bool=false)
    w = zeros(Float64, size(psi_y, 2), size(psi_x, 2))
    @tensor ty psi_y mat_parts
    @tensor tx psi_x mat_parts
    @tensor ti image mat_parts
    @tensor tw w mat_parts
    o = SeparableFitOptions(ssize(SeparableFitOptions), float32_image_products ? 1 : 0, lambda)
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

end # module
