//! The 0.5.0 INR entry points through the Rust bindings: the analytic data against Lim et
//! al.'s formulas (appendix D.1, eqs. 30, 31) written here, the splits against their
//! definitions, the metrics against their formulas, the fits' reported losses against
//! the MSE recomputed here from their outputs, and image files by round trip.
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
}

fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

fn mean_sq(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f64>() / a.len() as f64
}

fn centre(k: usize, n: usize) -> f64 {
    -1.0 + (2 * k + 1) as f64 / n as f64
}

// The signed sines of Lim et al. D.1 at pixel (i, j): Radial sin(15 sqrt(r)), Spiral
// sin(30 sqrt(0.1 r) + theta).
fn signed_value(task: SyntheticTask, i: usize, j: usize, n: usize) -> (f64, f64) {
    let (x, y) = (centre(j, n), centre(i, n));
    let (r, theta) = ((x * x + y * y).sqrt(), y.atan2(x));
    let f = match task {
        SyntheticTask::Radial => (15.0 * r.sqrt()).sin(),
        SyntheticTask::Spiral => (30.0 * (0.1 * r).sqrt() + theta).sin(),
    };
    (f, theta)
}

#[test]
fn synthetic_data_match_the_formulas() {
    // 1e-12: the same closed forms in double; only libm rounding differs.
    let n = 9;
    for &task in &[SyntheticTask::Radial, SyntheticTask::Spiral] {
        let magnitude = synthetic_image(task, false, n).unwrap();
        let signed = synthetic_image(task, true, n).unwrap();
        let field = synthetic_vector_field(task, n).unwrap();
        assert_eq!(field.dims, [n, n, 2]);
        for i in 0..n {
            for j in 0..n {
                let (f, theta) = signed_value(task, i, j, n);
                assert!((signed.at(i, j) - f).abs() < 1e-12, "{:?} ({}, {})", task, i, j);
                assert!((magnitude.at(i, j) - f.abs()).abs() < 1e-12);
                assert!((field.at(i, j, 0) - f * theta.cos()).abs() < 1e-12);
                assert!((field.at(i, j, 1) - f * theta.sin()).abs() < 1e-12);
            }
        }
    }
    // The grid: exact (one division per coordinate, as written here).
    let g = grid_coordinates(5).unwrap();
    assert_eq!((g.rows, g.cols), (25, 2));
    for i in 0..5 {
        for j in 0..5 {
            assert!((g.at(i * 5 + j, 0) - centre(j, 5)).abs() < 1e-15);
            assert!((g.at(i * 5 + j, 1) - centre(i, 5)).abs() < 1e-15);
        }
    }
    assert_eq!(synthetic_image(SyntheticTask::Spiral, false, 0).unwrap_err().status, Status::InvalidArgument);
}

fn ascending(v: &[i64]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}

#[test]
fn splits_partition_the_pixels() {
    let n = 101;
    let s = random_split(n, 0.05, 0.4, 7).unwrap();
    // Sizes round(fraction * N): round(5.05) = 5, round(40.4) = 40.
    assert_eq!((s.train.len(), s.validation.len(), s.test.len()), (5, 40, 56));
    assert!(ascending(&s.train) && ascending(&s.validation) && ascending(&s.test));
    let mut all: Vec<i64> = s.train.iter().chain(&s.validation).chain(&s.test).cloned().collect();
    all.sort_unstable();
    assert_eq!(all, (0..n as i64).collect::<Vec<_>>());
    assert_eq!(random_split(n, 0.05, 0.4, 7).unwrap(), s, "deterministic in the seed");
    assert_ne!(random_split(n, 0.05, 0.4, 8).unwrap(), s, "another seed, another split");
    assert_eq!(random_split(n, 0.7, 0.4, 7).unwrap_err().status, Status::InvalidArgument);

    let (rows, cols) = (5, 6);
    let g = regular_grid_split(rows, cols).unwrap();
    let train: Vec<i64> = (0..rows * cols).filter(|k| (k / cols) % 2 == 0 && (k % cols) % 2 == 0).map(|k| k as i64).collect();
    let test: Vec<i64> = (0..(rows * cols) as i64).filter(|k| !train.contains(k)).collect();
    assert_eq!(g.train, train);
    assert!(g.validation.is_empty());
    assert_eq!(g.test, test);
}

