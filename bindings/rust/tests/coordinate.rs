//! The 0.4.0 coordinate entry points through the Rust bindings: encoders against the
//! papers' formulas written here, their backward passes against central differences,
//! the graph and analysis functions against closed forms, the 3D and blended fits
//! against models whose answers are known, and bad input as Err.
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
    fn matrix(&mut self, rows: usize, cols: usize) -> Matrix {
        Matrix::new(rows, cols, (0..rows * cols).map(|_| self.next()).collect()).unwrap()
    }
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

// The vector-Jacobian product by central differences: sum_f g[n, f] (F(x + h e_d) -
// F(x - h e_d))[n, f] / 2h, every (n, d).
fn numeric_vjp(e: &CoordinateEncoder, points: &Matrix, g: &Matrix, h: f64) -> Matrix {
    let mut out = Matrix::zeros(points.rows, points.cols);
    for n in 0..points.rows {
        for d in 0..points.cols {
            let (mut plus, mut minus) = (points.clone(), points.clone());
            plus.data[n * points.cols + d] += h;
            minus.data[n * points.cols + d] -= h;
            let (fp, fm) = (e.encode(&plus).unwrap(), e.encode(&minus).unwrap());
            out.data[n * points.cols + d] = (0..g.cols).map(|f| g.at(n, f) * (fp.at(n, f) - fm.at(n, f))).sum::<f64>() / (2.0 * h);
        }
    }
    out
}

// J_m(x) by its power series sum_s (-1)^s (x/2)^(2s+m) / (s! (s+m)!) (DLMF 10.2.2); for
// x <= 12 the largest term is below 1e4, so the sum is good to ~1e4 * 2^-52 ≈ 2e-12.
fn bessel_series(m: i32, x: f64) -> f64 {
    let mut term = (x / 2.0).powi(m) / (1..=m).map(|k| k as f64).product::<f64>();
    let mut sum = term;
    for s in 1..80 {
        term *= -(x / 2.0) * (x / 2.0) / (s as f64 * (s + m) as f64);
        sum += term;
    }
    sum
}

#[test]
fn fourier_features_match_cos_sin_of_the_frequencies() {
    let mut rng = Rng(11);
    let b = rng.matrix(3, 2);
    let e = CoordinateEncoder::fourier_from_frequencies(&b, FrequencyConvention::TwoPi).unwrap();
    assert_eq!(e.dims(), (2, 6));
    let w = e.angular_frequencies().unwrap();
    // 2 pi b in double: one rounding.
    assert!(max_abs_diff(&w.data, &b.data.iter().map(|v| 2.0 * std::f64::consts::PI * v).collect::<Vec<_>>()) < 1e-15);
    let x = rng.matrix(4, 2);
    let f = e.encode(&x).unwrap();
    for n in 0..4 {
        for k in 0..3 {
            let a = w.at(k, 0) * x.at(n, 0) + w.at(k, 1) * x.at(n, 1);
            // |a| < 13: cos and sin of one double angle agree to a few ulps.
            assert!((f.at(n, k) - a.cos()).abs() < 1e-14);
            assert!((f.at(n, 3 + k) - a.sin()).abs() < 1e-14);
        }
    }
    // Backward: the exact VJP vs central differences (h = 1e-5: truncation ~ h^2 |w|^3 / 6
    // ≈ 4e-8 for |w| < 9, rounding ~ 1e-16 / h; 1e-6 covers both).
    let g = rng.matrix(4, 6);
    let got = e.backward(&x, &g).unwrap();
    assert!(max_abs_diff(&got.data, &numeric_vjp(&e, &x, &g, 1e-5).data) < 1e-6);
}

