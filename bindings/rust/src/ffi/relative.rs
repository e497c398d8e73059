//! gpe/relative.h: relative position terms: Shaw et al.'s relative key scores and, since
//! 0.4.0, their value terms and Transformer-XL's relative score terms.

use super::{gpe_status, DLTensor};

extern "C" {
    pub fn gpe_shaw_key_scores(
        q: *const DLTensor,
        label_table: *const DLTensor,
        query_positions: *const DLTensor,
        key_positions: *const DLTensor,
        scores: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_shaw_key_scores_backward(
        q: *const DLTensor,
        label_table: *const DLTensor,
        query_positions: *const DLTensor,
        key_positions: *const DLTensor,
        grad_scores: *const DLTensor,
        grad_q: *mut DLTensor,
        grad_label_table: *mut DLTensor,
    ) -> gpe_status;
}

// ---- Shaw values, Transformer-XL (0.4.0) ----

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct gpe_transformer_xl_options {
    pub struct_size: u32,
    pub base: f64,
}
impl gpe_transformer_xl_options {
    pub fn init() -> Self {
        Self { struct_size: struct_size!(Self), base: 10000.0 }
    }
}

extern "C" {
    pub fn gpe_shaw_value_output(
        probabilities: *const DLTensor,
        label_table: *const DLTensor,
        query_positions: *const DLTensor,
        key_positions: *const DLTensor,
        out: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_shaw_value_output_backward(
        probabilities: *const DLTensor,
        label_table: *const DLTensor,
        query_positions: *const DLTensor,
        key_positions: *const DLTensor,
        grad_out: *const DLTensor,
        grad_probabilities: *mut DLTensor,
        grad_label_table: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_transformer_xl_score_terms(
        options: *const gpe_transformer_xl_options,
        q: *const DLTensor,
        k: *const DLTensor,
        query_positions: *const DLTensor,
        key_positions: *const DLTensor,
        w_r: *const DLTensor,
        u: *const DLTensor,
        v: *const DLTensor,
        terms: *mut DLTensor,
    ) -> gpe_status;
    pub fn gpe_transformer_xl_score_terms_backward(
        options: *const gpe_transformer_xl_options,
        q: *const DLTensor,
        k: *const DLTensor,
        query_positions: *const DLTensor,
        key_positions: *const DLTensor,
        w_r: *const DLTensor,
        u: *const DLTensor,
        v: *const DLTensor,
        grad_terms: *const DLTensor,
        grad_q: *mut DLTensor,
        grad_k: *mut DLTensor,
        grad_w_r: *mut DLTensor,
        grad_u: *mut DLTensor,
        grad_v: *mut DLTensor,
    ) -> gpe_status;
}
