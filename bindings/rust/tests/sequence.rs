//! The 0.4.0 sequence entry points through the Rust bindings: algebraic trees, grids and
//! periodic domains, locality, Shaw value terms, Transformer-XL, GRAPE-A and the
//! published RoPE schedules, against formulas written here and central differences.
use gpe::*;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }
    fn vec(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.next()).collect()
    }
    fn matrix(&mut self, rows: usize, cols: usize) -> Matrix {
        Matrix::new(rows, cols, self.vec(rows * cols)).unwrap()
    }
    fn skew(&mut self, d: usize) -> Matrix {
        let mut s = Matrix::zeros(d, d);
        for i in 0..d {
            for j in 0..i {
                let v = self.next();
                s.data[i * d + j] = v;
                s.data[j * d + i] = -v;
            }
        }
        s
    }
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}
fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
fn matvec(m: &Matrix, x: &[f64]) -> Vec<f64> {
    (0..m.rows).map(|r| (0..m.cols).map(|c| m.at(r, c) * x[c]).sum()).collect()
}

#[test]
fn tree_nodes_compose_branches_and_backward_matches_differences() {
    let mut rng = Rng(1);
    let skews = vec![rng.skew(3), rng.skew(3)];
    let tree = AlgebraicTree::new(&skews).unwrap();
    assert_eq!(tree.shape(), (3, 2));
    let (w0, w1, w01) = (tree.matrix(&[0]).unwrap(), tree.matrix(&[1]).unwrap(), tree.matrix(&[0, 1]).unwrap());
    // rho(0, 1) = W_0 W_1 (Kogkalidis et al. sec. 3.2); products of orthogonal 3 x 3
    // matrices: a few ulps per entry.
    for r in 0..3 {
        for c in 0..3 {
            let p: f64 = (0..3).map(|k| w0.at(r, k) * w1.at(k, c)).sum();
            assert!((w01.at(r, c) - p).abs() < 1e-14);
        }
    }
    let root = tree.matrix(&[]).unwrap();
    assert!(max_abs_diff(&root.data, &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]) == 0.0);
    let addresses: [&[i64]; 3] = [&[0, 1], &[], &[1, 1, 0]];
    let x = rng.vec(9);
    let y = tree.apply(&addresses, &x).unwrap();
    for (n, a) in addresses.iter().enumerate() {
        let want = matvec(&tree.matrix(a).unwrap(), &x[n * 3..n * 3 + 3]);
        assert!(max_abs_diff(&y[n * 3..n * 3 + 3], &want) < 1e-14);
    }
    // Backward: <grad_x, x> = <g, rho x> (grad_x = rho^T g), and dL/dS along a skew
    // direction E_ij - E_ji equals X_ij - X_ji, checked by central differences (h = 1e-6:
    // exp is smooth, truncation ~1e-12, rounding ~1e-10).
    let g = rng.vec(9);
    let (gx, gs) = tree.backward(&addresses, &x, &g).unwrap();
    assert!((dot(&gx, &x) - dot(&g, &y)).abs() < 1e-13);
    let h = 1e-6;
    for c in 0..2 {
        for (i, j) in [(1usize, 0usize), (2, 0), (2, 1)] {
            let loss = |sign: f64| {
                let mut s = skews.clone();
                s[c].data[i * 3 + j] += sign * h;
                s[c].data[j * 3 + i] -= sign * h;
                dot(&g, &AlgebraicTree::new(&s).unwrap().apply(&addresses, &x).unwrap())
            };
            let numeric = (loss(1.0) - loss(-1.0)) / (2.0 * h);
            let analytic = gs[c].at(i, j) - gs[c].at(j, i);
            assert!((numeric - analytic).abs() < 1e-8, "branch {} ({}, {}): {} vs {}", c, i, j, numeric, analytic);
        }
    }
    let err = tree.apply(&[&[2]], &[0.0; 3]).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(AlgebraicTree::new(&[Matrix::new(2, 2, vec![0.0, 1.0, 1.0, 0.0]).unwrap()]).is_err(), "not skew");
}

