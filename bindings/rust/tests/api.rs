//! The Rust bindings against direct formulas written here, and bad input as Err with
//! the library's status and message.
use gpe::*;

// A small deterministic generator (no crates.io): SplitMix64 mapped to [-1, 1).
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
}

fn matmul(a: &Matrix, b: &Matrix) -> Matrix {
    let mut c = Matrix::zeros(a.rows, b.cols);
    for i in 0..a.rows {
        for j in 0..b.cols {
            c.data[i * b.cols + j] = (0..a.cols).map(|k| a.at(i, k) * b.at(k, j)).sum();
        }
    }
    c
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

#[test]
fn version_matches_the_crate() {
    let (number, text) = version();
    assert_eq!(text, format!("{}.{}.{}", number / 10000, number / 100 % 100, number % 100));
    assert!(number >= 400, "the crate declares the 0.4.0 API");
    assert_eq!(status_name(1), "GPE_ERROR_INVALID_ARGUMENT");
}

#[test]
fn rope_planes_match_direct_rotation() {
    let dim = 8;
    let mut o = PlanesOptions::new(dim);
    o.base = 100.0;
    let rep = SoRep::planes(&o).unwrap();
    assert_eq!(rep.dim(), 8);
    let mut rng = Rng(1);
    let positions = [0i64, 5, -17, 1234];
    let x = rng.vec(positions.len() * 8);
    let y = rep.apply(&positions, &x).unwrap();
    for (n, &p) in positions.iter().enumerate() {
        for i in 0..4 {
            // Interleaved pairs; theta_i = base^(-2i / dim).
            let a = p as f64 * 100f64.powf(-2.0 * i as f64 / 8.0);
            let (x1, x2) = (x[n * 8 + 2 * i], x[n * 8 + 2 * i + 1]);
            // |a| < 1300 rad: the library reduces a exactly, this reference in double
            // loses up to ~1300 * 2^-53 ≈ 1.5e-13 in the angle; 1e-11 covers it.
            assert!((y[n * 8 + 2 * i] - (x1 * a.cos() - x2 * a.sin())).abs() < 1e-11);
            assert!((y[n * 8 + 2 * i + 1] - (x1 * a.sin() + x2 * a.cos())).abs() < 1e-11);
        }
    }
    // float32 batches: the same rotation rounded once to float32 (2^-24 relative; |y| < 2).
    let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    let y32 = rep.apply(&positions, &x32).unwrap();
    let y_of_x32 = rep.apply(&positions, &x32.iter().map(|&v| v as f64).collect::<Vec<_>>()).unwrap();
    for (a, b) in y32.iter().zip(&y_of_x32) {
        assert!((*a as f64 - b).abs() <= 2.0 * f32::EPSILON as f64);
    }
}

#[test]
fn rank2_is_an_orthogonal_homomorphism() {
    let mut rng = Rng(2);
    let (a, b) = (rng.vec(6), rng.vec(6));
    let rep = SoRep::rank2(&a, &b, 0.7).unwrap();
    let (p, q) = (3i64, -11i64);
    let (mp, mq, mpq) = (rep.matrix(p).unwrap(), rep.matrix(q).unwrap(), rep.matrix(p + q).unwrap());
    // rho(p + q) = rho(p) rho(q): products of O(1) entries, 6 terms: 1e-12.
    assert!(max_abs_diff(&matmul(&mp, &mq).data, &mpq.data) < 1e-12);
    let mut mt = Matrix::zeros(6, 6);
    for i in 0..6 {
        for j in 0..6 {
            mt.data[i * 6 + j] = mp.at(j, i);
        }
    }
    let eye: Vec<f64> = (0..36).map(|k| if k % 7 == 0 { 1.0 } else { 0.0 }).collect();
    assert!(max_abs_diff(&matmul(&mp, &mt).data, &eye) < 1e-12);
    // apply is the matrix times the vector.
    let x = rng.vec(6);
    let y = rep.apply(&[p], &x).unwrap();
    let yy: Vec<f64> = (0..6).map(|i| (0..6).map(|j| mp.at(i, j) * x[j]).sum()).collect();
    assert!(max_abs_diff(&y, &yy) < 1e-12);
}

#[test]
fn sinusoidal_matches_formula() {
    let positions = [0i64, 1, 2, 50];
    let out: Vec<f64> = sinusoidal_encode(10000.0, &positions, 6).unwrap();
    for (n, &p) in positions.iter().enumerate() {
        for i in 0..3 {
            let a = p as f64 * 10000f64.powf(-2.0 * i as f64 / 6.0);
            // |a| <= 50: a few ulps of the angle, 1e-13.
            assert!((out[n * 6 + 2 * i] - a.sin()).abs() < 1e-13);
            assert!((out[n * 6 + 2 * i + 1] - a.cos()).abs() < 1e-13);
        }
    }
}

#[test]
fn learned_positions_lookup_and_backward() {
    let mut rng = Rng(3);
    let table = Matrix::new(5, 3, rng.vec(15)).unwrap();
    let t = LearnedPositions::new(&table).unwrap();
    assert_eq!(t.shape(), (5, 3));
    let rows = t.lookup(&[4, 0, 4]).unwrap();
    assert_eq!(&rows[0..3], &table.data[12..15]);
    assert_eq!(&rows[3..6], &table.data[0..3]);
    let mut g = Matrix::zeros(5, 3);
    t.backward(&[4, 0, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 10.0, 20.0, 30.0], &mut g).unwrap();
    assert_eq!(&g.data[12..15], &[11.0, 22.0, 33.0]);
    assert_eq!(&g.data[0..3], &[4.0, 5.0, 6.0]);
    let e = t.lookup(&[5]).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("outside"), "{}", e);
}