#[test]
fn metrics_match_the_formulas() {
    let mut rng = Rng(3);
    let (a, b) = (rng.vec(50), rng.vec(50));
    let m = mean_sq(&a, &b);
    // 1e-14 relative: a sum of 50 squares in another order.
    assert!((mse(&a, &b).unwrap() - m).abs() <= 1e-14 * m);
    let p = psnr(&a, &b, 2.0).unwrap();
    assert!((p - 10.0 * (4.0 / m).log10()).abs() < 1e-12);
    assert_eq!(psnr(&a, &a, 1.0).unwrap(), f64::INFINITY);
    assert_eq!(psnr(&a, &b, 0.0).unwrap_err().status, Status::InvalidArgument);
    assert_eq!(mse(&a, &b[..49]).unwrap_err().status, Status::InvalidArgument);
}

// Y = X W + 1 b for the one-layer network (num_hidden_layers = 0): W [in, out] row-major
// then b, as the flat parameter layout documents.
fn linear_forward(p: &[f64], x: &[f64], input_dim: usize, output_dim: usize) -> Vec<f64> {
    let n = x.len() / input_dim;
    let mut y = vec![0.0; n * output_dim];
    for r in 0..n {
        for o in 0..output_dim {
            let mut s = p[input_dim * output_dim + o];
            for i in 0..input_dim {
                s += x[r * input_dim + i] * p[i * output_dim + o];
            }
            y[r * output_dim + o] = s;
        }
    }
    y
}

#[test]
fn steps_beyond_the_abi_bound_are_refused_before_allocating() {
    // The loss buffer of `steps` entries was allocated before the library's 0..=2^31
    // check: 2^40 steps tried 8 TiB and aborted the process.
    let mut o = MlpOptions::default();
    o.steps = 1 << 40;
    let x = [0.0f64, 1.0];
    let e = mlp_fit::<f64>(&o, &x, 1, &x, 1, None).err().expect("refused");
    assert_eq!(e.status, Status::InvalidArgument, "{}", e.message);
    assert!(e.message.contains("steps"), "{}", e.message);
}

#[test]
fn mlp_layout_init_and_predict() {
    let mut o = MlpOptions::default();
    o.hidden_width = 7;
    o.num_hidden_layers = 2;
    // (2*7 + 7) + (7*7 + 7) + (7*3 + 3) = 21 + 56 + 24.
    assert_eq!(mlp_num_parameters(&o, 2, 3).unwrap(), 101);
    let p: Vec<f64> = mlp_init(&o, 2, 3).unwrap();
    // PyTorch's default bound 1/sqrt(fan_in) per layer.
    let bounds = [(21, 1.0 / 2f64.sqrt()), (56, 1.0 / 7f64.sqrt()), (24, 1.0 / 7f64.sqrt())];
    let mut k = 0;
    for &(count, bound) in &bounds {
        for v in &p[k..k + count] {
            assert!(v.abs() <= bound);
        }
        k += count;
    }
    assert_eq!(mlp_init::<f64>(&o, 2, 3).unwrap(), p, "seeded");
    o.seed = 1;
    assert_ne!(mlp_init::<f64>(&o, 2, 3).unwrap(), p);

    // No hidden layer: the network is X W + 1 b. 1e-13: 4-term dot products in double.
    o.num_hidden_layers = 0;
    let mut rng = Rng(11);
    let params = rng.vec(mlp_num_parameters(&o, 4, 2).unwrap());
    assert_eq!(params.len(), 10);
    let x = rng.vec(6 * 4);
    let y = mlp_predict(&o, &params, &x, 4, 2).unwrap();
    assert!(max_abs_diff(&y, &linear_forward(&params, &x, 4, 2)) < 1e-13);
    assert_eq!(mlp_predict(&o, &params[..9], &x, 4, 2).unwrap_err().status, Status::InvalidArgument);
}

