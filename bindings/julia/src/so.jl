# SO(n) representations: RoPE planes and rank-2 generators (gpe/so.h).
# Part of module GroupPE: included by ../GroupPE.jl, whose helpers it uses.

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