#[test]
fn nerf_frequencies_are_octaves_of_pi_per_axis() {
    let e = CoordinateEncoder::fourier(&FourierOptions::new(FourierKind::Nerf, 2, 3)).unwrap();
    assert_eq!(e.dims(), (2, 12));
    let w = e.angular_frequencies().unwrap();
    // Rows d * K + k: 2^k pi on axis d, 0 elsewhere (exact powers of two times pi).
    for d in 0..2 {
        for k in 0..3 {
            for c in 0..2 {
                let want = if c == d { (1 << k) as f64 * std::f64::consts::PI } else { 0.0 };
                assert_eq!(w.at(d * 3 + k, c), want);
            }
        }
    }
    let gauss = CoordinateEncoder::fourier(&FourierOptions { scale: 2.0, seed: 7, ..FourierOptions::new(FourierKind::Gaussian, 3, 5) }).unwrap();
    assert_eq!(gauss.dims(), (3, 10));
    // The same seed gives the same frequencies.
    let again = CoordinateEncoder::fourier(&FourierOptions { scale: 2.0, seed: 7, ..FourierOptions::new(FourierKind::Gaussian, 3, 5) }).unwrap();
    assert_eq!(gauss.angular_frequencies().unwrap(), again.angular_frequencies().unwrap());
    let err = CoordinateEncoder::fourier(&FourierOptions::new(FourierKind::Txt, 3, 4)).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.contains("dim must be 2"), "{}", err.message);
    assert!(gauss.so2_terms().is_err(), "a Fourier handle has no SO(2) terms");
}

#[test]
fn bessel_j_matches_its_power_series() {
    let x: Vec<f64> = (0..25).map(|i| 0.5 * i as f64).collect();
    for m in [0, 1, 2, 5] {
        let got = bessel_j(m, &x).unwrap();
        for (i, &xi) in x.iter().enumerate() {
            // See bessel_series: the series is good to ~2e-12 on x <= 12.
            assert!((got[i] - bessel_series(m, xi)).abs() < 1e-11, "J_{}({})", m, xi);
        }
    }
    assert_eq!(bessel_j(0, &[-1.0]).err().unwrap().status, Status::InvalidArgument);
    assert_eq!(bessel_j(21, &[1.0]).err().unwrap().status, Status::InvalidArgument);
}

#[test]
fn so2_bessel_features_and_their_backward() {
    let terms = [BesselTerm { order: 0, scale: 1.5, weight: 1 }, BesselTerm { order: 2, scale: 0.7, weight: 3 }];
    let e = CoordinateEncoder::so2_bessel(&terms, false).unwrap();
    assert_eq!(e.dims(), (2, 4));
    assert_eq!(e.so2_terms().unwrap(), terms.to_vec());
    let x = Matrix::new(3, 2, vec![0.5, 0.25, -1.0, 2.0, 0.3, -0.8]).unwrap();
    let f = e.encode(&x).unwrap();
    for n in 0..3 {
        let (px, py) = (x.at(n, 0), x.at(n, 1));
        let (r, theta) = (px.hypot(py), py.atan2(px));
        for (t, term) in terms.iter().enumerate() {
            let j = bessel_series(term.order as i32, term.scale * r);
            // Lim et al.: J_m(c r) cos(k theta), then J_m(c r) sin(k theta); the series'
            // ~1e-15 at c r < 4 and the angle's rounding stay below 1e-13.
            assert!((f.at(n, t) - j * (term.weight as f64 * theta).cos()).abs() < 1e-13);
            assert!((f.at(n, 2 + t) - j * (term.weight as f64 * theta).sin()).abs() < 1e-13);
        }
    }
    // Away from the origin the features are smooth: central differences with h = 1e-5
    // are good to ~1e-9 here; 1e-7 leaves margin.
    let g = Rng(3).matrix(3, 4);
    let got = e.backward(&x, &g).unwrap();
    assert!(max_abs_diff(&got.data, &numeric_vjp(&e, &x, &g, 1e-5).data) < 1e-7);
    let sampled = CoordinateEncoder::so2_bessel_sampled(&So2BesselOptions { polar: true, num_terms: 5, max_scale: 3.0, max_k: 4, order_m: 0, seed: 1 }).unwrap();
    for t in sampled.so2_terms().unwrap() {
        assert!(t.order == 0 && t.scale >= 0.0 && t.scale <= 3.0 && t.weight >= 1 && t.weight <= 3, "{:?}", t);
    }
}