#[test]
fn mlp_fit_reports_the_losses_of_its_networks() {
    let n = 12;
    let data = synthetic_image(SyntheticTask::Spiral, false, n).unwrap();
    let coords = grid_coordinates(n).unwrap();
    let mut o = MlpOptions::default();
    o.hidden_width = 32;
    o.num_hidden_layers = 2;
    o.steps = 200;
    o.learning_rate = 1e-2;
    o.seed = 42;
    let fit = mlp_fit::<f64>(&o, &coords.data, 2, &data.data, 1, None).unwrap();
    assert_eq!(fit.train_loss.len(), 200);
    let init: Vec<f64> = mlp_init(&o, 2, 1).unwrap();
    // The first loss is the seeded network's MSE, the final one the trained network's:
    // 1e-12 relative, the same double arithmetic in another summation order.
    let l0 = mean_sq(&mlp_predict(&o, &init, &coords.data, 2, 1).unwrap(), &data.data);
    assert!((fit.train_loss[0] - l0).abs() <= 1e-12 * l0);
    let lf = mean_sq(&mlp_predict(&o, &fit.parameters, &coords.data, 2, 1).unwrap(), &data.data);
    assert!((fit.final_loss - lf).abs() <= 1e-12 * lf);
    // Training helps: the Spiral's variance is about 0.1; 200 Adam steps at least halve the MSE.
    assert!(fit.final_loss < 0.5 * fit.train_loss[0], "{} vs {}", fit.final_loss, fit.train_loss[0]);
    // Same seed, same network; passing the initialisation explicitly changes nothing.
    let again = mlp_fit::<f64>(&o, &coords.data, 2, &data.data, 1, Some(&init)).unwrap();
    assert_eq!(again, fit);
    // float32: the same network in single precision; its losses follow the float64 run
    // to 1e-3 relative (float32 rounding over 200 steps).
    let c32: Vec<f32> = coords.data.iter().map(|&v| v as f32).collect();
    let d32: Vec<f32> = data.data.iter().map(|&v| v as f32).collect();
    let fit32 = mlp_fit::<f32>(&o, &c32, 2, &d32, 1, None).unwrap();
    assert!((fit32.train_loss[0] - fit.train_loss[0]).abs() <= 1e-5 * fit.train_loss[0]);
    assert!(fit32.final_loss < 0.5 * fit32.train_loss[0]);
    // A loss that overflows is an error, not NaN weights: Adam moves each weight by about
    // lr per step, so after one step the three layers' product is ~1e450 (inf).
    o.learning_rate = 1e150;
    assert!(mlp_fit::<f64>(&o, &coords.data, 2, &data.data, 1, None).is_err());
    assert_eq!(mlp_fit::<f64>(&o, &coords.data[..5], 2, &data.data, 1, None).unwrap_err().status, Status::InvalidArgument);
}

