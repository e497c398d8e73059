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
    # 0.9.0: a RoPE handle, the sliding window, the softcap, the sinks; the score mask,
    # KV lengths and a paged cache's block table.
    rope::Ptr{Cvoid}
    window::Int32
    window_left::Int64
    window_right::Int64
    softcap::Float64
    sinks::Ptr{DLTensor}
    attn_mask::Ptr{DLTensor}
    kv_lengths::Ptr{DLTensor}
    block_table::Ptr{DLTensor}
    # Since 0.10.0; Julia arrays are host memory: C_NULL.
    cuda_stream::Ptr{Cvoid}
    # Since 0.10.0, after cuda_stream: the CPU kernels' arithmetic (0: AUTO / EXACT).
    bf16_arithmetic::Int32
    float32_arithmetic::Int32
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
    # 0.9.0: dL/dsinks; 0.10.0: the algebraic encodings' skew generators.
    d_sinks::Ptr{DLTensor}
    d_algebraic::Ptr{DLTensor}
    d_algebraic_tree::Ptr{DLTensor}
    d_algebraic_grid::Ptr{DLTensor}
end

# The score mask's element types: float32 (additive) and uint8 / Bool (0 masks the key).
dlcode(::Type{UInt8}) = (UInt8(1), UInt8(8))
dlcode(::Type{Bool}) = (UInt8(6), UInt8(8))

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
# one address per token; Shaw tables are head_dim × (2 shaw_max_distance + 1), the value
# table head_dim_v × (2 shaw_max_distance + 1).
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
                           shaw_value_table::Union{Nothing,StridedMatrix{Float64}}=nothing,
                           rope::Union{Nothing,Rope}=nothing,
                           window::Union{Nothing,Tuple{Integer,Integer}}=nothing, softcap::Real=0.0,
                           sinks::Union{Nothing,StridedVector{Float32}}=nothing,
                           attn_mask::Union{Nothing,StridedArray{Float32,4},StridedArray{UInt8,4},StridedArray{Bool,4}}=nothing,
                           kv_lengths::Union{Nothing,StridedVector{Int64}}=nothing,
                           block_table::Union{Nothing,StridedMatrix{Int64}}=nothing,
                           bf16_arithmetic::Union{Symbol,AbstractString}=:auto,
                           float32_arithmetic::Union{Symbol,AbstractString}=:exact)
    mk(v) = v === nothing ? nothing : (@tensor t_ v vec_parts; push!(keep, t_); t_)
    mkb(x) = x === nothing ? nothing : (@tensor t_ x batch_parts; push!(keep, t_); t_)
    function mks(skews)
        skews === nothing && return nothing
        flat, shape, strides = skew_tensor(skews)
        t_ = (dl(flat, shape, strides), shape, strides, flat)
        push!(keep, t_)
        return t_
    end
    mkr(x) = x === nothing ? nothing : (@tensor t_ x rev_parts; push!(keep, t_); t_)
    tqp, tkp, tcq, tck = mk(q_positions), mk(k_positions), mk(cu_seqlens_q), mk(cu_seqlens_k)
    push!(keep, grape_m, algebraic, bias, rope)
    # A closed handle's pointer is C_NULL, which the options read as "none": plain
    # attention, silently. Refused, as a pairing other than the two there are.
    for (name, h) in (("grape_m", grape_m), ("algebraic", algebraic), ("bias", bias), ("rope", rope))
        h !== nothing && h.ptr == C_NULL && argerror("$name is closed")
    end
    rope_pairing in (:interleaved, :half_split) || argerror("rope_pairing must be :interleaved or :half_split; got $rope_pairing")
    # gpe/attention.h's CPU ARITHMETIC: GPE_BF16_ARITHMETIC_* and GPE_FLOAT32_ARITHMETIC_*.
    bf16_arithmetic, float32_arithmetic = Symbol(bf16_arithmetic), Symbol(float32_arithmetic)
    bf16_codes = (auto=0, dot_products=1, widen=2, amx_tiles=3)
    f32_codes = (exact=0, split_bf16x6=1, split_bf16x3=2)
    haskey(bf16_codes, bf16_arithmetic) || argerror("bf16_arithmetic must be one of $(keys(bf16_codes)); got $bf16_arithmetic")
    haskey(f32_codes, float32_arithmetic) || argerror("float32_arithmetic must be one of $(keys(f32_codes)); got $float32_arithmetic")
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
                            shaw_max_distance, tptr(mkb(shaw_key_table)), tptr(mkb(shaw_value_table)),
                            rope === nothing ? C_NULL : rope.ptr, window === nothing ? 0 : 1,
                            window === nothing ? -1 : window[1], window === nothing ? -1 : window[2], softcap,
                            tptr(mk(sinks)), tptr(mkr(attn_mask)), tptr(mk(kv_lengths)), tptr(mkr(block_table)),
                            C_NULL, Int32(bf16_codes[bf16_arithmetic]), Int32(f32_codes[float32_arithmetic]))
