# INR training: the MLP and Adam fits of a linear layer (gpe/inr_training.h).
# Part of module GroupPE: included by ../GroupPE.jl, whose helpers it uses.

"""The MLP's architecture and Adam schedule (gpe_mlp_options; Lim et al., appendix D.2).
Build it with `mlp_options`; progress callbacks are not exposed (C_NULL)."""
struct MlpOptions
    struct_size::UInt32
    hidden_width::Int64
    num_hidden_layers::Int64
    steps::Int64
    learning_rate::Float64
    beta1::Float64
    beta2::Float64
    epsilon::Float64
    seed::UInt64
    report_every::Int64
    progress::Ptr{Cvoid}
    progress_user_data::Ptr{Cvoid}
end
"""Lim et al.'s defaults: width 128, 3 hidden layers, 500 full-batch Adam steps at 1e-3."""
mlp_options(; hidden_width::Integer=128, num_hidden_layers::Integer=3, steps::Integer=500,
            learning_rate::Real=1e-3, beta1::Real=0.9, beta2::Real=0.999, epsilon::Real=1e-8,
            seed::Integer=0) =
    MlpOptions(ssize(MlpOptions), hidden_width, num_hidden_layers, steps, learning_rate, beta1, beta2,
               epsilon, UInt64(seed), 0, C_NULL, C_NULL)

"""The flat parameter count for input_dim -> ... -> output_dim (W_0 row-major, b_0, W_1, ...)."""
function mlp_num_parameters(o::MlpOptions, input_dim::Integer, output_dim::Integer)
    n = Ref{Int64}(0)
    check(ccall((:gpe_inr_mlp_num_parameters, libgpe), Int32, (Ref{MlpOptions}, Int64, Int64, Ref{Int64}),
                o, input_dim, output_dim, n))
    return Int(n[])
end

"""The seeded initial parameters (PyTorch's nn.Linear default from o.seed)."""
function mlp_init(o::MlpOptions, input_dim::Integer, output_dim::Integer; T::Type=Float64)
    p = zeros(T, mlp_num_parameters(o, input_dim, output_dim))
    @tensor tp p vec_parts
    GC.@preserve tp begin
        check(ccall((:gpe_inr_mlp_init, libgpe), Int32, (Ref{MlpOptions}, Int64, Int64, Ref{DLTensor}),
                    o, input_dim, output_dim, ref(tp)))
    end
    return p
end

"""Full-batch Adam on features (input_dim × N, one column per sample) and targets
(output_dim × N), from `initial` or the seeded initialisation. Returns
(parameters, train_loss (MSE before each step), final_loss)."""
function mlp_fit(o::MlpOptions, features::StridedMatrix{T}, targets::StridedMatrix{T};
                 initial::Union{Nothing,StridedVector{T}}=nothing) where {T<:Union{Float32,Float64}}
    size(features, 2) == size(targets, 2) ||
        argerror("features has $(size(features, 2)) columns, targets $(size(targets, 2))")
    o.steps >= 0 || argerror("steps is $(o.steps); expected >= 0")
    p = zeros(T, mlp_num_parameters(o, size(features, 1), size(targets, 1)))
    initial === nothing || length(initial) == length(p) ||
        argerror("initial has $(length(initial)) parameters; expected $(length(p))")
    loss = zeros(Float64, o.steps)
    final = Ref{Float64}(0.0)
    @tensor tf features batch_parts
    @tensor tt targets batch_parts
    @tensor tp p vec_parts
    @tensor tl loss vec_parts
    ti = initial === nothing ? nothing : (@tensor ti_ initial vec_parts; ti_)
    GC.@preserve tf tt tp tl ti begin
        check(ccall((:gpe_inr_mlp_fit, libgpe), Int32,
                    (Ref{MlpOptions}, Ref{DLTensor}, Ref{DLTensor}, Ptr{DLTensor}, Ref{DLTensor}, Ref{DLTensor},
                     Ref{Float64}),
                    o, ref(tf), ref(tt), tptr(ti), ref(tp), ref(tl), final))
    end
    return p, loss, final[]
end

# gpe_mlp_validation: the held-out set (inputs), the validation curve (optional outputs)
# and (0.7.0) the progress callback that also gets the validation loss.
struct MlpValidation
    struct_size::UInt32
    features::Ptr{DLTensor}
    targets::Ptr{DLTensor}
    steps::Ptr{DLTensor}
    loss::Ptr{DLTensor}
    progress::Ptr{Cvoid}
    progress_user_data::Ptr{Cvoid}