#[test]
fn grape_m_backward_matches_finite_differences() {
    let mut rng = Rng(4);
    let (dim, m) = (5, 2);
    let a = Matrix::new(m, dim, rng.vec(m * dim)).unwrap();
    let b = Matrix::new(m, dim, rng.vec(m * dim)).unwrap();
    let omega = vec![0.4, -0.3];
    let positions = [2i64, -3, 7];
    let x = rng.vec(positions.len() * dim);
    let c = rng.vec(positions.len() * dim);
    // L = <c, G(p) x>, so dL/dout = c.
    let loss = |a: &Matrix, b: &Matrix, omega: &[f64]| -> f64 {
        let g = GrapeM::new(a, b, omega).unwrap();
        g.apply(&positions, &x).unwrap().iter().zip(&c).map(|(u, v)| u * v).sum()
    };
    let g = GrapeM::new(&a, &b, &omega).unwrap();
    assert_eq!(g.shape().unwrap(), (dim, m));
    let grads = g.backward(&positions, &x, &c).unwrap();
    // Central differences in double: h = 1e-6 gives O(h^2) ≈ 1e-12 truncation and
    // O(eps / h) ≈ 1e-10 rounding on O(1) losses; 1e-7 leaves margin.
    let h = 1e-6;
    for k in 0..m {
        let (mut op, mut om) = (omega.clone(), omega.clone());
        op[k] += h;
        om[k] -= h;
        let fd = (loss(&a, &b, &op) - loss(&a, &b, &om)) / (2.0 * h);
        assert!((grads.omega[k] - fd).abs() < 1e-7, "omega[{}]: {} vs {}", k, grads.omega[k], fd);
        for j in 0..dim {
            let (mut ap, mut am) = (a.clone(), a.clone());
            ap.data[k * dim + j] += h;
            am.data[k * dim + j] -= h;
            let fd = (loss(&ap, &b, &omega) - loss(&am, &b, &omega)) / (2.0 * h);
            assert!((grads.a.at(k, j) - fd).abs() < 1e-7);
            let (mut bp, mut bm) = (b.clone(), b.clone());
            bp.data[k * dim + j] += h;
            bm.data[k * dim + j] -= h;
            let fd = (loss(&a, &bp, &omega) - loss(&a, &bm, &omega)) / (2.0 * h);
            assert!((grads.b.at(k, j) - fd).abs() < 1e-7);
        }
    }
    // dL/dx = G(p)^T c, by the matrices.
    for (n, &p) in positions.iter().enumerate() {
        let gp = g.matrix(p).unwrap();
        for j in 0..dim {
            let want: f64 = (0..dim).map(|i| gp.at(i, j) * c[n * dim + i]).sum();
            assert!((grads.x[n * dim + j] - want).abs() < 1e-12);
        }
    }
}