#[test]
fn shifted_encoders_concatenate_and_kronecker() {
    let axis = |k: i64, width: f64| ShiftedBasisOptions { kind: ShiftedKind::Gaussian, num_shifts: k, width, lo: 0.0, hi: 1.0 };
    let (a0, a1) = (axis(3, 0.3), axis(2, 0.5));
    let simple = CoordinateEncoder::shifted(ShiftedForm::Simple, &[a0, a1]).unwrap();
    let complex = CoordinateEncoder::shifted(ShiftedForm::Complex, &[a0, a1]).unwrap();
    assert_eq!(simple.dims(), (2, 5));
    assert_eq!(complex.dims(), (2, 6));
    let x = Matrix::new(2, 2, vec![0.1, 0.9, 0.45, 0.3]).unwrap();
    let (fs, fc) = (simple.encode(&x).unwrap(), complex.encode(&x).unwrap());
    for n in 0..2 {
        // psi(t_i - x) = exp(-(t_i - x)^2 / (2 w^2)), t_i = i / K (Zheng et al.).
        let psi = |o: &ShiftedBasisOptions, i: usize, v: f64| {
            let u = i as f64 / o.num_shifts as f64 - v;
            (-u * u / (2.0 * o.width * o.width)).exp()
        };
        for i in 0..3 {
            assert!((fs.at(n, i) - psi(&a0, i, x.at(n, 0))).abs() < 1e-15);
        }
        for j in 0..2 {
            assert!((fs.at(n, 3 + j) - psi(&a1, j, x.at(n, 1))).abs() < 1e-15);
            for i in 0..3 {
                // Feature k0 + K0 k1: axis 0 fastest (one product: 2 ulps).
                assert!((fc.at(n, i + 3 * j) - psi(&a0, i, x.at(n, 0)) * psi(&a1, j, x.at(n, 1))).abs() < 1e-15);
            }
        }
    }
    // Gaussians of width >= 0.3: third derivatives < 40, so h = 1e-5 differences are good
    // to ~1e-9; 1e-7 leaves margin.
    let g = Rng(5).matrix(2, 6);
    let got = complex.backward(&x, &g).unwrap();
    assert!(max_abs_diff(&got.data, &numeric_vjp(&complex, &x, &g, 1e-5).data) < 1e-7);
    assert!(CoordinateEncoder::shifted(ShiftedForm::Simple, &[]).is_err());
}

#[test]
fn spherical_harmonics_of_degree_one() {
    let e = CoordinateEncoder::spherical_harmonics(1).unwrap();
    assert_eq!(e.dims(), (3, 4));
    let x = Matrix::new(2, 3, vec![1.0, 2.0, 2.0, -0.5, 0.0, 3.0]).unwrap();
    let f = e.encode(&x).unwrap();
    let c = (3.0 / (4.0 * std::f64::consts::PI)).sqrt();
    for n in 0..2 {
        let r = (x.at(n, 0).powi(2) + x.at(n, 1).powi(2) + x.at(n, 2).powi(2)).sqrt();
        // Index l^2 + l + m, no Condon-Shortley phase: Y_00, Y_1-1 ~ y, Y_10 ~ z, Y_11 ~ x.
        let want = [0.5 / std::f64::consts::PI.sqrt(), c * x.at(n, 1) / r, c * x.at(n, 2) / r, c * x.at(n, 0) / r];
        assert!(max_abs_diff(&f.data[n * 4..n * 4 + 4], &want) < 1e-14);
    }
    let g = Rng(9).matrix(2, 4);
    let got = e.backward(&x, &g).unwrap();
    // Smooth away from the origin (|x| >= 3): h = 1e-5 differences good to ~1e-10.
    assert!(max_abs_diff(&got.data, &numeric_vjp(&e, &x, &g, 1e-5).data) < 1e-8);
    let err = e.encode(&Matrix::new(1, 2, vec![1.0, 0.0]).unwrap()).err().unwrap();
    assert!(err.message.contains("[N, 3]"), "{}", err.message);
}

