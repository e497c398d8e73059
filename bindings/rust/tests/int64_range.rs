//! Issue 24, "Nothing silently wrong": a caller's usize size or count beyond the C ABI's
//! int64_t is an InvalidArgument error naming it, never a wrapped (negative) int64_t,
//! and a shape whose element count overflows is an error, never a wrapped product.
//! Before the fix these calls cast with `as i64` / multiplied unchecked: the value
//! reached C as a negative number (and the library answered with its own, unrelated
//! message), or `Matrix::zeros`, `vec!` or the shape product panicked on overflow
//! ("attempt to multiply with overflow", "capacity overflow"), or, in a release build,
//! a wrapped product matched a short slice and C was given a shape larger than its
//! buffer. Each test fails on the old code: it asserts this crate's message.
use gpe::*;

const BIG: usize = i64::MAX as usize + 1;

fn assert_range_error<T>(r: Result<T>, name: &str) {
    let e = match r {
        Ok(_) => panic!("{}: expected an int64_t range error, got Ok", name),
        Err(e) => e,
    };
    assert_eq!(e.status, Status::InvalidArgument, "{}", e.message);
    assert!(e.message.contains(name) && e.message.contains("int64_t"), "{}: {}", name, e.message);
}

// A matrix whose data is empty and whose extents do not fit int64_t (or overflow).
fn empty(rows: usize, cols: usize) -> Matrix {
    Matrix { rows, cols, data: Vec::new() }
}

#[test]
fn laplacian_eigenvectors_sizes_beyond_int64() {
    let edges = [(0i64, 1i64)];
    for &n in &[BIG, usize::MAX] {
        // Before: num_nodes as i64 == i64::MIN or -1 reached C.
        assert_range_error(laplacian_eigenvectors(LaplacianKind::Combinatorial, false, n, &edges, None, 0), "num_nodes");
        // Before: vec![0.0; k] / Matrix::zeros(2, k) panicked (capacity overflow).
        assert_range_error(laplacian_eigenvectors(LaplacianKind::Combinatorial, false, 2, &edges, None, n), "k");
    }
}

#[test]
fn matrix_and_tensor3_shapes_beyond_int64() {
    // Before: Ok, with rows * cols wrapped (usize::MAX * 2) or unchecked.
    assert_range_error(Matrix::new(usize::MAX, 2, vec![0.0; 2]), "matrix");
    assert_range_error(Tensor3::new([1usize << 32, 1usize << 32, 1], Vec::new()), "tensor");
    // Before: rows = 2^63 with 0 columns passed the length check and reached C as -2^63.
    assert_range_error(stable_rank(&empty(BIG, 0)), "matrix");
    assert_range_error(condition_number(&empty(0, usize::MAX)), "matrix");
    // Before: 2^32 * 2^32 overflowed (a panic in debug, 0 == data.len() in release).
    assert_range_error(stable_rank(&empty(1 << 32, 1 << 32)), "matrix");
    let e = CoordinateEncoder::fourier(&FourierOptions::new(FourierKind::Gaussian, 2, 4)).unwrap();
    assert_range_error(e.encode(&empty(BIG, 0)), "matrix");
    assert_range_error(predict_blended_2d(&e, &e, &[0.0, 1.0], &[0.0, 1.0], &empty(usize::MAX, 0), &empty(0, 0)), "matrix");
    let w = Tensor3 { dims: [BIG, 0, 1], data: Vec::new() };
    let psi = Matrix::zeros(1, 1);
    assert_range_error(predict_separable_3d([&psi, &psi, &psi], &w), "tensor");
}

#[test]
fn outputs_sized_by_the_arguments_are_refused_not_panics() {
    // A valid matrix of 2^32 rows and no columns asks for a 2^32 x 2^32 distance matrix:
    // Matrix::zeros panicked (or tried to allocate) before the library saw the call.
    assert_range_error(embedded_distance_matrix(&empty(1 << 32, 0), 1.0), "output");
}

#[test]
fn sequence_encodings_sizes_beyond_int64() {
    // Before: dim as i64 == -1 reached C (the library's own message).
    assert_range_error(sinusoidal_encode::<f64>(10000.0, &[], usize::MAX), "dim");
    assert_range_error(sinusoidal_encode::<f64>(10000.0, &[0, 1], 1 << 62), "output");
    // 2^62 elements fit int64_t but no Vec of f64: refused, not a "capacity overflow" panic.
    assert_range_error(sinusoidal_encode::<f64>(10000.0, &[0], 1 << 62), "output");
    // Before: a.rows / a.cols as i64 wrapped (0-column generators, 2^63 of them).
    assert_range_error(GrapeM::new(&empty(BIG, 0), &empty(BIG, 0), &[]), "a");
    assert_range_error(AlgebraicSequence::new(&empty(1 << 32, 1 << 32)), "skew");
    assert_range_error(AlgebraicTree::new(&[empty(1 << 32, 1 << 32)]), "skews");
    assert_range_error(AlgebraicGrid::new(&[empty(1 << 32, 1 << 32)]), "skews");
}