#[test]
fn algebraic_apply_is_matrix_power() {
    let mut rng = Rng(5);
    let d = 4;
    let r = rng.vec(d * d);
    let mut s = Matrix::zeros(d, d);
    for i in 0..d {
        for j in 0..d {
            s.data[i * d + j] = 0.3 * (r[i * d + j] - r[j * d + i]);
        }
    }
    let seq = AlgebraicSequence::new(&s).unwrap();
    assert_eq!(seq.dim(), d);
    let w1 = seq.matrix(1).unwrap();
    let w3 = seq.matrix(3).unwrap();
    // W^3 = W W W: 1e-12 on O(1) orthogonal products.
    assert!(max_abs_diff(&matmul(&matmul(&w1, &w1), &w1).data, &w3.data) < 1e-12);
    let x = rng.vec(d);
    let y = seq.apply(&[3], &x).unwrap();
    let yy: Vec<f64> = (0..d).map(|i| (0..d).map(|j| w3.at(i, j) * x[j]).sum()).collect();
    assert!(max_abs_diff(&y, &yy) < 1e-12);
    let (gx, gs) = seq.backward(&[3], &x, &y).unwrap();
    // L = |y|^2 / 2 with W orthogonal: dL/dx = W^T W x = x (1e-12), and L does not
    // change along skew-symmetric directions of S, so dL/dA = X - X^T = 0 for S = A - A^T
    // (X = dL/dS entrywise, itself nonzero: only its skew part vanishes).
    assert!(max_abs_diff(&gx, &x) < 1e-12);
    let mut skew_part = 0.0f64;
    for i in 0..d {
        for j in 0..d {
            skew_part = skew_part.max((gs.at(i, j) - gs.at(j, i)).abs());
        }
    }
    assert!(skew_part < 1e-12, "skew part of dL/dS: {}", skew_part);
    assert!(gs.data.iter().any(|v| v.abs() > 1e-3), "dL/dS is not identically zero");
}

#[test]
fn shaw_scores_match_direct_sum() {
    let mut rng = Rng(6);
    let (lq, d, k) = (3, 4, 2);
    let q = Matrix::new(lq, d, rng.vec(lq * d)).unwrap();
    let table = Matrix::new(2 * k + 1, d, rng.vec((2 * k + 1) * d)).unwrap();
    let (qp, kp) = ([0i64, 10, -4], [1i64, 2, 30, -9]);
    let s = shaw_key_scores(&q, &table, &qp, &kp).unwrap();
    for a in 0..lq {
        for b in 0..kp.len() {
            let r = ((kp[b] - qp[a]).clamp(-(k as i64), k as i64) + k as i64) as usize;
            let want: f64 = (0..d).map(|j| q.at(a, j) * table.at(r, j)).sum();
            assert!((s.at(a, b) - want).abs() < 1e-14);
        }
    }
    // Linear in q: dL/dq for L = sum(scores) is sum_b table[r(a, b)].
    let ones = Matrix::new(lq, kp.len(), vec![1.0; lq * kp.len()]).unwrap();
    let (gq, _gl) = shaw_key_scores_backward(&q, &table, &qp, &kp, &ones).unwrap();
    for a in 0..lq {
        for j in 0..d {
            let want: f64 = kp
                .iter()
                .map(|&kb| table.at(((kb - qp[a]).clamp(-(k as i64), k as i64) + k as i64) as usize, j))
                .sum();
            assert!((gq.at(a, j) - want).abs() < 1e-14);
        }
    }
}