end

# The Julia function behind gpe_mlp_validation.progress_user_data, and the first exception
# it threw (an exception must not unwind through the library's C frames: it is kept and
# thrown once the fit has returned).
mutable struct ValidationProgressState
    f::Any
    error::Any
end

function validation_progress_trampoline(user::Ptr{Cvoid}, step::Int64, train_loss::Float64,
                                        validation_loss::Float64)::Cvoid
    state = unsafe_pointer_to_objref(user)::ValidationProgressState
    state.error === nothing || return nothing
    try
        state.f(step, train_loss, validation_loss)
    catch e
        state.error = e
    end
    return nothing
end

"""K, the number of validation evaluations of a fit of `steps` updates evaluated after
every `eval_every` updates and after the last (0: the last only); 1 when steps is 0."""
function mlp_num_evaluations(steps::Integer, eval_every::Integer=0)
    o = MlpOptions(ssize(MlpOptions), 1, 0, steps, 1e-3, 0.9, 0.999, 1e-8, UInt64(0), eval_every, C_NULL, C_NULL)
    n = Ref{Int64}(0)
    check(ccall((:gpe_inr_mlp_num_evaluations, libgpe), Int32, (Ref{MlpOptions}, Ref{Int64}), o, n))
    return Int(n[])
end

"""`mlp_fit` with a held-out validation set (gpe_inr_mlp_fit_v2): validation_features
(input_dim × M) and validation_targets (output_dim × M), evaluated after every
`eval_every` updates and after the last (0: the last only). The training is unchanged,
bit for bit. Returns (parameters, train_loss, final_loss, validation_steps,
validation_loss): after validation_steps[k] updates the held-out MSE was
validation_loss[k]. `validation_progress(step, train_loss, validation_loss)` (C ABI 0.7.0)
is called at each evaluation as it is made, with validation_loss[k]; an exception thrown
in it stops the calls and is thrown when the fit returns."""
function mlp_fit_validated(o::MlpOptions, features::StridedMatrix{T}, targets::StridedMatrix{T},
                           validation_features::StridedMatrix{T}, validation_targets::StridedMatrix{T};
                           eval_every::Integer=0,
                           initial::Union{Nothing,StridedVector{T}}=nothing,
                           validation_progress=nothing) where {T<:Union{Float32,Float64}}
    size(features, 2) == size(targets, 2) ||
        argerror("features has $(size(features, 2)) columns, targets $(size(targets, 2))")
    k = mlp_num_evaluations(o.steps, eval_every)
    ov = MlpOptions(o.struct_size, o.hidden_width, o.num_hidden_layers, o.steps, o.learning_rate, o.beta1,
                    o.beta2, o.epsilon, o.seed, eval_every, o.progress, o.progress_user_data)
    p = zeros(T, mlp_num_parameters(o, size(features, 1), size(targets, 1)))
    initial === nothing || length(initial) == length(p) ||
        argerror("initial has $(length(initial)) parameters; expected $(length(p))")
    loss = zeros(Float64, o.steps)
    vsteps = zeros(Int64, k)
    vloss = zeros(Float64, k)
    final = Ref{Float64}(0.0)
    @tensor tf features batch_parts
    @tensor tt targets batch_parts
    @tensor tp p vec_parts
    @tensor tl loss vec_parts
    @tensor tvf validation_features batch_parts
    @tensor tvt validation_targets batch_parts
    @tensor tvs vsteps vec_parts
    @tensor tvl vloss vec_parts
    ti = initial === nothing ? nothing : (@tensor ti_ initial vec_parts; ti_)
    state = validation_progress === nothing ? nothing : ValidationProgressState(validation_progress, nothing)
    cb = state === nothing ? C_NULL :
         @cfunction(validation_progress_trampoline, Cvoid, (Ptr{Cvoid}, Int64, Float64, Float64))
    status = GC.@preserve tf tt tp tl tvf tvt tvs tvl ti state begin
        user = state === nothing ? C_NULL : pointer_from_objref(state)
        val = MlpValidation(ssize(MlpValidation), tptr(tvf), tptr(tvt), tptr(tvs), tptr(tvl), cb, user)
        ccall((:gpe_inr_mlp_fit_v2, libgpe), Int32,
              (Ref{MlpOptions}, Ref{DLTensor}, Ref{DLTensor}, Ptr{DLTensor}, Ref{DLTensor}, Ref{DLTensor},
               Ref{Float64}, Ref{MlpValidation}),
              ov, ref(tf), ref(tt), tptr(ti), ref(tp), ref(tl), final, val)
    end
    state === nothing || state.error === nothing || throw(state.error)
    check(status)
    return p, loss, final[], vsteps, vloss
