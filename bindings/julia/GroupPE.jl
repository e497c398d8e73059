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

# ==== Since 0.4.0: coordinate encoders, graph encodings, analysis, 3D and blended fits ====
export CoordinateEncoder, fourier_features, fourier_features_from_frequencies, so2_bessel_sampled, so2_bessel,
       shifted_encoder, spherical_harmonics, encoder_dims, coordinate_encode, coordinate_backward,
       angular_frequencies, so2_bessel_terms, bessel_j, laplacian_eigenvectors, embedded_distance_matrix,
       embedder_stable_rank, embedder_distance, condition_number, fit_separable_3d, predict_separable_3d,
       fit_blended_2d, predict_blended_2d

# ==== Since 0.4.0: algebraic trees, grids, periodic domains, locality; Shaw values; Transformer-XL ====
export AlgebraicTree, algebraic_tree_shape, algebraic_tree_apply, algebraic_tree_matrix, algebraic_tree_backward,
       algebraic_tree_node_matrices,
       AlgebraicGrid, algebraic_grid_shape, algebraic_grid_apply, algebraic_grid_backward,
       algebraic_periodic_apply, locality_scale!, shaw_value_output, shaw_value_output_backward,
       transformer_xl_score_terms, transformer_xl_score_terms_backward

# ==== Since 0.3.0 (with 0.4.0's GRAPE-A, published schedules and parameter gradients):
# ==== RoPE, additive biases, attention ====
export Rope, rope_shape, rope_frequencies, rope_forward, rope_backward, published_schedule,
       RopeTable, rope_table, rope_table_forward, rope_table_backward,
       Bias, bias_alibi, bias_t5, bias_fox, bias_grape_ap, bias_grape_a, bias_info, bias_alibi_slopes,
       bias_fill_tile, bias_accumulate_gradient!, bias_fox_logit_gradient, bias_grape_a_lift,
       attention_forward, attention_backward, attention_backward_v2, attention_backward_with_parameters

# ---- INR training, data, metrics and image files (C ABI 0.5.0) ----
export MlpOptions, mlp_options, mlp_num_parameters, mlp_init, mlp_fit, mlp_predict,
       mlp_num_evaluations, mlp_fit_validated,
       LinearAdamOptions, linear_adam_options, fit_dense_adam, fit_separable_adam_2d,
       synthetic_image, synthetic_vector_field, grid_coordinates, random_split, regular_grid_split,
       inr_mse, inr_psnr, GPEImage, image_read, image_shape, image_pixels, image_write_png,
       image_write_jpeg

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

# ---- Option structs (gpe.h; each in its area's file; struct_size = sizeof of that layout) ----
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

function check_batch(x::AbstractMatrix, dim::Integer, positions::AbstractVector)
    size(x) == (dim, length(positions)) ||
        argerror("x is $(size(x, 1)) × $(size(x, 2)); expected dim × N = $dim × $(length(positions))")
end

# A 3-D array a (n0 × n1 × n2) as the C tensor [n0, n1, n2] with a's strides.
arr3_parts(a::StridedArray{T,3}) where {T} = (Int64[size(a)...], Int64[strides(a)...])

# Square matrices as the C API's row-major blocks, one after another.
rowmajor(ms) = Float64[m[r, c] for m in ms for r in 1:size(m, 1) for c in 1:size(m, 2)]

# An N-d Julia array as the C tensor with the dimensions reversed (the first Julia
# dimension, contiguous, is the last C one): head_dim × heads × seq × batch is bshd.
rev_parts(a::StridedArray) = (Int64[reverse(size(a))...], Int64[reverse(strides(a))...])
# The address of a tensor made by @tensor (C_NULL for nothing), for struct fields.
tptr(t) = t === nothing ? Ptr{DLTensor}(C_NULL) : Base.unsafe_convert(Ptr{DLTensor}, t[1])

# A 1- to 3-D array as the C tensor of its own dimensions and strides.
arr_parts(a::StridedArray) = (Int64[size(a)...], Int64[strides(a)...])

# The areas, one file each, in gpe.h's order (a file's types come before the files
# that use them in signatures: attention.jl takes GrapeM, AlgebraicSequence and Bias).
include("src/so.jl")
include("src/sequence.jl")
include("src/algebraic.jl")
include("src/relative.jl")
include("src/rope.jl")
include("src/bias.jl")
include("src/coordinate.jl")
include("src/analysis.jl")
include("src/inr.jl")
include("src/inr_training.jl")
include("src/inr_data.jl")
include("src/image.jl")
include("src/attention.jl")

end # module