#[test]
fn grid_is_a_relative_block_rotation_and_backward_matches_differences() {
    let mut rng = Rng(2);
    let skews = vec![rng.skew(2), rng.skew(3)];
    let grid = AlgebraicGrid::new(&skews).unwrap();
    assert_eq!(grid.shape(), (5, 2));
    let (q, k) = (rng.vec(5), rng.vec(5));
    let (p, pp) = ([3i64, -2], [7i64, 5]);
    let diff = [pp[0] - p[0], pp[1] - p[1]];
    // Relativity: <rho(p) q, rho(p') k> = <q, rho(p' - p) k> (sec. 3.3); sums of 5
    // products of rotated unit-scale values: 1e-13.
    let lhs = dot(&grid.apply(&p, &q).unwrap(), &grid.apply(&pp, &k).unwrap());
    let rhs = dot(&q, &grid.apply(&diff, &k).unwrap());
    assert!((lhs - rhs).abs() < 1e-13);
    // Block diagonal: axis 0 moves coordinates 0..2 only, and exp(0 S_1) = I up to the
    // rounding of its real Schur basis Q R(0) Q^T (a few ulps of values up to 3).
    let only_axis1 = [0.0, 0.0, 1.0, 2.0, 3.0];
    let y = grid.apply(&[4, 0], &only_axis1).unwrap();
    assert!(max_abs_diff(&y, &only_axis1) < 1e-14, "{:?}", y);
    let positions = [1i64, 2, -3, 4];
    let x = rng.vec(10);
    let g = rng.vec(10);
    let (gx, gs) = grid.backward(&positions, &x, &g).unwrap();
    assert!((dot(&gx, &x) - dot(&g, &grid.apply(&positions, &x).unwrap())).abs() < 1e-13);
    let h = 1e-6;
    for (a, d) in [(0usize, 2usize), (1, 3)] {
        for i in 0..d {
            for j in 0..i {
                let loss = |sign: f64| {
                    let mut s = skews.clone();
                    s[a].data[i * d + j] += sign * h;
                    s[a].data[j * d + i] -= sign * h;
                    dot(&g, &AlgebraicGrid::new(&s).unwrap().apply(&positions, &x).unwrap())
                };
                let numeric = (loss(1.0) - loss(-1.0)) / (2.0 * h);
                // Positions up to 4: exp(p S) stays smooth; see the tree test's budget.
                assert!((numeric - (gs[a].at(i, j) - gs[a].at(j, i))).abs() < 1e-7);
            }
        }
    }
}

#[test]
fn periodic_planes_rotate_by_their_multiples_and_wrap() {
    let (period, mult) = (12i64, [1i64, 5]);
    let x = Rng(3).vec(16);
    let positions = [0i64, 7, -4, 1_000_000_000_003];
    let y = algebraic_periodic_apply(period, &mult, &positions, &x).unwrap();
    for (n, &p) in positions.iter().enumerate() {
        for (i, &m) in mult.iter().enumerate() {
            // Angle 2 pi (m p mod n) / n from the exact residue (sec. 3.4.2).
            let a = 2.0 * std::f64::consts::PI * ((m * p).rem_euclid(period) as f64) / period as f64;
            let (x1, x2) = (x[n * 4 + 2 * i], x[n * 4 + 2 * i + 1]);
            assert!((y[n * 4 + 2 * i] - (x1 * a.cos() - x2 * a.sin())).abs() < 1e-15);
            assert!((y[n * 4 + 2 * i + 1] - (x1 * a.sin() + x2 * a.cos())).abs() < 1e-15);
        }
    }
    // W^period = I exactly: p and p + period encode identically.
    let shifted: Vec<i64> = positions.iter().map(|p| p + period).collect();
    assert_eq!(algebraic_periodic_apply(period, &mult, &shifted, &x).unwrap(), y);
    assert!(algebraic_periodic_apply(0, &mult, &positions, &x).is_err());
}

