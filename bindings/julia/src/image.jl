# PNG and JPEG files (gpe/image.h).
# Part of module GroupPE: included by ../GroupPE.jl, whose helpers it uses.

"""A decoded PNG or JPEG file (gpe_image), values in [0, 1]."""
mutable struct GPEImage
    ptr::Ptr{Cvoid}
end
function Base.close(im::GPEImage)
    im.ptr == C_NULL && return
    ccall((:gpe_image_destroy, libgpe), Cvoid, (Ptr{Cvoid},), im.ptr)
    im.ptr = C_NULL
    return
end

"""Reads a PNG or JPEG; `grayscale=true` gives one channel, otherwise three (RGB)."""
function image_read(path::AbstractString; grayscale::Bool=false)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:gpe_image_read, libgpe), Int32, (Cstring, Int32, Ref{Ptr{Cvoid}}), path, grayscale ? 1 : 0, out))
    im = GPEImage(out[])
    finalizer(close, im)
    return im
end

"""(rows, cols, channels)."""
function image_shape(im::GPEImage)
    r, c, ch = Ref{Int64}(0), Ref{Int64}(0), Ref{Int64}(0)
    GC.@preserve im begin
        check(ccall((:gpe_image_shape, libgpe), Int32, (Ptr{Cvoid}, Ref{Int64}, Ref{Int64}, Ref{Int64}), im.ptr, r, c, ch))
    end
    return (Int(r[]), Int(c[]), Int(ch[]))
end

"""The pixels as rows × cols × channels (Float32 or Float64)."""
function image_pixels(im::GPEImage; T::Type=Float64)
    out = zeros(T, image_shape(im)...)
    @tensor to out arr3_parts
    GC.@preserve to im begin
        check(ccall((:gpe_image_pixels, libgpe), Int32, (Ptr{Cvoid}, Ref{DLTensor}), im.ptr, ref(to)))
    end
    return out
end

"""Writes pixels (rows × cols, or rows × cols × 1 or 3) as an 8-bit PNG, [lo, hi] to 0..255."""
function image_write_png(path::AbstractString, pixels::StridedArray{T}; lo::Real=0.0, hi::Real=1.0) where {T<:Union{Float32,Float64}}
    @tensor tp pixels arr_parts
    GC.@preserve tp begin
        check(ccall((:gpe_image_write_png, libgpe), Int32, (Cstring, Ref{DLTensor}, Float64, Float64),
                    path, ref(tp), lo, hi))
    end
    return nothing
end

"""As `image_write_png`, as a baseline JPEG of the given quality (1..100; lossy)."""
function image_write_jpeg(path::AbstractString, pixels::StridedArray{T}; quality::Integer=90, lo::Real=0.0,
                          hi::Real=1.0) where {T<:Union{Float32,Float64}}
    @tensor tp pixels arr_parts
    GC.@preserve tp begin
        check(ccall((:gpe_image_write_jpeg, libgpe), Int32, (Cstring, Ref{DLTensor}, Int32, Float64, Float64),
                    path, ref(tp), quality, lo, hi))
    end
    return nothing
end