#[test]
fn laplacian_of_a_path_has_the_known_spectrum() {
    // Path on n nodes: lambda_k = 2 - 2 cos(pi k / n), k = 0..n-1.
    let n = 6;
    let edges: Vec<(i64, i64)> = (0..n as i64 - 1).map(|i| (i, i + 1)).collect();
    let (values, vectors) = laplacian_eigenvectors(LaplacianKind::Combinatorial, false, n, &edges, None, 4).unwrap();
    for k in 0..4 {
        let want = 2.0 - 2.0 * (std::f64::consts::PI * k as f64 / n as f64).cos();
        // A dense symmetric eigensolver: eigenvalues to ~n eps |L| = 1e-14; 1e-12 margin.
        assert!((values[k] - want).abs() < 1e-12, "{} vs {}", values[k], want);
        // L v = lambda v and |v| = 1.
        let v: Vec<f64> = (0..n).map(|i| vectors.at(i, k)).collect();
        let norm: f64 = v.iter().map(|a| a * a).sum();
        assert!((norm - 1.0).abs() < 1e-12);
        for i in 0..n {
            let deg = if i == 0 || i == n - 1 { 1.0 } else { 2.0 };
            let lv = deg * v[i] - if i > 0 { v[i - 1] } else { 0.0 } - if i + 1 < n { v[i + 1] } else { 0.0 };
            assert!((lv - values[k] * v[i]).abs() < 1e-12);
        }
    }
    // skip_first drops the zero eigenvalue; weights scale the spectrum.
    let (skipped, _) = laplacian_eigenvectors(LaplacianKind::Combinatorial, true, n, &edges, None, 2).unwrap();
    assert!((skipped[0] - values[1]).abs() < 1e-12);
    let doubled = vec![2.0; edges.len()];
    let (scaled, _) = laplacian_eigenvectors(LaplacianKind::Combinatorial, false, n, &edges, Some(&doubled), 3).unwrap();
    assert!((scaled[2] - 2.0 * values[2]).abs() < 1e-12);
    let err = laplacian_eigenvectors(LaplacianKind::Symmetric, false, 3, &[(0, 0)], None, 1).err().unwrap();
    assert!(err.message.contains("self-loop"), "{}", err.message);
}