#[test]
fn locality_scales_by_powers_of_the_distance() {
    let mut scores = Rng(4).matrix(3, 4);
    let before = scores.clone();
    let (qp, kp) = ([0i64, 5, 9], [1i64, 5, 2, 30]);
    locality_scale(0.98, &qp, &kp, &mut scores).unwrap();
    for r in 0..3 {
        for c in 0..4 {
            // c^|i - j| with |i - j| <= 30: powi and the library's power agree to ~30 ulps.
            let want = before.at(r, c) * 0.98f64.powi((qp[r] - kp[c]).abs() as i32);
            assert!((scores.at(r, c) - want).abs() < 1e-14);
        }
    }
    assert!(locality_scale(1.5, &qp, &kp, &mut scores).is_err());
}

#[test]
fn shaw_value_terms_and_their_gradients() {
    let mut rng = Rng(5);
    let (k, dv) = (2i64, 3usize);
    let probs = rng.matrix(3, 4);
    let table = rng.matrix((2 * k + 1) as usize, dv);
    let (qp, kp) = ([0i64, 3, 7], [0i64, 1, 5, 6]);
    let idx = |a: usize, b: usize| ((kp[b] - qp[a]).clamp(-k, k) + k) as usize;
    let out = shaw_value_output(&probs, &table, &qp, &kp).unwrap();
    for a in 0..3 {
        for c in 0..dv {
            // Shaw et al. eq. 3: four products: a few ulps.
            let want: f64 = (0..4).map(|b| probs.at(a, b) * table.at(idx(a, b), c)).sum();
            assert!((out.at(a, c) - want).abs() < 1e-15);
        }
    }
    let go = rng.matrix(3, dv);
    let (gp, gl) = shaw_value_output_backward(&probs, &table, &qp, &kp, &go).unwrap();
    let mut want_gl = Matrix::zeros(table.rows, dv);
    for a in 0..3 {
        for b in 0..4 {
            let row: Vec<f64> = (0..dv).map(|c| table.at(idx(a, b), c)).collect();
            assert!((gp.at(a, b) - dot(&go.data[a * dv..a * dv + dv], &row)).abs() < 1e-15);
            for c in 0..dv {
                want_gl.data[idx(a, b) * dv + c] += probs.at(a, b) * go.at(a, c);
            }
        }
    }
    assert!(max_abs_diff(&gl.data, &want_gl.data) < 1e-15);
}

#[test]
fn transformer_xl_terms_match_the_formula_and_differences() {
    let mut rng = Rng(6);
    let (d, dr) = (4usize, 6usize);
    let (q, kk, w_r) = (rng.matrix(2, d), rng.matrix(3, d), rng.matrix(d, dr));
    let (u, v) = (rng.vec(d), rng.vec(d));
    let (qp, kp) = ([5i64, 9], [0i64, 4, 9]);
    let x = TransformerXl { base: 10000.0, q: &q, k: &kk, query_positions: &qp, key_positions: &kp, w_r: &w_r, u: &u, v: &v };
    let terms = transformer_xl_score_terms(&x).unwrap();
    for a in 0..2 {
        for b in 0..3 {
            // Dai et al. sec. 3.3 with R_t = the library's sinusoidal encoding of t.
            let r = sinusoidal_encode::<f64>(10000.0, &[qp[a] - kp[b]], dr).unwrap();
            let wr = matvec(&w_r, &r);
            let want = dot(&q.data[a * d..a * d + d], &wr) + dot(&u, &kk.data[b * d..b * d + d]) + dot(&v, &wr);
            // Sums of ~30 products of values below 1: 1e-14.
            assert!((terms.at(a, b) - want).abs() < 1e-14);
        }
    }
    // The terms are linear in each input, so central differences are exact up to
    // rounding (~1e-16 / h = 1e-10 at h = 1e-6).
    let g = rng.matrix(2, 3);
    let grads = transformer_xl_score_terms_backward(&x, &g).unwrap();
    let h = 1e-6;
    let loss = |q: &Matrix, kk: &Matrix, w_r: &Matrix, u: &[f64], v: &[f64]| {
        let x = TransformerXl { base: 10000.0, q, k: kk, query_positions: &qp, key_positions: &kp, w_r, u, v };
        dot(&transformer_xl_score_terms(&x).unwrap().data, &g.data)
    };
    for i in 0..q.data.len() {
        let (mut a, mut b) = (q.clone(), q.clone());
        a.data[i] += h;
        b.data[i] -= h;
        let n = (loss(&a, &kk, &w_r, &u, &v) - loss(&b, &kk, &w_r, &u, &v)) / (2.0 * h);
        assert!((n - grads.q.data[i]).abs() < 1e-8);
    }
    for i in 0..w_r.data.len() {
        let (mut a, mut b) = (w_r.clone(), w_r.clone());
        a.data[i] += h;
        b.data[i] -= h;
        let n = (loss(&q, &kk, &a, &u, &v) - loss(&q, &kk, &b, &u, &v)) / (2.0 * h);
        assert!((n - grads.w_r.data[i]).abs() < 1e-8);
    }
    for i in 0..d {
        let (mut a, mut b) = (u.clone(), u.clone());
        a[i] += h;
        b[i] -= h;
        assert!(((loss(&q, &kk, &w_r, &a, &v) - loss(&q, &kk, &w_r, &b, &v)) / (2.0 * h) - grads.u[i]).abs() < 1e-8);
        let (mut a, mut b) = (v.clone(), v.clone());
        a[i] += h;
        b[i] -= h;
        assert!(((loss(&q, &kk, &w_r, &u, &a) - loss(&q, &kk, &w_r, &u, &b)) / (2.0 * h) - grads.v[i]).abs() < 1e-8);
    }
    for i in 0..kk.data.len() {
        let (mut a, mut b) = (kk.clone(), kk.clone());
        a.data[i] += h;
        b.data[i] -= h;
        assert!(((loss(&q, &a, &w_r, &u, &v) - loss(&q, &b, &w_r, &u, &v)) / (2.0 * h) - grads.k.data[i]).abs() < 1e-8);
    }
}

