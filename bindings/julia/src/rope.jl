# RoPE with its schedules, and reusable cos/sin tables (gpe/rope.h).
# Part of module GroupPE: included by ../GroupPE.jl, whose helpers it uses.

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
    # Since 0.10.0; Julia arrays are host memory: C_NULL.
    cuda_stream::Ptr{Cvoid}
end

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
        tok = RopeTokens(ssize(RopeTokens), l - 1, key ? 1 : 0, tptr(tid), tptr(toff), tptr(tcu), C_NULL)
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
        tok = RopeTokens(ssize(RopeTokens), l - 1, key ? 1 : 0, tptr(tid), tptr(toff), tptr(tcu), C_NULL)
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