#[test]
fn analysis_matches_the_closed_forms() {
    let mut rng = Rng(21);
    let f = rng.matrix(4, 3);
    let d = embedded_distance_matrix(&f, 0.25).unwrap();
    for i in 0..4 {
        for j in 0..4 {
            let dot: f64 = (0..3).map(|c| f.at(i, c) * f.at(j, c)).sum();
            // Zheng et al. eq. 6; three products and a scale: a few ulps.
            assert!((d.at(i, j) - 0.25 * dot).abs() < 1e-15);
        }
    }
    let pi = std::f64::consts::PI;
    // Zheng et al. eq. 24 and Prop. 3 (eq. 29): one exp each, a few ulps.
    assert!((embedder_distance(Embedder::Gaussian, 0.05, 0.1).unwrap() - pi.sqrt() * 0.05 * (-1.0f64).exp()).abs() < 1e-15);
    assert!((embedder_distance(Embedder::Rff, 2.0, 0.1).unwrap() - (-2.0 * pi * pi * 0.04).exp()).abs() < 1e-15);
    assert!((embedder_distance(Embedder::Rectangle, 0.2, 0.05).unwrap() - 0.15).abs() < 1e-15);
    // Stable ranks: 1 / (2 sqrt(pi) sigma), 1 / w, sqrt(2 pi) sigma, capped at num_points.
    assert!((embedder_stable_rank(Embedder::Gaussian, 0.01, 1000).unwrap() - 1.0 / (2.0 * pi.sqrt() * 0.01)).abs() < 1e-12);
    assert!((embedder_stable_rank(Embedder::Rectangle, 0.1, 1000).unwrap() - 10.0).abs() < 1e-12);
    assert!((embedder_stable_rank(Embedder::Rff, 3.0, 1000).unwrap() - (2.0 * pi).sqrt() * 3.0).abs() < 1e-12);
    assert_eq!(embedder_stable_rank(Embedder::Rectangle, 0.001, 50).unwrap(), 50.0);
    assert_eq!(embedder_stable_rank(Embedder::Gaussian, -1.0, 10).err().unwrap().status, Status::InvalidArgument);
    // cond of diag(3, 0.5) stacked on zeros: 6 (SVD of an exact diagonal: a few ulps).
    let psi = Matrix::new(3, 2, vec![3.0, 0.0, 0.0, 0.5, 0.0, 0.0]).unwrap();
    assert!((condition_number(&psi).unwrap() - 6.0).abs() < 1e-13);
    let singular = Matrix::new(2, 2, vec![1.0, 2.0, 2.0, 4.0]).unwrap();
    assert!(condition_number(&singular).unwrap() > 1e15);
}

fn mode_products(w: &Tensor3, psi: [&Matrix; 3]) -> Tensor3 {
    let n = [psi[0].rows, psi[1].rows, psi[2].rows];
    let mut out = Tensor3::zeros(n);
    for a in 0..n[0] {
        for b in 0..n[1] {
            for c in 0..n[2] {
                let mut s = 0.0;
                for i in 0..w.dims[0] {
                    for j in 0..w.dims[1] {
                        for l in 0..w.dims[2] {
                            s += w.at(i, j, l) * psi[0].at(a, i) * psi[1].at(b, j) * psi[2].at(c, l);
                        }
                    }
                }
                out.data[(a * n[1] + b) * n[2] + c] = s;
            }
        }
    }
    out
}

#[test]
fn separable_3d_fit_recovers_the_weights() {
    let mut rng = Rng(31);
    let (p0, p1, p2) = (rng.matrix(5, 3), rng.matrix(4, 2), rng.matrix(6, 3));
    let w = Tensor3::new([3, 2, 3], (0..18).map(|_| rng.next()).collect()).unwrap();
    let volume = mode_products(&w, [&p0, &p1, &p2]);
    let predicted = predict_separable_3d([&p0, &p1, &p2], &w).unwrap();
    // Sums of 18 products of values below 1: ~18 ulps.
    assert!(max_abs_diff(&predicted.data, &volume.data) < 1e-14);
    // Exact data and full-column-rank random factors (cond < ~20): the least-squares
    // solution is W, up to cond^2 eps ≈ 1e-13; 1e-10 leaves margin.
    let fit = fit_separable_3d(&SeparableFitOptions::default(), [&p0, &p1, &p2], &volume).unwrap();
    assert!(max_abs_diff(&fit.data, &w.data) < 1e-10);
    let svd = fit_separable_3d(&SeparableFitOptions { rcond: 1e-12, ..Default::default() }, [&p0, &p1, &p2], &volume).unwrap();
    assert!(max_abs_diff(&svd.data, &w.data) < 1e-10);
    let wrong = Tensor3::zeros([5, 4, 5]);
    assert_eq!(fit_separable_3d(&SeparableFitOptions::default(), [&p0, &p1, &p2], &wrong).err().unwrap().status, Status::InvalidArgument);
}