#[test]
fn grape_a_is_alibi_through_a_unipotent_lift() {
    let slopes = [0.5, 0.125];
    let closed = Bias::grape_a(2, 3, Some(&slopes), None, false).unwrap();
    let lifted = Bias::grape_a(2, 3, Some(&slopes), None, true).unwrap();
    assert_eq!(closed.kind(), BiasKind::GrapeA);
    let (qp, kp) = ([0i64, 4, 9], [0i64, 2, 9, 3]);
    for h in 0..2 {
        let tile = closed.fill_tile(h as i64, &qp, &kp).unwrap();
        for r in 0..3 {
            for c in 0..4 {
                // b_h(i, j) = m_h (j - i): exact for power-of-two slopes.
                assert_eq!(tile.at(r, c), slopes[h] * (kp[c] - qp[r]) as f64);
            }
        }
        // The lifted path agrees bit for bit for power-of-two slopes (gpe.h).
        assert_eq!(lifted.fill_tile(h as i64, &qp, &kp).unwrap(), tile);
    }
    // <lift_q(i), lift_k(j)> = <q, k> + b_h(i, j) (Zhang et al., GRAPE, "Additive GRAPE").
    let mut rng = Rng(7);
    let (q, k) = (rng.matrix(3, 3), rng.matrix(4, 3));
    let (lq, lk) = (closed.grape_a_lift(1, false, &qp, &q).unwrap(), closed.grape_a_lift(1, true, &kp, &k).unwrap());
    assert_eq!((lq.rows, lq.cols), (3, 5));
    for r in 0..3 {
        for c in 0..4 {
            let want = dot(&q.data[r * 3..r * 3 + 3], &k.data[c * 3..c * 3 + 3]) + slopes[1] * (kp[c] - qp[r]) as f64;
            assert!((dot(&lq.data[r * 5..r * 5 + 5], &lk.data[c * 5..c * 5 + 5]) - want).abs() < 1e-14);
        }
    }
    // Content-gated: c_i - c_j with c_t = sum_{l <= t} ln sigmoid(x_l).
    let logits = Matrix::new(4, 1, vec![0.3, -1.0, 2.0, 0.0]).unwrap();
    let gated = Bias::grape_a(1, 3, None, Some((0, &logits)), false).unwrap();
    let c: Vec<f64> = (0..4).map(|t| (0..=t).map(|l| -(1.0 + (-logits.data[l]).exp()).ln()).sum()).collect();
    let tile = gated.fill_tile(0, &[3, 2], &[0, 1, 2]).unwrap();
    for (r, &i) in [3usize, 2].iter().enumerate() {
        for j in 0..3 {
            if j <= i {
                // Prefix sums of four logs: a few ulps.
                assert!((tile.at(r, j) - (c[i] - c[j])).abs() < 1e-14);
            }
        }
    }
    assert!(Bias::grape_a(2, 3, Some(&slopes), Some((0, &logits)), false).is_err(), "slopes and gates together");
}