#[test]
fn shifted_basis_fit_and_predict_round_trip() {
    let opts = ShiftedBasisOptions { kind: ShiftedKind::Gaussian, num_shifts: 6, width: 0.2, lo: 0.0, hi: 1.0 };
    let coords: Vec<f64> = (0..12).map(|i| i as f64 / 12.0).collect();
    let psi = shifted_basis_encode(&opts, &coords).unwrap();
    for (n, &c) in coords.iter().enumerate() {
        for i in 0..6 {
            let u = i as f64 / 6.0 - c;
            assert!((psi.at(n, i) - (-u * u / (2.0 * 0.04)).exp()).abs() < 1e-15);
        }
    }
    let eye = Matrix::new(3, 3, vec![1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]).unwrap();
    assert!((stable_rank(&eye).unwrap() - 3.0).abs() < 1e-12);
    // An image in the span of the encoding is fitted exactly (lambda = 0) and predicted back.
    let mut rng = Rng(7);
    let w_true = Matrix::new(6, 6, rng.vec(36)).unwrap();
    let mut psi_t = Matrix::zeros(6, 12);
    for i in 0..12 {
        for j in 0..6 {
            psi_t.data[j * 12 + i] = psi.at(i, j);
        }
    }
    let image = matmul(&matmul(&psi, &w_true), &psi_t);
    let w = fit_separable_2d(0.0, false, &psi, &psi, &image).unwrap();
    let pred = predict_separable_2d(&psi, &psi, &w).unwrap();
    // Normal equations of a 12 x 6 Gaussian factor (condition ~1e2 squared): 1e-8.
    assert!(max_abs_diff(&pred.data, &image.data) < 1e-8);
}

#[test]
fn bad_input_is_an_error_with_a_message() {
    let e = SoRep::planes(&PlanesOptions::new(1)).err().unwrap();
    assert_eq!(e.status, Status::InvalidArgument);
    assert_eq!(e.code, 1);
    assert!(e.message.contains("dim"), "{}", e);
    assert!(e.to_string().starts_with("GPE_ERROR_INVALID_ARGUMENT: "));
    let e = SoRep::planes(&PlanesOptions::new(1 << 21)).err().unwrap();
    assert_eq!(e.status, Status::OutOfRange);
    let rep = SoRep::planes(&PlanesOptions::new(4)).unwrap();
    // A slice whose length disagrees with the shape never reaches C.
    let e = rep.apply(&[0i64, 1], &[0.0f64; 5]).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("x has 5 values"), "{}", e);
    let zero = Matrix::zeros(2, 2);
    assert!(!stable_rank(&zero).unwrap_err().message.is_empty());
    let opts = ShiftedBasisOptions { kind: ShiftedKind::Gaussian, num_shifts: 4, width: -1.0, lo: 0.0, hi: 1.0 };
    assert_eq!(shifted_basis_encode(&opts, &[0.5]).unwrap_err().status, Status::InvalidArgument);
}

#[test]
fn handles_are_shared_across_threads() {
    let rep = std::sync::Arc::new(SoRep::planes(&PlanesOptions::new(16)).unwrap());
    let x: Vec<f64> = (0..16 * 9).map(|i| (i as f64 * 0.1).sin()).collect();
    let positions: Vec<i64> = (0..9).map(|i| i * 1000).collect();
    let want = rep.apply(&positions, &x).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (rep, x, positions) = (rep.clone(), x.clone(), positions.clone());
            std::thread::spawn(move || rep.apply(&positions, &x).unwrap())
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), want);
    }
}
