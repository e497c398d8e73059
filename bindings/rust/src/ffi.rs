//! Hand-written declarations of gpe.h (c_api/include/gpe/gpe.h) and the DLPack 0.6
//! structs it uses, one module per area header of c_api/include/gpe (ffi/so.rs declares
//! gpe/so.h, ...), all re-exported here: every item is `gpe::ffi::NAME`. Field order and
//! types follow the headers exactly; option structs begin with `struct_size`, set by
//! their `init()` constructors (the *_INIT macros of gpe.h) to the size this crate was
//! written against.
#![allow(non_camel_case_types)]

// The struct_size of an option struct: its size as this crate declares it.
macro_rules! struct_size {
    ($t:ty) => {
        std::mem::size_of::<$t>() as u32
    };
}

// One module per header, in gpe.h's order of includes.
mod common;
mod so;
mod sequence;
mod algebraic;
mod relative;
mod rope;
mod bias;
mod coordinate;
mod analysis;
mod inr;
mod inr_training;
mod inr_data;
mod image;
mod attention;
mod thread_pool;

pub use common::*;
pub use so::*;
pub use sequence::*;
pub use algebraic::*;
pub use relative::*;
pub use rope::*;
pub use bias::*;
pub use coordinate::*;
pub use analysis::*;
pub use inr::*;
pub use inr_training::*;
pub use inr_data::*;
pub use image::*;
pub use attention::*;
pub use thread_pool::*;