#[test]
fn mlp_validation_curve_is_the_held_out_mse() {
    assert_eq!(mlp_num_evaluations(25, 10).unwrap(), 3);
    assert_eq!(mlp_num_evaluations(20, 10).unwrap(), 2);
    assert_eq!(mlp_num_evaluations(7, 0).unwrap(), 1);
    assert_eq!(mlp_num_evaluations(0, 5).unwrap(), 1);
    assert_eq!(mlp_num_evaluations(7, -1).unwrap_err().status, Status::InvalidArgument);
    let n = 12;
    let data = synthetic_image(SyntheticTask::Spiral, false, n).unwrap();
    let coords = grid_coordinates(n).unwrap();
    // Every third pixel is held out; the rest train.
    let (mut x, mut y, mut vx, mut vy) = (vec![], vec![], vec![], vec![]);
    for i in 0..n * n {
        let (xs, ys) = if i % 3 == 0 { (&mut vx, &mut vy) } else { (&mut x, &mut y) };
        xs.extend_from_slice(&coords.data[2 * i..2 * i + 2]);
        ys.push(data.data[i]);
    }
    let mut o = MlpOptions::default();
    o.hidden_width = 16;
    o.num_hidden_layers = 2;
    o.steps = 25;
    o.learning_rate = 1e-2;
    o.seed = 3;
    let val = MlpValidation { features: &vx, targets: &vy, eval_every: 10 };
    let fit = mlp_fit_validated::<f64>(&o, &x, 2, &y, 1, None, &val).unwrap();
    assert_eq!(fit.validation_steps, vec![10, 20, 25]);
    // The validation set leaves the training's bits alone.
    assert_eq!(fit.fit, mlp_fit::<f64>(&o, &x, 2, &y, 1, None).unwrap());
    // Each entry is the held-out MSE of the network after that many updates: a fit of
    // exactly that many steps (the same bits: its last evaluation is the same number),
    // predicted and scored here. 1e-12 relative: the same squared differences in double,
    // summed in another order. The training-set MSE of that network is far from it.
    for (k, &step) in fit.validation_steps.iter().enumerate() {
        let mut ok = o;
        ok.steps = step;
        let short = mlp_fit_validated::<f64>(&ok, &x, 2, &y, 1, None, &MlpValidation { eval_every: 0, ..val }).unwrap();
        assert_eq!(short.validation_loss, vec![fit.validation_loss[k]]);
        let direct = mean_sq(&mlp_predict(&ok, &short.fit.parameters, &vx, 2, 1).unwrap(), &vy);
        assert!((fit.validation_loss[k] - direct).abs() <= 1e-12 * direct, "{} vs {}", fit.validation_loss[k], direct);
        assert!((short.fit.final_loss - direct).abs() > 1e-6 * direct);
    }
    // float32 trains the float32 network; the curve is still float64.
    let (x32, y32): (Vec<f32>, Vec<f32>) = (x.iter().map(|&v| v as f32).collect(), y.iter().map(|&v| v as f32).collect());
    let (vx32, vy32): (Vec<f32>, Vec<f32>) = (vx.iter().map(|&v| v as f32).collect(), vy.iter().map(|&v| v as f32).collect());
    let fit32 = mlp_fit_validated::<f32>(&o, &x32, 2, &y32, 1, None, &MlpValidation { features: &vx32, targets: &vy32, eval_every: 10 }).unwrap();
    assert_eq!(fit32.validation_steps, vec![10, 20, 25]);
    assert!(fit32.validation_loss.iter().all(|l| l.is_finite()));
    // Bad validation sets.
    let short_targets = MlpValidation { targets: &vy[1..], ..val };
    assert_eq!(mlp_fit_validated::<f64>(&o, &x, 2, &y, 1, None, &short_targets).unwrap_err().status, Status::InvalidArgument);
    let mut nan = vx.clone();
    nan[3] = f64::NAN;
    let with_nan = MlpValidation { features: &nan, ..val };
    let e = mlp_fit_validated::<f64>(&o, &x, 2, &y, 1, None, &with_nan).unwrap_err();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("non-finite"), "{}", e.message);
    let empty = MlpValidation { features: &vx[..0], targets: &vy[..0], eval_every: 0 };
    assert_eq!(mlp_fit_validated::<f64>(&o, &x, 2, &y, 1, None, &empty).unwrap_err().status, Status::InvalidArgument);
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

fn transpose(a: &Matrix) -> Matrix {
    let mut t = Matrix::zeros(a.cols, a.rows);
    for i in 0..a.rows {
        for j in 0..a.cols {
            t.data[j * a.rows + i] = a.at(i, j);
        }
    }
    t
}