end

"""Attention with the encoding inside the kernel: q head_dim × heads_q × seq_q × batch,
k head_dim × heads_kv × seq_k × batch and v head_dim_v × heads_kv × seq_k × batch (or
… × heads × tokens with cu_seqlens_q / cu_seqlens_k). Returns (o head_dim_v × heads_q ×
seq_q × batch, like q with v's head size; lse heads_q × tokens_q). head_dim_v is v's
first dimension (since 0.10.0 it may differ from head_dim, as DeepSeek-V2/V3's 192 /
128; the default softmax_scale stays 1 / √head_dim). Keywords:
causal, softmax_scale, num_threads, rope_dim, rope_base, rope_pairing, grape_m,
algebraic, bias, q_positions, k_positions, cu_seqlens_q, cu_seqlens_k; structured
positions (q_positions / k_positions still order the tokens for masks, biases and Shaw
labels): q_axes / k_axes (axes × tokens Int64) for axial RoPE (rope_axes = 2 or 3 with
rope_dim), M-RoPE (rope_sections, planes per axis summing to rope_dim / 2;
rope_sections_interleaved) and algebraic_grid (skew generators, axes × m = head_dim);
q_tree / k_tree (one 0-based child-index vector per token) for algebraic_tree (one skew
generator per branch, head_dim × head_dim); Shaw et al.'s shaw_max_distance with
shaw_key_table / shaw_value_table (head_dim × (2 shaw_max_distance + 1), head_dim_v rows
for the value table; column r for label r - k, shared by every head). Since 0.9.0: rope (a `Rope` applied inside the
kernel, q in the query role and k in the key role, in place of rope_dim), window =
(left, right) (flash-attn's sliding window, -1 unbounded on a side), softcap (Gemma 2's
logit softcap, 0: none, at most 1e30), sinks (gpt-oss's, one Float32 logit per query head), attn_mask
(SDPA's: Float32 additive or UInt8 / Bool allowed, seq_k × seq_q × heads_q × batch with
any dimension 1 to broadcast; packed: max_lk × max_lq × heads_q × sequences), kv_lengths
(keys used per sequence, padded layout) and block_table (forward only: a paged cache,
pages_per_sequence × batch page ids; k and v are then head_dim × heads_kv × page_size ×
num_pages). Since 0.10.0: float32_arithmetic (:exact, or :split_bf16x6 / :split_bf16x3:
Float32 products as six or three bf16 products on Intel AMX tiles where usable, exact
elsewhere; gpe/attention.h's CPU ARITHMETIC) and bf16_arithmetic (bfloat16 calls only,
which these Float32 / Float64 methods never make)."""
function attention_forward(q::StridedArray{T}, k::StridedArray{T}, v::StridedArray{T}; kwargs...) where {T<:Union{Float32,Float64}}
    o = similar(q, T, (size(v, 1), Base.tail(size(q))...))
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

# x itself where its strides are an Array's, else a dense copy: the backward writes dq,
# dk, dv with exactly the strides of q, k, v (attention.h), and `similar` gives dense
# arrays, so a strided view (a head slice of a fused qkv array) was refused.
dense(x::StridedArray) = strides(x) == strides(similar(x)) ? x : copy(x)

