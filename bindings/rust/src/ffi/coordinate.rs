//! gpe/coordinate.h: coordinate encodings: Zheng et al.'s shifted bases and, since 0.4.0,
//! the coordinate encoders behind gpe_coordinate_encoder (Fourier features, SO(2)
//! Bessel, shifted, spherical harmonics) and the graph Laplacian's eigenvectors.

use super::{gpe_status, DLTensor};

pub const GPE_SHIFTED_GAUSSIAN: i32 = 0;
pub const GPE_SHIFTED_TRIANGLE: i32 = 1;
pub const GPE_SHIFTED_RECTANGLE: i32 = 2;
pub const GPE_SHIFTED_IMPULSE: i32 = 3;
pub const GPE_SHIFTED_SINE: i32 = 4;
pub const GPE_SHIFTED_SQUARE: i32 = 5;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_shifted_basis_options {
    pub struct_size: u32,
    pub kind: i32,
    pub num_shifts: i64,
    pub width: f64,
    pub lo: f64,
    pub hi: f64,
}
impl gpe_shifted_basis_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), kind: GPE_SHIFTED_GAUSSIAN, num_shifts: 0, width: 0.0, lo: 0.0, hi: 1.0 }
    }
}

extern "C" {
    pub fn gpe_shifted_basis_encode(options: *const gpe_shifted_basis_options, coords: *const DLTensor, out: *mut DLTensor) -> gpe_status;
}

// ---- Coordinate encoders, graph encodings (0.4.0) ----

#[repr(C)]
pub struct gpe_coordinate_encoder {
    _private: [u8; 0],
}

pub const GPE_FOURIER_GAUSSIAN: i32 = 0;
pub const GPE_FOURIER_LINEAR: i32 = 1;
pub const GPE_FOURIER_LOG_LINEAR: i32 = 2;
pub const GPE_FOURIER_NERF: i32 = 3;
pub const GPE_FOURIER_TXT: i32 = 4;
pub const GPE_FREQUENCY_TWO_PI: i32 = 0;
pub const GPE_FREQUENCY_ANGULAR: i32 = 1;
pub const GPE_SHIFTED_SIMPLE: i32 = 0;
pub const GPE_SHIFTED_COMPLEX: i32 = 1;
pub const GPE_LAPLACIAN_COMBINATORIAL: i32 = 0;
pub const GPE_LAPLACIAN_SYMMETRIC: i32 = 1;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_fourier_features_options {
    pub struct_size: u32,
    pub kind: i32,
    pub dim: i64,
    pub num_frequencies: i64,
    pub scale: f64,
    pub convention: i32,
    pub seed: u64,
}
impl gpe_fourier_features_options {
    pub fn init() -> Self {
        Self {
            struct_size: struct_size!(Self),
            kind: GPE_FOURIER_GAUSSIAN,
            dim: 2,
            num_frequencies: 16,
            scale: 1.0,
            convention: GPE_FREQUENCY_TWO_PI,
            seed: 0,
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_so2_bessel_options {
    pub struct_size: u32,
    pub polar: i32,
    pub num_terms: i64,
    pub max_scale: f64,
    pub max_k: i32,
    pub order_m: i32,
    pub seed: u64,
}
impl gpe_so2_bessel_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), polar: 0, num_terms: 16, max_scale: 1.0, max_k: 2, order_m: 0, seed: 0 }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_laplacian_options {
    pub struct_size: u32,
    pub kind: i32,
    pub skip_first: i32,
}
impl gpe_laplacian_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), kind: GPE_LAPLACIAN_COMBINATORIAL, skip_first: 0 }
    }
}

extern "C" {
    pub fn gpe_coordinate_encoder_destroy(encoder: *mut gpe_coordinate_encoder);
    pub fn gpe_coordinate_encoder_dims(encoder: *const gpe_coordinate_encoder, input_dim: *mut i64, output_dim: *mut i64) -> gpe_status;
    pub fn gpe_coordinate_encode(encoder: *const gpe_coordinate_encoder, points: *const DLTensor, features: *mut DLTensor) -> gpe_status;
    pub fn gpe_coordinate_backward(
        encoder: *const gpe_coordinate_encoder,
        points: *const DLTensor,
        grad_features: *const DLTensor,
        grad_points: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_fourier_features_create(options: *const gpe_fourier_features_options, out: *mut *mut gpe_coordinate_encoder) -> gpe_status;
    pub fn gpe_fourier_features_create_from_frequencies(
        frequencies: *const DLTensor,
        convention: i32,
        out: *mut *mut gpe_coordinate_encoder,
    ) -> gpe_status;
    pub fn gpe_fourier_features_angular_frequencies(encoder: *const gpe_coordinate_encoder, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_so2_bessel_create_sampled(options: *const gpe_so2_bessel_options, out: *mut *mut gpe_coordinate_encoder) -> gpe_status;
    pub fn gpe_so2_bessel_create(
        orders: *const DLTensor,
        scales: *const DLTensor,
        weights: *const DLTensor,
        polar: i32,
        out: *mut *mut gpe_coordinate_encoder,
    ) -> gpe_status;
    pub fn gpe_so2_bessel_terms(
        encoder: *const gpe_coordinate_encoder,
        orders: *mut DLTensor,
        scales: *mut DLTensor,
        weights: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_bessel_j(order: i32, x: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_shifted_encoder_create(
        form: i32,
        axes: *const gpe_shifted_basis_options,
        num_axes: i64,
        out: *mut *mut gpe_coordinate_encoder,
    ) -> gpe_status;
    pub fn gpe_spherical_harmonics_create(max_degree: i32, out: *mut *mut gpe_coordinate_encoder) -> gpe_status;
    pub fn gpe_laplacian_eigenvectors(
        options: *const gpe_laplacian_options,
        num_nodes: i64,
        edges: *const DLTensor,
        weights: *const DLTensor,
        eigenvalues: *mut DLTensor,
        eigenvectors: *mut DLTensor,
    ) -> gpe_status;
}
