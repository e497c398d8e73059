# INR data and metrics: analytic images, grids, splits, MSE / PSNR (gpe/inr_data.h).
# Part of module GroupPE: included by ../GroupPE.jl, whose helpers it uses.

function synthetic_code(task::Symbol)
    task === :radial && return Int32(0)
    task === :spiral && return Int32(1)
    argerror("task must be :radial or :spiral; got $task")
end

"""Lim et al.'s analytic image (appendix D.1) on n × n pixel centres of [-1, 1]^2, row i
at y_i, column j at x_j: :radial |sin(15 sqrt(r))|, :spiral |sin(30 sqrt(0.1 r) + theta)|
(`signed=true`: the signed sine)."""
function synthetic_image(task::Symbol, n::Integer; signed::Bool=false)
    out = zeros(Float64, n, n)
    @tensor to out mat_parts
    GC.@preserve to begin
        check(ccall((:gpe_inr_synthetic_image, libgpe), Int32, (Int32, Int32, Ref{DLTensor}),
                    synthetic_code(task), signed ? 1 : 0, ref(to)))
    end
    return out
end

"""The vector field (eqs. 30, 31): out[i, j, :] = f(r, theta) (cos theta, sin theta), n × n × 2."""
function synthetic_vector_field(task::Symbol, n::Integer)
    out = zeros(Float64, n, n, 2)
    @tensor to out arr3_parts
    GC.@preserve to begin
        check(ccall((:gpe_inr_synthetic_vector_field, libgpe), Int32, (Int32, Ref{DLTensor}),
                    synthetic_code(task), ref(to)))
    end
    return out
end

"""The pixel centres as 2 × n² (column i * n + j + 1 is (x_j, y_i): row-major pixel order)."""
function grid_coordinates(n::Integer)
    out = zeros(Float64, 2, n * n)
    @tensor to out batch_parts
    GC.@preserve to begin
        check(ccall((:gpe_inr_grid_coordinates, libgpe), Int32, (Int64, Ref{DLTensor}), n, ref(to)))
    end
    return out
end

function split_parts(idx::Vector{Int64}, counts::Vector{Int64})
    a, b = counts[1], counts[1] + counts[2]
    return (train=idx[1:a], validation=idx[a+1:b], test=idx[b+1:end])
end

"""Lim et al. D.2: random train / validation / test parts of the 0-based pixel indices
0:num_points-1, each ascending; deterministic in seed."""
function random_split(num_points::Integer, train_fraction::Real, validation_fraction::Real, seed::Integer)
    idx = zeros(Int64, num_points)
    counts = zeros(Int64, 3)
    @tensor ti idx vec_parts
    GC.@preserve ti counts begin
        check(ccall((:gpe_inr_random_split, libgpe), Int32, (Int64, Float64, Float64, UInt64, Ref{DLTensor}, Ptr{Int64}),
                    num_points, train_fraction, validation_fraction, UInt64(seed), ref(ti), pointer(counts)))
    end
    return split_parts(idx, counts)
end

"""Zheng et al.: train on the [::2] x [::2] sub-grid of a rows × cols image (0-based
row-major indices), test on the rest; validation is empty."""
function regular_grid_split(rows::Integer, cols::Integer)
    idx = zeros(Int64, rows * cols)
    counts = zeros(Int64, 3)
    @tensor ti idx vec_parts
    GC.@preserve ti counts begin
        check(ccall((:gpe_inr_regular_grid_split, libgpe), Int32, (Int64, Int64, Ref{DLTensor}, Ptr{Int64}),
                    rows, cols, ref(ti), pointer(counts)))
    end
    return split_parts(idx, counts)
end

"""Mean of (a - b)^2 over two Float64 arrays of one shape (1 to 3 dimensions)."""
function inr_mse(a::StridedArray{Float64}, b::StridedArray{Float64})
    out = Ref{Float64}(0.0)
    @tensor ta a arr_parts
    @tensor tb b arr_parts
    GC.@preserve ta tb begin
        check(ccall((:gpe_inr_mse, libgpe), Int32, (Ref{DLTensor}, Ref{DLTensor}, Ref{Float64}), ref(ta), ref(tb), out))
    end
    return out[]
end

"""PSNR = 10 log10(peak^2 / MSE) in dB (Inf when a == b)."""
function inr_psnr(a::StridedArray{Float64}, b::StridedArray{Float64}; peak::Real=1.0)
    out = Ref{Float64}(0.0)
    @tensor ta a arr_parts
    @tensor tb b arr_parts
    GC.@preserve ta tb begin
        check(ccall((:gpe_inr_psnr, libgpe), Int32, (Ref{DLTensor}, Ref{DLTensor}, Float64, Ref{Float64}),
                    ref(ta), ref(tb), peak, out))
    end
    return out[]
end