#[test]
fn inr_sizes_beyond_int64() {
    let o = MlpOptions::default();
    for &n in &[BIG, usize::MAX] {
        // Before: input_dim / output_dim as i64 reached C negative.
        assert_range_error(mlp_num_parameters(&o, n, 1), "input_dim");
        assert_range_error(mlp_num_parameters(&o, 1, n), "output_dim");
        assert_range_error(mlp_init::<f64>(&o, n, 1), "input_dim");
        assert_range_error(mlp_fit::<f64>(&o, &[0.0], 1, &[], n, None), "output_dim");
        assert_range_error(mlp_predict::<f64>(&o, &[], &[0.0], 1, n), "output_dim");
        // Before: vec![0; num_points] / Matrix::zeros(n * n, 2) panicked or n as i64 wrapped.
        assert_range_error(random_split(n, 0.5, 0.25, 0), "num_points");
        assert_range_error(grid_coordinates(n), "n");
        assert_range_error(regular_grid_split(n, 0), "rows");
        assert_range_error(synthetic_image(SyntheticTask::Radial, false, n), "image");
        assert_range_error(synthetic_vector_field(SyntheticTask::Radial, n), "vector field");
    }
    // Before: rows * cols * channels overflowed to 0 == pixels.len().
    let path = std::env::temp_dir().join("gpe_int64_range.png");
    assert_range_error(write_png(path.to_str().unwrap(), &[], 1 << 32, 1 << 32, 1, 0.0, 1.0), "pixels");
    assert_range_error(write_png(path.to_str().unwrap(), &[], BIG, 0, 1, 0.0, 1.0), "pixels");
}

#[test]
fn attention_sizes_beyond_int64() {
    // Before: num_heads as i64 == -1 reached C.
    assert_range_error(Bias::alibi(usize::MAX, false, None), "num_heads");
    assert_range_error(Bias::grape_a(BIG, 4, None, None, false), "num_heads");
    assert_range_error(Bias::grape_a(2, usize::MAX, None, None, false), "head_dim");
    // Before: num_heads * rank overflowed (a panic in debug).
    assert_range_error(Bias::grape_ap(1 << 32, 1 << 32, 0, &[], &[]), "[num_heads, rank]");
    assert_range_error(Bias::fox(0, &empty(BIG, 0)), "gate_logits");
    // Before: batch as i64 / heads as i64 wrapped; the shape products overflowed.
    let heads = AttentionHeads { heads_q: 1, heads_kv: 1, head_dim: 1, head_dim_v: None };
    let o = AttentionOptions::default();
    let big = AttentionLayout::Padded { batch: BIG, seq_q: 0, seq_k: 0 };
    assert_range_error(attention_forward::<f64>(&o, &big, &heads, &[], &[], &[]), "batch");
    let wide = AttentionLayout::Padded { batch: 1 << 32, seq_q: 1 << 32, seq_k: 0 };
    assert_range_error(attention_forward::<f64>(&o, &wide, &heads, &[], &[], &[]), "batch * seq_q");
    let many = AttentionHeads { heads_q: usize::MAX, heads_kv: 1, head_dim: 1, head_dim_v: None };
    let one = AttentionLayout::Padded { batch: 1, seq_q: 1, seq_k: 1 };
    assert_range_error(attention_forward::<f64>(&o, &one, &many, &[], &[], &[]), "heads_q");
    // v's head size is range-checked as the others are, and its shapes' counts too.
    let wide_v = AttentionHeads::new(1, 1, 1).with_head_dim_v(usize::MAX);
    assert_range_error(attention_forward::<f64>(&o, &one, &wide_v, &[], &[], &[]), "head_dim_v is");
    let big_v = AttentionHeads::new(1, 1, 1).with_head_dim_v(1 << 40);
    let long = AttentionLayout::Padded { batch: 1, seq_q: 1 << 30, seq_k: 1 };
    assert_range_error(attention_forward::<f64>(&o, &long, &big_v, &[], &[], &[]), "o has shape");
    // Before: shape's extents cast with `as i64` and multiplied unchecked.
    let rope = Rope::new(&RopeOptions::new(4)).unwrap();
    assert_range_error(rope.forward::<f64>(&Tokens::bshd(), &[], &[BIG, 0, 1, 4]), "shape");
    assert_range_error(rope.forward::<f64>(&Tokens::bshd(), &[], &[1 << 32, 1 << 32, 1, 4]), "shape");
    assert_range_error(rope.table::<f64>(&Tokens::bshd(), &[], &[usize::MAX, 0, 1, 4]), "shape");
}
