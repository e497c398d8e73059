# Additive attention biases: ALiBi, T5, FoX, GRAPE-AP, GRAPE-A (gpe/bias.h).
# Part of module GroupPE: included by ../GroupPE.jl, whose helpers it uses.

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
