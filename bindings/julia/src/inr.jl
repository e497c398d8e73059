# Closed-form INR fits: separable 2D and 3D, blended, condition number (gpe/inr.h).
# Part of module GroupPE: included by ../GroupPE.jl, whose helpers it uses.

struct SeparableFitOptions
    struct_size::UInt32
    float32_image_products::Int32
    lambda::Float64
    rcond::Float64
end

struct BlendedFitOptions
    struct_size::UInt32
    max_iterations::Int32
    lambda::Float64
    tolerance::Float64
end

"""W (Ky × Kx) = A_y S A_x' with A = (Ψ'Ψ + λI)⁻¹Ψ' (Zheng et al. eq. 10)."""
function fit_separable_2d(psi_y::StridedMatrix{Float64}, psi_x::StridedMatrix{Float64}, image::StridedMatrix{Float64};
                          lambda::Real=0.0, float32_image_products::Bool=false, rcond::Real=0.0)
    w = zeros(Float64, size(psi_y, 2), size(psi_x, 2))
    @tensor ty psi_y mat_parts
    @tensor tx psi_x mat_parts
    @tensor ti image mat_parts
    @tensor tw w mat_parts
    o = SeparableFitOptions(ssize(SeparableFitOptions), float32_image_products ? 1 : 0, lambda, rcond)
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

"""cond(Ψ) = s_max / s_min (Inf when rank deficient)."""
function condition_number(psi::StridedMatrix{Float64})
    out = Ref{Float64}(0.0)
    @tensor tp psi mat_parts
    GC.@preserve tp begin
        check(ccall((:gpe_inr_condition_number, libgpe), Int32, (Ref{DLTensor}, Ref{Float64}), ref(tp), out))
    end
    return out[]
end

"""Volumes on a separable grid (Zheng et al. sec. 5): W (K0 × K1 × K2) from Ψ_d (n_d × K_d)
and volume (n0 × n1 × n2)."""
function fit_separable_3d(psi0::StridedMatrix{Float64}, psi1::StridedMatrix{Float64}, psi2::StridedMatrix{Float64},
                          volume::StridedArray{Float64,3}; lambda::Real=0.0, rcond::Real=0.0)
    w = zeros(Float64, size(psi0, 2), size(psi1, 2), size(psi2, 2))
    o = SeparableFitOptions(ssize(SeparableFitOptions), 0, lambda, rcond)
    @tensor t0 psi0 mat_parts
    @tensor t1 psi1 mat_parts
    @tensor t2 psi2 mat_parts
    @tensor tv volume arr3_parts
    @tensor tw w arr3_parts
    GC.@preserve t0 t1 t2 tv tw begin
        check(ccall((:gpe_inr_fit_separable_3d, libgpe), Int32,
                    (Ref{SeparableFitOptions}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    o, ref(t0), ref(t1), ref(t2), ref(tv), ref(tw)))
    end
    return w
end
"""W ×₀ Ψ0 ×₁ Ψ1 ×₂ Ψ2 (n0 × n1 × n2)."""
function predict_separable_3d(psi0::StridedMatrix{Float64}, psi1::StridedMatrix{Float64}, psi2::StridedMatrix{Float64},
                              w::StridedArray{Float64,3})
    out = zeros(Float64, size(psi0, 1), size(psi1, 1), size(psi2, 1))
    @tensor t0 psi0 mat_parts
    @tensor t1 psi1 mat_parts
    @tensor t2 psi2 mat_parts
    @tensor tw w arr3_parts
    @tensor to out arr3_parts
    GC.@preserve t0 t1 t2 tw to begin
        check(ccall((:gpe_inr_predict_separable_3d, libgpe), Int32,
                    (Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    ref(t0), ref(t1), ref(t2), ref(tw), ref(to)))
    end
    return out
end

"""Blended fit of scattered samples (Zheng et al. sec. 5, app. B.2): 1-D encoders ex, ey,
grids, points 2 × P (x; y), values P. Returns (W (Ky × Kx), iterations, rms_residual)."""
function fit_blended_2d(ex::CoordinateEncoder, ey::CoordinateEncoder, grid_x::Vector{Float64}, grid_y::Vector{Float64},
                        points::StridedMatrix{Float64}, values::Vector{Float64};
                        max_iterations::Integer=500, lambda::Real=1e-6, tolerance::Real=1e-6)
    w = zeros(Float64, ey.output_dim, ex.output_dim)
    o = BlendedFitOptions(ssize(BlendedFitOptions), max_iterations, lambda, tolerance)
    iterations, rms = Ref{Int32}(0), Ref{Float64}(0.0)
    @tensor tgx grid_x vec_parts
    @tensor tgy grid_y vec_parts
    @tensor tp points batch_parts
    @tensor tv values vec_parts
    @tensor tw w mat_parts
    GC.@preserve tgx tgy tp tv tw ex ey begin
        check(ccall((:gpe_inr_fit_blended_2d, libgpe), Int32,
                    (Ref{BlendedFitOptions}, Ptr{Cvoid}, Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor},
                     Ref{DLTensor}, Ref{DLTensor}, Ref{Int32}, Ref{Float64}),
                    o, ex.ptr, ey.ptr, ref(tgx), ref(tgy), ref(tp), ref(tv), ref(tw), iterations, rms))
    end
    return w, Int(iterations[]), rms[]
end
"""The blended model's values at points (2 × P) for weights W (Ky × Kx)."""
function predict_blended_2d(ex::CoordinateEncoder, ey::CoordinateEncoder, grid_x::Vector{Float64}, grid_y::Vector{Float64},
                            points::StridedMatrix{Float64}, w::StridedMatrix{Float64})
    out = zeros(Float64, size(points, 2))
    @tensor tgx grid_x vec_parts
    @tensor tgy grid_y vec_parts
    @tensor tp points batch_parts
    @tensor tw w mat_parts
    @tensor to out vec_parts
    GC.@preserve tgx tgy tp tw to ex ey begin
        check(ccall((:gpe_inr_predict_blended_2d, libgpe), Int32,
                    (Ptr{Cvoid}, Ptr{Cvoid}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}, Ref{DLTensor}),
                    ex.ptr, ey.ptr, ref(tgx), ref(tgy), ref(tp), ref(tw), ref(to)))
    end
    return out
end
