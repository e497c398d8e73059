# Coordinate encoders, shifted bases, Bessel J, Laplacian eigenvectors (gpe/coordinate.h).
# Part of module GroupPE: included by ../GroupPE.jl, whose helpers it uses.

struct ShiftedBasisOptions
    struct_size::UInt32
    kind::Int32
    num_shifts::Int64
    width::Float64
    lo::Float64
    hi::Float64
end

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