#[test]
fn mlp_validation_progress_reports_each_evaluation() {
    let mut r = Rng(11);
    let (x, y, vx, vy) = (r.vec(40 * 2), r.vec(40), r.vec(12 * 2), r.vec(12));
    let mut o = MlpOptions::default();
    o.hidden_width = 8;
    o.num_hidden_layers = 1;
    o.steps = 23;
    o.learning_rate = 1e-2;
    o.seed = 4;
    let val = MlpValidation { features: &vx, targets: &vy, eval_every: 5 };
    assert_eq!(mlp_num_evaluations(23, 5).unwrap(), 5);
    let mut seen: Vec<(i64, f64, f64)> = vec![];
    let fit = mlp_fit_validated_with_progress::<f64, _>(&o, &x, 2, &y, 1, None, &val, |s, t, v| seen.push((s, t, v))).unwrap();
    // One call per evaluation, as the curve records it: the same doubles, bit for bit.
    assert_eq!(seen.iter().map(|e| e.0).collect::<Vec<_>>(), fit.validation_steps);
    assert_eq!(fit.validation_steps, vec![5, 10, 15, 20, 23]);
    for (k, &(step, train, validation)) in seen.iter().enumerate() {
        assert_eq!(validation.to_bits(), fit.validation_loss[k].to_bits(), "{}", k);
        assert_eq!(train.to_bits(), fit.fit.train_loss[step as usize - 1].to_bits(), "{}", k);
    }
    // The callback leaves the training's bits alone.
    assert_eq!(fit, mlp_fit_validated::<f64>(&o, &x, 2, &y, 1, None, &val).unwrap());
    // A panic stops the calls and resumes once the fit has returned.
    let mut calls = 0;
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        mlp_fit_validated_with_progress::<f64, _>(&o, &x, 2, &y, 1, None, &val, |step, _, _| {
            calls += 1;
            panic!("stop at {}", step)
        })
    }));
    let payload = caught.unwrap_err();
    assert_eq!(payload.downcast_ref::<String>().map(String::as_str), Some("stop at 5"));
    assert_eq!(calls, 1);
}

#[test]
fn linear_adam_fits_reach_a_known_model() {
    let mut rng = Rng(5);
    let phi = Matrix::new(40, 3, rng.vec(120)).unwrap();
    let w_true = Matrix::new(3, 2, rng.vec(6)).unwrap();
    let y = matmul(&phi, &w_true);
    let mut o = LinearAdamOptions::default();
    o.steps = 400;
    o.learning_rate = 5e-2;
    o.final_learning_rate = 1e-3;
    let fit = fit_dense_adam(&o, &phi, &y).unwrap();
    // From W = 0 the first loss is mean(Y^2) (1e-12 relative); the last is the MSE of
    // Phi W to 1e-12 of mean(Y^2): near convergence the residual's rounding scales with
    // the data, not with the (tiny) residual.
    let zeros = vec![0.0; y.data.len()];
    assert!((fit.train_loss[0] - mean_sq(&y.data, &zeros)).abs() <= 1e-12 * fit.train_loss[0]);
    let lf = mean_sq(&matmul(&phi, &fit.w).data, &y.data);
    assert!((fit.final_loss - lf).abs() <= 1e-12 * fit.train_loss[0]);
    // A consistent, well-conditioned 40 x 3 system: 400 Adam steps recover W to 1e-2
    // (Adam's last steps move each weight by at most about the final lr, 1e-3).
    assert!(max_abs_diff(&fit.w.data, &w_true.data) < 1e-2, "{:?}", fit.w.data);

    // Separable: S = Psi_y W Psi_x^T with a known W.
    let psi_y = Matrix::new(9, 3, rng.vec(27)).unwrap();
    let psi_x = Matrix::new(8, 2, rng.vec(16)).unwrap();
    let w2 = Matrix::new(3, 2, rng.vec(6)).unwrap();
    let image = matmul(&matmul(&psi_y, &w2), &transpose(&psi_x));
    let sep = fit_separable_adam_2d(&o, &psi_y, &psi_x, &image).unwrap();
    assert_eq!((sep.w.rows, sep.w.cols), (3, 2));
    let zeros = vec![0.0; image.data.len()];
    assert!((sep.train_loss[0] - mean_sq(&image.data, &zeros)).abs() <= 1e-12 * sep.train_loss[0]);
    let pred = matmul(&matmul(&psi_y, &sep.w), &transpose(&psi_x));
    let lf = mean_sq(&pred.data, &image.data);
    assert!((sep.final_loss - lf).abs() <= 1e-12 * sep.train_loss[0]);
    assert!(sep.final_loss < 1e-3 * sep.train_loss[0], "{} vs {}", sep.final_loss, sep.train_loss[0]);

    o.steps = 0;
    assert_eq!(fit_dense_adam(&o, &phi, &y).unwrap_err().status, Status::InvalidArgument);
}