#[test]
fn separable_2d_rcond_accepts_a_rank_deficient_factor() {
    let mut rng = Rng(41);
    let py = rng.matrix(5, 3);
    // Two equal columns: Psi_x^T Psi_x is singular.
    let mut px = rng.matrix(4, 3);
    for r in 0..4 {
        px.data[r * 3 + 2] = px.data[r * 3 + 1];
    }
    let image = rng.matrix(5, 4);
    let err = fit_separable_2d_with(&SeparableFitOptions::default(), &py, &px, &image).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    let w = fit_separable_2d_with(&SeparableFitOptions { rcond: 1e-10, ..Default::default() }, &py, &px, &image).unwrap();
    // The pseudo-inverse splits the weight of equal columns evenly (minimum norm).
    for r in 0..3 {
        assert!((w.at(r, 1) - w.at(r, 2)).abs() < 1e-10);
    }
}

#[test]
fn blended_fit_reproduces_a_model_it_can_represent() {
    let basis = ShiftedBasisOptions { kind: ShiftedKind::Gaussian, num_shifts: 4, width: 0.35, lo: 0.0, hi: 1.0 };
    let ex = CoordinateEncoder::shifted(ShiftedForm::Simple, &[basis]).unwrap();
    let ey = CoordinateEncoder::shifted(ShiftedForm::Simple, &[basis]).unwrap();
    let grid: Vec<f64> = (0..9).map(|i| i as f64 / 8.0).collect();
    let mut rng = Rng(51);
    let w_true = rng.matrix(4, 4);
    // At a grid node the blending weights are (1, 0): f = (Psi_y W Psi_x^T)(j, i).
    let nodes = Matrix::new(2, 2, vec![grid[3], grid[5], grid[8], grid[0]]).unwrap();
    let at_nodes = predict_blended_2d(&ex, &ey, &grid, &grid, &nodes, &w_true).unwrap();
    let psi = ex.encode(&Matrix::new(9, 1, grid.clone()).unwrap()).unwrap();
    for (p, &(ix, iy)) in [(3usize, 5usize), (8, 0)].iter().enumerate() {
        let mut want = 0.0;
        for a in 0..4 {
            for b in 0..4 {
                want += psi.at(iy, a) * w_true.at(a, b) * psi.at(ix, b);
            }
        }
        // 16 products of values below 1: a few ulps each.
        assert!((at_nodes[p] - want).abs() < 1e-13);
    }
    // Samples of that model at scattered points: the fit reaches them (the model is in
    // the search space), RMS residual well below the data's scale.
    let points = Matrix::new(60, 2, (0..120).map(|_| 0.5 + 0.5 * rng.next()).collect()).unwrap();
    let values = predict_blended_2d(&ex, &ey, &grid, &grid, &points, &w_true).unwrap();
    let options = BlendedFitOptions { max_iterations: 2000, lambda: 0.0, tolerance: 1e-12 };
    let fit = fit_blended_2d(&options, &ex, &ey, &grid, &grid, &points, &values).unwrap();
    assert!(fit.iterations >= 1 && fit.iterations <= 2000);
    let rms_values = (values.iter().map(|v| v * v).sum::<f64>() / values.len() as f64).sqrt();
    // CGLS to a relative gradient of 1e-12 on a consistent system: residual ~1e-9 of the
    // data; 1e-6 allows a slow tail.
    assert!(fit.rms_residual < 1e-6 * rms_values, "rms {} vs {}", fit.rms_residual, rms_values);
    let again = predict_blended_2d(&ex, &ey, &grid, &grid, &points, &fit.weights).unwrap();
    assert!(max_abs_diff(&again, &values) < 1e-5 * rms_values.max(1.0));
    let outside = Matrix::new(1, 2, vec![1.5, 0.5]).unwrap();
    assert_eq!(predict_blended_2d(&ex, &ey, &grid, &grid, &outside, &w_true).err().unwrap().status, Status::InvalidArgument);
}
