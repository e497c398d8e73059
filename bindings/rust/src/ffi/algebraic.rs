//! gpe/algebraic.h: Kogkalidis et al.'s algebraic positional encodings: sequences
//! (gpe_algebraic_sequence) and, since 0.4.0, trees (gpe_algebraic_tree), grids
//! (gpe_algebraic_grid), periodic domains and locality scaling.

use super::{gpe_status, DLTensor};

#[repr(C)]
pub struct gpe_algebraic_sequence {
    _private: [u8; 0],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_algebraic_sequence_options {
    pub struct_size: u32,
    pub dim: i64,
    pub skew: *const f64,
}
impl gpe_algebraic_sequence_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), dim: 0, skew: std::ptr::null() }
    }
}

extern "C" {
    pub fn gpe_algebraic_sequence_create(options: *const gpe_algebraic_sequence_options, out: *mut *mut gpe_algebraic_sequence) -> gpe_status;
    pub fn gpe_algebraic_sequence_destroy(seq: *mut gpe_algebraic_sequence);
    pub fn gpe_algebraic_sequence_dim(seq: *const gpe_algebraic_sequence, dim: *mut i64) -> gpe_status;
    pub fn gpe_algebraic_sequence_apply(seq: *const gpe_algebraic_sequence, positions: *const DLTensor, x: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_algebraic_sequence_matrix(seq: *const gpe_algebraic_sequence, position: i64, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_algebraic_sequence_backward(
        seq: *const gpe_algebraic_sequence,
        positions: *const DLTensor,
        x: *const DLTensor,
        grad_out: *const DLTensor,
        grad_x: *mut DLTensor,
        grad_skew: *mut DLTensor,
    ) -> gpe_status;
}

// ---- Trees, grids, periodic domains, locality (0.4.0) ----

#[repr(C)]
pub struct gpe_algebraic_tree {
    _private: [u8; 0],
}

#[repr(C)]
pub struct gpe_algebraic_grid {
    _private: [u8; 0],
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_algebraic_tree_options {
    pub struct_size: u32,
    pub dim: i64,
    pub num_branches: i64,
    pub skews: *const f64,
}
impl gpe_algebraic_tree_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), dim: 0, num_branches: 2, skews: std::ptr::null() }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_algebraic_grid_options {
    pub struct_size: u32,
    pub num_axes: i64,
    pub dims: *const i64,
    pub skews: *const f64,
}
impl gpe_algebraic_grid_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), num_axes: 2, dims: std::ptr::null(), skews: std::ptr::null() }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_algebraic_periodic_options {
    pub struct_size: u32,
    pub dim: i64,
    pub period: i64,
    pub multipliers: *const i64,
}
impl gpe_algebraic_periodic_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), dim: 0, period: 1, multipliers: std::ptr::null() }
    }
}

extern "C" {
    pub fn gpe_algebraic_tree_create(options: *const gpe_algebraic_tree_options, out: *mut *mut gpe_algebraic_tree) -> gpe_status;
    pub fn gpe_algebraic_tree_destroy(tree: *mut gpe_algebraic_tree);
    pub fn gpe_algebraic_tree_shape(tree: *const gpe_algebraic_tree, dim: *mut i64, num_branches: *mut i64) -> gpe_status;
    pub fn gpe_algebraic_tree_apply(tree: *const gpe_algebraic_tree, addresses: *const DLTensor, x: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_algebraic_tree_matrix(tree: *const gpe_algebraic_tree, address: *const i64, depth: i64, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_algebraic_tree_node_matrices(tree: *const gpe_algebraic_tree, max_depth: i64, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_algebraic_tree_backward(
        tree: *const gpe_algebraic_tree,
        addresses: *const DLTensor,
        x: *const DLTensor,
        grad_out: *const DLTensor,
        grad_x: *mut DLTensor,
        grad_skews: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_algebraic_grid_create(options: *const gpe_algebraic_grid_options, out: *mut *mut gpe_algebraic_grid) -> gpe_status;
    pub fn gpe_algebraic_grid_destroy(grid: *mut gpe_algebraic_grid);
    pub fn gpe_algebraic_grid_shape(grid: *const gpe_algebraic_grid, dim: *mut i64, num_axes: *mut i64) -> gpe_status;
    pub fn gpe_algebraic_grid_apply(grid: *const gpe_algebraic_grid, positions: *const DLTensor, x: *const DLTensor, out: *mut DLTensor) -> gpe_status;
    pub fn gpe_algebraic_grid_backward(
        grid: *const gpe_algebraic_grid,
        positions: *const DLTensor,
        x: *const DLTensor,
        grad_out: *const DLTensor,
        grad_x: *mut DLTensor,
        grad_skews: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_algebraic_periodic_apply(
        options: *const gpe_algebraic_periodic_options,
        positions: *const DLTensor,
        x: *const DLTensor,
        out: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_locality_scale(c: f64, q_positions: *const DLTensor, k_positions: *const DLTensor, scores: *mut DLTensor) -> gpe_status;
}