end

"""The network's output (output_dim × N) on features (input_dim × N)."""
function mlp_predict(o::MlpOptions, parameters::StridedVector{T}, features::StridedMatrix{T},
                     output_dim::Integer) where {T<:Union{Float32,Float64}}
    out = zeros(T, output_dim, size(features, 2))
    @tensor tp parameters vec_parts
    @tensor tf features batch_parts
    @tensor to out batch_parts
    GC.@preserve tp tf to begin
        check(ccall((:gpe_inr_mlp_predict, libgpe), Int32, (Ref{MlpOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    o, ref(tp), ref(tf), ref(to)))
    end
    return out
end

"""Adam on a linear layer over a fixed encoding (gpe_linear_adam_options; Zheng et al.
sec. 6.2), the learning rate decayed exponentially to final_learning_rate."""
struct LinearAdamOptions
    struct_size::UInt32
    steps::Int64
    learning_rate::Float64
    final_learning_rate::Float64
    beta1::Float64
    beta2::Float64
    epsilon::Float64
    report_every::Int64
    progress::Ptr{Cvoid}
    progress_user_data::Ptr{Cvoid}
end
linear_adam_options(; steps::Integer=2000, learning_rate::Real=1e-2, final_learning_rate::Real=learning_rate,
                    beta1::Real=0.9, beta2::Real=0.999, epsilon::Real=1e-8) =
    LinearAdamOptions(ssize(LinearAdamOptions), steps, learning_rate, final_learning_rate, beta1, beta2, epsilon,
                      0, C_NULL, C_NULL)

"""Dense model Y_hat = Phi W (Zheng et al. eq. 16): features N × F, targets N × C.
Returns (W (F × C), train_loss, final_loss)."""
function fit_dense_adam(o::LinearAdamOptions, features::StridedMatrix{Float64}, targets::StridedMatrix{Float64})
    o.steps >= 1 || argerror("steps is $(o.steps); expected >= 1")
    w = zeros(Float64, size(features, 2), size(targets, 2))
    loss = zeros(Float64, o.steps)
    final = Ref{Float64}(0.0)
    @tensor tf features mat_parts
    @tensor tt targets mat_parts
    @tensor tw w mat_parts
    @tensor tl loss vec_parts
    GC.@preserve tf tt tw tl begin
        check(ccall((:gpe_inr_fit_dense_adam, libgpe), Int32,
                    (Ref{LinearAdamOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{Float64}),
                    o, ref(tf), ref(tt), ref(tw), ref(tl), final))
    end
    return w, loss, final[]
end

"""Separable model S_hat = Psi_y W Psi_x' (Zheng et al. eq. 10): psi_y Ny × Ky,
psi_x Nx × Kx, image Ny × Nx. Returns (W (Ky × Kx), train_loss, final_loss)."""
function fit_separable_adam_2d(o::LinearAdamOptions, psi_y::StridedMatrix{Float64}, psi_x::StridedMatrix{Float64},
                               image::StridedMatrix{Float64})
    o.steps >= 1 || argerror("steps is $(o.steps); expected >= 1")
    w = zeros(Float64, size(psi_y, 2), size(psi_x, 2))
    loss = zeros(Float64, o.steps)
    final = Ref{Float64}(0.0)
    @tensor ty psi_y mat_parts
    @tensor tx psi_x mat_parts
    @tensor ti image mat_parts
    @tensor tw w mat_parts
    @tensor tl loss vec_parts
    GC.@preserve ty tx ti tw tl begin
        check(ccall((:gpe_inr_fit_separable_adam_2d, libgpe), Int32,
                    (Ref{LinearAdamOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor},
                     Ref{Float64}),
                    o, ref(ty), ref(tx), ref(ti), ref(tw), ref(tl), final))
    end
    return w, loss, final[]
end
