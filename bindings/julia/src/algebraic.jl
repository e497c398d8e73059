# Algebraic encodings: sequences, trees, grids, periodic domains; locality (gpe/algebraic.h).
# Part of module GroupPE: included by ../GroupPE.jl, whose helpers it uses.

struct AlgebraicOptions
    struct_size::UInt32
    dim::Int64
    skew::Ptr{Float64}
end

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
