# Attention forward and backward with the encodings inside the kernel (gpe/attention.h).
# Part of module GroupPE: included by ../GroupPE.jl, whose helpers it uses.

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