#[test]
fn published_schedules_carry_the_models_values() {
    match Schedule::published(ScheduleKind::Llama3).unwrap() {
        Schedule::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position } => {
            assert_eq!((factor, low_freq_factor, high_freq_factor, original_max_position), (8.0, 1.0, 4.0, 8192));
        }
        other => panic!("{:?}", other),
    }
    match Schedule::published(ScheduleKind::Yarn).unwrap() {
        Schedule::Yarn { beta_fast, beta_slow, original_max_position, .. } => {
            assert_eq!((beta_fast, beta_slow, original_max_position), (32.0, 1.0, 4096));
        }
        other => panic!("{:?}", other),
    }
    let mut o = RopeOptions::new(8);
    o.base = 500000.0;
    o.schedule = Schedule::published(ScheduleKind::Llama3).unwrap();
    let rope = Rope::new(&o).unwrap();
    let (thetas, _) = rope.frequencies().unwrap();
    // Llama 3: the highest frequency (wavelength 2 pi < 8192 / 4) is unchanged.
    assert_eq!(thetas[0], 1.0);
}

#[test]
fn the_crate_targets_the_librarys_abi() {
    // The crate's MAJOR.MINOR is the C ABI's it declares; the library may be newer.
    let (number, _) = version();
    let major: i32 = env!("CARGO_PKG_VERSION_MAJOR").parse().unwrap();
    let minor: i32 = env!("CARGO_PKG_VERSION_MINOR").parse().unwrap();
    assert_eq!(number / 10000, major);
    assert!(number / 100 % 100 >= minor, "library {} is older than the crate's ABI 0.{}", number, minor);
}

#[test]
fn attention_parameter_gradients_match_differences() {
    // float64 runs the exact reference: L = <d_o, o> differentiated by central
    // differences in the slopes (h = 1e-6: softmax is smooth, error ~1e-10).
    let heads = AttentionHeads { heads_q: 2, heads_kv: 2, head_dim: 4, head_dim_v: None };
    let layout = AttentionLayout::Padded { batch: 1, seq_q: 5, seq_k: 5 };
    let mut rng = Rng(8);
    let (q, k, v, d_o) = (rng.vec(40), rng.vec(40), rng.vec(40), rng.vec(40));
    let slopes = [0.5, 0.25];
    let loss = |s: &[f64]| {
        let bias = Bias::alibi(2, false, Some(s)).unwrap();
        let options = AttentionOptions { causal: true, bias: Some(&bias), ..Default::default() };
        let (o, _) = attention_forward(&options, &layout, &heads, &q, &k, &v).unwrap();
        dot(&o, &d_o)
    };
    let bias = Bias::alibi(2, false, Some(&slopes)).unwrap();
    let options = AttentionOptions { causal: true, bias: Some(&bias), ..Default::default() };
    let (grads, params) = attention_backward_with_parameters(&options, &layout, &heads, &q, &k, &v, None, &d_o).unwrap();
    let plain = attention_backward(&options, &layout, &heads, &q, &k, &v, None, &d_o).unwrap();
    // The same kernels: dq, dk, dv agree with gpe_attention_backward's to rounding.
    assert!(max_abs_diff(&grads.dq, &plain.dq) < 1e-14);
    let d_slopes = params.bias_a.unwrap();
    assert!(params.bias_b.is_none() && params.grape_a.is_none());
    let h = 1e-6;
    for i in 0..2 {
        let (mut a, mut b) = (slopes, slopes);
        a[i] += h;
        b[i] -= h;
        let numeric = (loss(&a) - loss(&b)) / (2.0 * h);
        assert!((numeric - d_slopes[i]).abs() < 1e-8, "slope {}: {} vs {}", i, numeric, d_slopes[i]);
    }
}