"""(dq, dk, dv) from d_o (like o: head_dim_v × the rest of q's size), o and lse
recomputed; dq, dk, dv shaped like q, k, v. Same keywords as attention_forward."""
function attention_backward(q::StridedArray{T}, k::StridedArray{T}, v::StridedArray{T}, d_o::StridedArray{T};
                            kwargs...) where {T<:Union{Float32,Float64}}
    q, k, v = dense(q), dense(k), dense(v)  # the gradients take their strides
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
    q, k, v = dense(q), dense(k), dense(v)  # the gradients take their strides
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
params.grape_a / grape_b (head_dim × m) / grape_omega (m) for GRAPE-M,
params.shaw_key_table / shaw_value_table (shaped like the tables given), params.sinks
(dL/dsinks, heads_q) and Kogkalidis et al.'s skew generators'
dL/dS (entrywise, unprojected: for S = A - Aᵀ, dL/dA = X - Xᵀ): params.algebraic
(dim × dim, for `algebraic`), params.algebraic_tree / algebraic_grid (one matrix per
branch or axis, like the generators given). `nothing` where the options carry no such
parameter."""
function attention_backward_with_parameters(q::StridedArray{T}, k::StridedArray{T}, v::StridedArray{T},
                                            d_o::StridedArray{T}; kwargs...) where {T<:Union{Float32,Float64}}
    q, k, v = dense(q), dense(k), dense(v)  # the gradients take their strides
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
    sinks = get(kwargs, :sinks, nothing)
    gz = sinks === nothing ? nothing : zeros(Float64, length(sinks))
    # Skew generators' gradients: alg (dim × dim, described as C's [dim, dim] with
    # column-major strides) and gen (m × m × count, C's [count, m, m]).
    alg_h = get(kwargs, :algebraic, nothing)
    galg = alg_h === nothing ? nothing : zeros(Float64, alg_h.dim, alg_h.dim)
    gen_stack(gens) = gens === nothing ? nothing : zeros(Float64, size(gens[1], 1), size(gens[1], 1), length(gens))
    gtree, ggrid = gen_stack(get(kwargs, :algebraic_tree, nothing)), gen_stack(get(kwargs, :algebraic_grid, nothing))
    unstack(g) = g === nothing ? nothing : [g[:, :, c] for c in 1:size(g, 3)]
    stack_parts(g) = (Int64[size(g, 3), size(g, 1), size(g, 2)], Int64[stride(g, 3), stride(g, 1), stride(g, 2)])
    keep = Any[]
    mk(a) = a === nothing ? nothing : (@tensor t_ a rev_parts; push!(keep, t_); t_)
    mkv(a) = a === nothing ? nothing : (@tensor t_ a vec_parts; push!(keep, t_); t_)
    mkm(a) = a === nothing ? nothing : (@tensor t_ a mat_parts; push!(keep, t_); t_)
    mks(a) = a === nothing ? nothing : (@tensor t_ a stack_parts; push!(keep, t_); t_)
    @tensor tq q rev_parts
    @tensor tk k rev_parts
    @tensor tv v rev_parts
    @tensor tdo d_o rev_parts
    @tensor tdq dq rev_parts
    @tensor tdk dk rev_parts
    @tensor tdv dv rev_parts
    GC.@preserve keep tq tk tv tdo tdq tdk tdv ba bb ga gb gw gsk gsv gz galg gtree ggrid begin
        opts = attention_options(keep; kwargs...)
        tba, tbb, tga, tgb, tgw = mk(ba), mk(bb), mk(ga), mk(gb), mk(gw)
        tsk, tsv = mk(gsk), mk(gsv)
        tgz, talg, ttree, tgrid = mkv(gz), mkm(galg), mks(gtree), mks(ggrid)
        GC.@preserve keep begin
            grads = AttentionParamGrads(ssize(AttentionParamGrads), tptr(tba), tptr(tbb), tptr(tga), tptr(tgb), tptr(tgw),
                                        tptr(tsk), tptr(tsv), tptr(tgz), tptr(talg), tptr(ttree), tptr(tgrid))
            check(ccall((:gpe_attention_backward_with_parameters, libgpe), Int32,
                        (Ref{AttentionOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ptr{DLTensor}, Ptr{DLTensor},
                         Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{AttentionParamGrads}),
                        opts, ref(tq), ref(tk), ref(tv), C_NULL, C_NULL, ref(tdo), ref(tdq), ref(tdk), ref(tdv), grads))
        end
    end
    return dq, dk, dv, (bias_a=ba, bias_b=bb, grape_a=ga, grape_b=gb, grape_omega=gw, shaw_key_table=gsk,
                        shaw_value_table=gsv, sinks=gz, algebraic=galg, algebraic_tree=unstack(gtree),
                        algebraic_grid=unstack(ggrid))
end
