//! gpe/image.h (since 0.5.0): image files: PNG and JPEG read into a gpe_image and
//! written from DLPack tensors.

use std::os::raw::c_char;

use super::{gpe_status, DLTensor};

#[repr(C)]
pub struct gpe_image {
    _opaque: [u8; 0],
}

extern "C" {
    pub fn gpe_image_read(path: *const c_char, grayscale: i32, out: *mut *mut gpe_image) -> gpe_status;
    pub fn gpe_image_destroy(image: *mut gpe_image);
    pub fn gpe_image_shape(image: *const gpe_image, rows: *mut i64, cols: *mut i64, channels: *mut i64) -> gpe_status;
    pub fn gpe_image_pixels(image: *const gpe_image, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_image_write_png(path: *const c_char, pixels: *const DLTensor, lo: f64, hi: f64) -> gpe_status;
    pub fn gpe_image_write_jpeg(path: *const c_char, pixels: *const DLTensor, quality: i32, lo: f64, hi: f64) -> gpe_status;
}
