//! gpe/common.h and DLPack 0.6: the status codes, the plane pairing of rotations, the
//! version and the per-thread error message, and the DLTensor every entry point takes.

use std::os::raw::{c_char, c_int, c_void};

pub type gpe_status = i32;
pub const GPE_OK: gpe_status = 0;
pub const GPE_ERROR_INVALID_ARGUMENT: gpe_status = 1;
pub const GPE_ERROR_OUT_OF_RANGE: gpe_status = 2;
pub const GPE_ERROR_UNSUPPORTED: gpe_status = 3;
pub const GPE_ERROR_OUT_OF_MEMORY: gpe_status = 4;
pub const GPE_ERROR_INTERNAL: gpe_status = 5;
pub const GPE_ERROR_VERSION_MISMATCH: gpe_status = 6;

pub const GPE_PAIRING_INTERLEAVED: i32 = 0;
pub const GPE_PAIRING_HALF_SPLIT: i32 = 1;

// ---- DLPack 0.6 ----
pub const KDL_CPU: i32 = 1;
pub const KDL_INT: u8 = 0;
pub const KDL_UINT: u8 = 1;
pub const KDL_FLOAT: u8 = 2;
// Since 0.3.0.
pub const KDL_BFLOAT: u8 = 4;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLDataType {
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    pub strides: *mut i64,
    pub byte_offset: u64,
}

extern "C" {
    pub fn gpe_version() -> c_int;
    pub fn gpe_version_string() -> *const c_char;
    pub fn gpe_last_error_message() -> *const c_char;
    pub fn gpe_status_name(status: gpe_status) -> *const c_char;
}