fn temp_path(name: &str) -> String {
    let dir = std::env::var("TEST_TMPDIR").unwrap_or_else(|_| std::env::temp_dir().to_string_lossy().into_owned());
    format!("{}/gpe_rust_{}_{}", dir, std::process::id(), name)
}

#[test]
fn image_files_round_trip() {
    let (rows, cols) = (6, 7);
    let mut rng = Rng(9);
    let gray: Vec<f64> = rng.vec(rows * cols).iter().map(|v| 0.5 + 0.5 * v).collect();
    let png = temp_path("gray.png");
    write_png(&png, &gray, rows, cols, 1, 0.0, 1.0).unwrap();
    let img = Image::read(&png, true).unwrap();
    assert_eq!(img.shape(), (rows, cols, 1));
    let back: Vec<f64> = img.pixels().unwrap();
    // 8-bit PNG: each value is round(255 v) / 255; decoded exactly up to 1e-12.
    let quantised: Vec<f64> = gray.iter().map(|v| (255.0 * v).round() / 255.0).collect();
    assert!(max_abs_diff(&back, &quantised) < 1e-12);
    // Colour read of a gray file: three equal channels.
    let rgb: Vec<f64> = Image::read(&png, false).unwrap().pixels().unwrap();
    assert_eq!(rgb.len(), 3 * rows * cols);
    for k in 0..rows * cols {
        assert!(max_abs_diff(&rgb[3 * k..3 * k + 3], &[quantised[k]; 3]) < 1e-12);
    }
    // [lo, hi] maps to 0..255 and clamps: values written over [-1, 3].
    let wide: Vec<f64> = gray.iter().map(|v| 4.0 * v - 1.0).collect();
    write_png(&png, &wide, rows, cols, 1, -1.0, 3.0).unwrap();
    let back2: Vec<f32> = Image::read(&png, true).unwrap().pixels().unwrap();
    let back2: Vec<f64> = back2.iter().map(|&v| v as f64).collect();
    // float32 pixels: 1e-6 covers their rounding.
    assert!(max_abs_diff(&back2, &quantised) < 1e-6);
    std::fs::remove_file(&png).unwrap();

    // JPEG at quality 95 of a smooth image: lossy, within 4/255 everywhere.
    let (jr, jc) = (16, 16);
    let smooth: Vec<f64> = (0..jr * jc * 3).map(|k| 0.2 + 0.6 * ((k / 3) % jc) as f64 / jc as f64).collect();
    let jpg = temp_path("rgb.jpg");
    write_jpeg(&jpg, &smooth, jr, jc, 3, 95, 0.0, 1.0).unwrap();
    let jimg = Image::read(&jpg, false).unwrap();
    assert_eq!(jimg.shape(), (jr, jc, 3));
    assert!(max_abs_diff(&jimg.pixels::<f64>().unwrap(), &smooth) < 4.0 / 255.0);
    std::fs::remove_file(&jpg).unwrap();

    let missing = temp_path("missing.png");
    let err = Image::read(&missing, true).err().unwrap();
    assert_eq!(err.status, Status::InvalidArgument);
    assert!(err.message.contains("missing.png"), "{}", err.message);
    assert_eq!(write_png(&png, &gray, rows, cols, 2, 0.0, 1.0).unwrap_err().status, Status::InvalidArgument);
}
