//! RoPE, the additive biases and attention (since 0.3.0) through the Rust bindings,
//! against the published formulas written out here, and bad input as Err.
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

// Half-split RoPE by hand (Su et al., eq. 34 with gpe.h's pairing (i, i + r/2) and
// rotation (x1 cos a - x2 sin a, x1 sin a + x2 cos a)), bshd with positions 0..seq.
fn rope_by_hand(x: &[f64], shape: [usize; 4], base: f64) -> Vec<f64> {
    let [b, s, h, d] = shape;
    let mut y = x.to_vec();
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                let row = ((bi * s + si) * h + hi) * d;
                for i in 0..d / 2 {
                    let a = si as f64 * base.powf(-2.0 * i as f64 / d as f64);
                    let (x1, x2) = (x[row + i], x[row + i + d / 2]);
                    y[row + i] = x1 * a.cos() - x2 * a.sin();
                    y[row + i + d / 2] = x1 * a.sin() + x2 * a.cos();
                }
            }
        }
    }
    y
}

#[test]
fn rope_matches_the_formula_and_backward_inverts_it() {
    let rope = Rope::new(&RopeOptions::new(8)).unwrap();
    assert_eq!(rope.shape(), (8, 8, 1));
    let (thetas, factor) = rope.frequencies().unwrap();
    for (i, t) in thetas.iter().enumerate() {
        // Formed in double from the same expression: agreement to a few ulps.
        assert!((t - 10000f64.powf(-2.0 * i as f64 / 8.0)).abs() <= 1e-15 * t.abs().max(1.0));
    }
    assert_eq!(factor, 1.0);
    let shape = [2, 5, 3, 8];
    let x = Rng(1).vec(2 * 5 * 3 * 8);
    let y = rope.forward(&Tokens::bshd(), &x, &shape).unwrap();
    // Angles below 5 rad, values below 1: float64 rounding stays under 1e-14.
    assert!(max_abs_diff(&y, &rope_by_hand(&x, shape, 10000.0)) < 1e-14);
    // Orthogonality: R(-a) R(a) = I, in place.
    let mut back = y.clone();
    rope.backward_in_place(&Tokens::bshd(), &mut back, &shape).unwrap();
    assert!(max_abs_diff(&back, &x) < 1e-14);
    // float32 agrees with float64 to float32 rounding (a few ulps of values below ~1.5).
    let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    let y32 = rope.forward(&Tokens::bshd(), &x32, &shape).unwrap();
    let y32: Vec<f64> = y32.iter().map(|&v| v as f64).collect();
    assert!(max_abs_diff(&y32, &y) < 1e-6);
}

#[test]
fn rope_offsets_shift_positions_and_schedules_change_frequencies() {
    let rope = Rope::new(&RopeOptions::new(4)).unwrap();
    let x = Rng(2).vec(2 * 3 * 4); // [1, 6, 1, 4] seen as 6 tokens
    let shape = [1, 6, 1, 4];
    let full = rope.forward(&Tokens::bshd(), &x, &shape).unwrap();
    // The last 3 tokens alone, with offset 3, are rotated as in the full sequence.
    let tail_tokens = Tokens { offsets: Some(&[3]), ..Tokens::bshd() };
    let tail = rope.forward(&tail_tokens, &x[12..], &[1, 3, 1, 4]).unwrap();
    assert!(max_abs_diff(&tail, &full[12..]) < 1e-15);
    // Linear scaling divides every frequency by the factor (Chen et al.).
    let mut o = RopeOptions::new(4);
    o.schedule = Schedule::Linear { factor: 4.0 };
    let (lin, _) = Rope::new(&o).unwrap().frequencies().unwrap();
    let (def, _) = rope.frequencies().unwrap();
    for (l, d) in lin.iter().zip(&def) {
        assert!((l * 4.0 - d).abs() < 1e-15);
    }
    // YaRN with factor 1 leaves the high frequencies alone; its temperature is >= 1.
    let mut y = RopeOptions::new(64);
    y.schedule = Schedule::Yarn { factor: 8.0, original_max_position: 4096, beta_fast: 32.0, beta_slow: 1.0, attention_factor: None, truncate: true, mscale: None };
    let (yt, yf) = Rope::new(&y).unwrap().frequencies().unwrap();
    assert_eq!(yt[0], 1.0);
    // Peng et al.: sqrt(1/t) = 0.1 ln(s) + 1.
    assert!((yf - (0.1 * 8f64.ln() + 1.0)).abs() < 1e-12);
    // The ramp's ends not rounded (gpt-oss): the planes outside the ramp agree, some
    // inside it move; DeepSeek's mscale pair sets the attention factor
    // (0.1 m ln s + 1) / (0.1 m_all ln s + 1) (both reach C: they were never passed).
    y.schedule = Schedule::Yarn { factor: 8.0, original_max_position: 4096, beta_fast: 32.0, beta_slow: 1.0, attention_factor: None, truncate: false, mscale: Some((1.0, 0.5)) };
    let (ut, uf) = Rope::new(&y).unwrap().frequencies().unwrap();
    assert_eq!((ut[0], ut[31]), (yt[0], yt[31]));
    assert!(ut.iter().zip(&yt).any(|(a, b)| (a - b).abs() > 1e-12 * b));
    let want = (0.1 * 8f64.ln() + 1.0) / (0.05 * 8f64.ln() + 1.0);
    assert!((uf - want).abs() < 1e-12, "{} {}", uf, want);
}

#[test]
fn rope_rejects_bad_input() {
    let mut o = RopeOptions::new(8);
    o.rotary_dim = 3;
    let e = Rope::new(&o).err().expect("odd rotary_dim accepted");
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("rotary_dim"), "{}", e.message);
    let rope = Rope::new(&RopeOptions::new(8)).unwrap();
    // A slice shorter than its shape never reaches C.
    let e = rope.forward(&Tokens::bshd(), &[0.0f64; 7], &[1, 1, 1, 8]).err().unwrap();
    assert!(e.message.contains("x has 7 values"), "{}", e.message);
    // head_dim of the tensor disagrees with the encoding's.
    let e = rope.forward(&Tokens::bshd(), &[0.0f64; 4], &[1, 1, 1, 4]).err().unwrap();
    assert_eq!(e.status, Status::InvalidArgument);
}

#[test]
fn biases_match_their_formulas() {
    // Press et al.: 8 heads, slopes 2^-1 .. 2^-8.
    let alibi = Bias::alibi(8, false, None).unwrap();
    assert_eq!(alibi.kind(), BiasKind::Alibi);
    assert!(alibi.causal().unwrap());
    let slopes = alibi.alibi_slopes().unwrap();
    for (h, s) in slopes.iter().enumerate() {
        assert_eq!(*s, 2f64.powi(-(h as i32) - 1));
    }
    let (qp, kp) = ([3i64, 7], [0i64, 2, 5]);
    let tile = alibi.fill_tile(2, &qp, &kp).unwrap();
    for r in 0..2 {
        for c in 0..3 {
            // Exact in binary: small integers times a power of two.
            assert_eq!(tile.at(r, c), -slopes[2] * (qp[r] - kp[c]) as f64);
        }
    }
    // FoX (Lin et al.): c_i - c_j, c_t = sum_{l <= t} ln sigmoid(x_l).
    let logits = Matrix::new(4, 1, vec![0.3, -1.2, 2.0, 0.1]).unwrap();
    let fox = Bias::fox(0, &logits).unwrap();
    let c: Vec<f64> = logits
        .data
        .iter()
        .scan(0.0, |acc, &x| {
            *acc += -(1.0 + (-x as f64).exp()).ln();
            Some(*acc)
        })
        .collect();
    let tile = fox.fill_tile(0, &[3, 2], &[0, 1, 2]).unwrap();
    for (r, &i) in [3usize, 2].iter().enumerate() {
        for j in 0..3usize {
            // A handful of double operations on values of order 1.
            assert!((tile.at(r, j) - (c[i] - c[j])).abs() < 1e-14);
        }
    }
    // The ALiBi slope gradient: d/dm of -m (i - j) summed against the tile gradient.
    let g = Matrix::new(2, 3, vec![1.0; 6]).unwrap();
    let mut grad = vec![0.0; 8];
    alibi.accumulate_gradient(2, &qp, &kp, &g, &mut grad, None).unwrap();
    let want: f64 = qp.iter().flat_map(|&i| kp.iter().map(move |&j| -((i - j) as f64))).sum();
    assert_eq!(grad[2], want);
    assert!(grad.iter().enumerate().all(|(h, &v)| h == 2 || v == 0.0));
}

#[test]
fn biases_reject_bad_input() {
    let e = Bias::alibi(0, false, None).err().unwrap();
    assert_eq!(e.status, Status::InvalidArgument);
    let e = Bias::fox(0, &Matrix::new(1, 1, vec![f64::NAN]).unwrap()).err().unwrap();
    assert_eq!(e.status, Status::InvalidArgument);
    let fox = Bias::fox(10, &Matrix::new(2, 1, vec![0.0, 0.0]).unwrap()).unwrap();
    // Position 3 is outside [first_position, first_position + length) = [10, 12).
    assert!(fox.fill_tile(0, &[3], &[10]).is_err());
}

// Exact attention in double, written out: bshd, GQA, optional causal mask and a bias.
#[allow(clippy::too_many_arguments)]
fn attention_by_hand(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    s: usize,
    hq: usize,
    hk: usize,
    d: usize,
    causal: bool,
    bias: &dyn Fn(usize, usize, usize) -> f64,
) -> Vec<f64> {
    let mut o = vec![0.0; q.len()];
    let scale = 1.0 / (d as f64).sqrt();
    for h in 0..hq {
        let kh = h / (hq / hk);
        for i in 0..s {
            let qi = &q[(i * hq + h) * d..][..d];
            let mut scores = Vec::new();
            for j in 0..s {
                if causal && j > i {
                    continue;
                }
                let kj = &k[(j * hk + kh) * d..][..d];
                let dot: f64 = qi.iter().zip(kj).map(|(a, b)| a * b).sum();
                scores.push((j, scale * dot + bias(h, i, j)));
            }
            let m = scores.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = scores.iter().map(|x| (x.1 - m).exp()).sum();
            for &(j, sc) in &scores {
                let p = (sc - m).exp() / z;
                for t in 0..d {
                    o[(i * hq + h) * d + t] += p * v[(j * hk + kh) * d + t];
                }
            }
        }
    }
    o
}

#[test]
fn attention_matches_the_formula_with_alibi_and_gqa() {
    let (s, hq, hk, d) = (7usize, 4usize, 2usize, 16usize);
    let mut rng = Rng(3);
    let (q, k, v) = (rng.vec(s * hq * d), rng.vec(s * hk * d), rng.vec(s * hk * d));
    let alibi = Bias::alibi(hq, false, None).unwrap();
    let slopes = alibi.alibi_slopes().unwrap();
    let options = AttentionOptions { causal: true, bias: Some(&alibi), ..Default::default() };
    let layout = AttentionLayout::Padded { batch: 1, seq_q: s, seq_k: s };
    let heads = AttentionHeads { heads_q: hq, heads_kv: hk, head_dim: d, head_dim_v: None };
    let (o, lse) = attention_forward(&options, &layout, &heads, &q, &k, &v).unwrap();
    assert_eq!(lse.len(), s * hq);
    let want = attention_by_hand(&q, &k, &v, s, hq, hk, d, true, &|h, i, j| -slopes[h] * (i as f64 - j as f64));
    // float64 runs the exact reference: agreement to double rounding of short sums.
    assert!(max_abs_diff(&o, &want) < 1e-13);
    // float32 runs the optimised kernel: float32 rounding of sums of 16 products of
    // values below 1 and a softmax over 7 keys stays well under 1e-5.
    let f = |x: &[f64]| x.iter().map(|&t| t as f32).collect::<Vec<f32>>();
    let (o32, _) = attention_forward(&options, &layout, &heads, &f(&q), &f(&k), &f(&v)).unwrap();
    let o32: Vec<f64> = o32.iter().map(|&t| t as f64).collect();
    assert!(max_abs_diff(&o32, &want) < 1e-5);
}

// A 16-bit KV cache with float32 queries equals the float32 call on the widened values:
// values on a grid of 1/32 below 4 in magnitude are exact in bfloat16, float16 and
// float32, so only the kernels' summation order differs (1e-5 on O(1) outputs).
#[test]
fn attention_with_a_16_bit_kv_cache_equals_float32() {
    let (s, hq, hk, d) = (40usize, 4usize, 2usize, 16usize);
    let mut rng = Rng(9);
    let grid = |x: Vec<f64>| x.iter().map(|&t| ((t * 3.5 * 32.0).round() / 32.0) as f32).collect::<Vec<f32>>();
    let (q, k, v) = (grid(rng.vec(s * hq * d)), grid(rng.vec(s * hk * d)), grid(rng.vec(s * hk * d)));
    let layout = AttentionLayout::Padded { batch: 1, seq_q: s, seq_k: s };
    let heads = AttentionHeads { heads_q: hq, heads_kv: hk, head_dim: d, head_dim_v: None };
    let options = AttentionOptions { causal: true, ..Default::default() };
    let (want, want_lse) = attention_forward(&options, &layout, &heads, &q, &k, &v).unwrap();
    let bf16 = |x: &[f32]| x.iter().map(|t| (t.to_bits() >> 16) as u16).collect::<Vec<u16>>();
    let half = |x: &[f32]| {
        x.iter()
            .map(|t| {
                let u = t.to_bits();
                if u & 0x7fff_ffff == 0 {
                    (u >> 16) as u16
                } else {
                    (((u >> 16) & 0x8000) | ((((u >> 23) & 0xff) - 112) << 10) | ((u >> 13) & 0x3ff)) as u16
                }
            })
            .collect::<Vec<u16>>()
    };
    for (cache, kk, vv) in vec![(KvCache::BFloat16, bf16(&k), bf16(&v)), (KvCache::Float16, half(&k), half(&v))] {
        let (o, lse) = attention_forward_kv16(&options, &layout, &heads, &q, &kk, &vv, cache).unwrap();
        let diff = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        assert!(diff(&o, &want) < 1e-5, "{:?}", cache);
        assert!(diff(&lse, &want_lse) < 1e-5, "{:?}", cache);
    }
    // A cache of the wrong length is refused before C is called.
    assert!(attention_forward_kv16(&options, &layout, &heads, &q, &bf16(&k)[1..], &bf16(&v), KvCache::BFloat16).is_err());
}

#[test]
fn attention_with_rope_equals_rope_then_attention() {
    let (s, h, d) = (6usize, 2usize, 8usize);
    let mut rng = Rng(4);
    let (q, k, v) = (rng.vec(s * h * d), rng.vec(s * h * d), rng.vec(s * h * d));
    let layout = AttentionLayout::Padded { batch: 1, seq_q: s, seq_k: s };
    let heads = AttentionHeads { heads_q: h, heads_kv: h, head_dim: d, head_dim_v: None };
    let fused = AttentionOptions { rope_dim: d as i64, ..Default::default() };
    let (o, _) = attention_forward(&fused, &layout, &heads, &q, &k, &v).unwrap();
    let rope = Rope::new(&RopeOptions::new(d as i64)).unwrap();
    let shape = [1, s, h, d];
    let (rq, rk) = (rope.forward(&Tokens::bshd(), &q, &shape).unwrap(), rope.forward(&Tokens::bshd(), &k, &shape).unwrap());
    let want = attention_by_hand(&rq, &rk, &v, s, h, h, d, false, &|_, _, _| 0.0);
    assert!(max_abs_diff(&o, &want) < 1e-13);
}

#[test]
fn attention_backward_matches_finite_differences() {
    let (s, h, d) = (5usize, 2usize, 4usize);
    let mut rng = Rng(5);
    let (q, k, v, d_o) = (rng.vec(s * h * d), rng.vec(s * h * d), rng.vec(s * h * d), rng.vec(s * h * d));
    let layout = AttentionLayout::Padded { batch: 1, seq_q: s, seq_k: s };
    let heads = AttentionHeads { heads_q: h, heads_kv: h, head_dim: d, head_dim_v: None };
    let options = AttentionOptions { causal: true, rope_dim: d as i64, ..Default::default() };
    let g = attention_backward(&options, &layout, &heads, &q, &k, &v, None, &d_o).unwrap();
    // L = <d_o, o>; central differences with step 1e-6 in double: truncation error
    // O(h^2) ~ 1e-12 and rounding ~1e-16 / 1e-6 = 1e-10, so 1e-7 is a safe bound.
    let loss = |q: &[f64], k: &[f64], v: &[f64]| -> f64 {
        let (o, _) = attention_forward(&options, &layout, &heads, q, k, v).unwrap();
        o.iter().zip(&d_o).map(|(a, b)| a * b).sum()
    };
    let eps = 1e-6;
    for (which, grad) in [(0, &g.dq), (1, &g.dk), (2, &g.dv)] {
        for idx in [0usize, 7, 13, 22, 39] {
            let mut p = [q.clone(), k.clone(), v.clone()];
            p[which][idx] += eps;
            let up = loss(&p[0], &p[1], &p[2]);
            p[which][idx] -= 2.0 * eps;
            let down = loss(&p[0], &p[1], &p[2]);
            let fd = (up - down) / (2.0 * eps);
            assert!((fd - grad[idx]).abs() < 1e-7, "tensor {} index {}: fd {} vs {}", which, idx, fd, grad[idx]);
        }
    }
}

#[test]
fn attention_rejects_bad_input() {
    let heads = AttentionHeads { heads_q: 3, heads_kv: 2, head_dim: 4, head_dim_v: None };
    let layout = AttentionLayout::Padded { batch: 1, seq_q: 2, seq_k: 2 };
    let q = vec![0.0f64; 2 * 3 * 4];
    let kv = vec![0.0f64; 2 * 2 * 4];
    // 3 query heads over 2 kv heads: not a multiple.
    let e = attention_forward(&AttentionOptions::default(), &layout, &heads, &q, &kv, &kv).err().unwrap();
    assert_eq!(e.status, Status::InvalidArgument);
    let heads = AttentionHeads { heads_q: 2, heads_kv: 2, head_dim: 4, head_dim_v: None };
    let q = vec![0.0f64; 2 * 2 * 4];
    // An odd rope_dim.
    let opts = AttentionOptions { rope_dim: 3, ..Default::default() };
    let e = attention_forward(&opts, &layout, &heads, &q, &kv, &kv).err().unwrap();
    assert_eq!(e.status, Status::InvalidArgument);
    // A NaN scale.
    let opts = AttentionOptions { softmax_scale: f64::NAN, ..Default::default() };
    assert!(attention_forward(&opts, &layout, &heads, &q, &kv, &kv).is_err());
    // Slices shorter than their shapes never reach C.
    let e = attention_forward(&AttentionOptions::default(), &layout, &heads, &q[1..], &kv, &kv).err().unwrap();
    assert!(e.message.contains("q has"), "{}", e.message);
    // Non-monotonic cumulative lengths.
    let packed = AttentionLayout::Packed { cu_seqlens_q: &[0, 2, 1, 2], cu_seqlens_k: &[0, 1, 1, 2] };
    assert!(attention_forward(&AttentionOptions::default(), &packed, &heads, &q, &kv, &kv).is_err());
}

#[test]
fn rope_table_equals_rope_forward_and_backward() {
    let rope = Rope::new(&RopeOptions::new(8)).unwrap();
    // Two sequences of 5 tokens, the second starting at position 4 (a KV-cache offset).
    let tokens = Tokens { offsets: Some(&[0, 4]), ..Tokens::bshd() };
    let like_shape = [2, 5, 3, 8];
    let like = vec![0.0f64; 2 * 5 * 3 * 8];
    let table = rope.table(&tokens, &like, &like_shape).unwrap();
    assert!(table.is_float64());
    // Applied to a tensor with another head count (the table is per token).
    let shape = [2, 5, 1, 8];
    let x = Rng(21).vec(2 * 5 * 8);
    let want = rope.forward(&tokens, &x, &shape).unwrap();
    // Both form the angles p theta_i in double (p < 9, theta <= 1): a few ulps apart.
    let y = table.forward(&x, &shape).unwrap();
    assert!(max_abs_diff(&y, &want) < 1e-14);
    assert!(max_abs_diff(&table.backward(&y, &shape).unwrap(), &x) < 1e-14);
    let mut z = x.clone();
    table.forward_in_place(&mut z, &shape).unwrap();
    assert!(max_abs_diff(&z, &want) < 1e-14);
    table.backward_in_place(&mut z, &shape).unwrap();
    assert!(max_abs_diff(&z, &x) < 1e-14);
    // A float32 table for float32 tensors: float32 rounding of values below ~1.5.
    let like32 = vec![0.0f32; like.len()];
    let table32 = rope.table(&tokens, &like32, &like_shape).unwrap();
    assert!(!table32.is_float64());
    let x32: Vec<f32> = x.iter().map(|&v| v as f32).collect();
    let y32: Vec<f64> = table32.forward(&x32, &shape).unwrap().iter().map(|&v| v as f64).collect();
    assert!(max_abs_diff(&y32, &want) < 1e-6);
    // A float64 table does not serve float32, nor another token count.
    assert_eq!(table.forward(&x32, &shape).err().unwrap().status, Status::InvalidArgument);
    assert!(table.forward(&x[..32], &[2, 2, 1, 8]).is_err());
    // A slice shorter than `like`'s shape never reaches C.
    let e = rope.table(&tokens, &like[1..], &like_shape).err().unwrap();
    assert!(e.message.contains("like has"), "{}", e.message);
}

// exp(S) by scaling and squaring a 30-term Taylor series (|S / 2^8| < 1 for the small
// generators below): double-rounding accurate, independent of the library.
fn expm(s: &Matrix) -> Matrix {
    let n = s.rows;
    let mul = |a: &Matrix, b: &Matrix| {
        let mut c = Matrix::zeros(n, n);
        for i in 0..n {
            for k in 0..n {
                for j in 0..n {
                    c.data[i * n + j] += a.at(i, k) * b.at(k, j);
                }
            }
        }
        c
    };
    let a = Matrix::new(n, n, s.data.iter().map(|x| x / 256.0).collect()).unwrap();
    let mut term = Matrix::new(n, n, (0..n * n).map(|i| if i % (n + 1) == 0 { 1.0 } else { 0.0 }).collect()).unwrap();
    let mut sum = term.clone();
    for k in 1..30 {
        term = mul(&term, &a);
        term.data.iter_mut().for_each(|x| *x /= k as f64);
        sum.data.iter_mut().zip(&term.data).for_each(|(x, t)| *x += t);
    }
    for _ in 0..8 {
        sum = mul(&sum, &sum);
    }
    sum
}

// A random skew-symmetric m x m matrix times `scale`.
fn skew(rng: &mut Rng, m: usize, scale: f64) -> Matrix {
    let a = rng.vec(m * m);
    Matrix::new(m, m, (0..m * m).map(|i| scale * (a[i] - a[(i % m) * m + i / m])).collect()).unwrap()
}

// Rows x[(t * h + head) * d ..] multiplied by rot(t) (d x d).
fn rotate_rows(x: &[f64], s: usize, h: usize, d: usize, rot: &dyn Fn(usize) -> Matrix) -> Vec<f64> {
    let mut y = vec![0.0; x.len()];
    for t in 0..s {
        let r = rot(t);
        for hh in 0..h {
            let row = (t * h + hh) * d;
            for i in 0..d {
                y[row + i] = (0..d).map(|j| r.at(i, j) * x[row + j]).sum();
            }
        }
    }
    y
}

#[test]
fn attention_axial_and_mrope_positions_rotate_as_written_out() {
    // Axial 2D RoPE (the rope_dim / 2 half-split planes in 2 blocks, each with the
    // default frequencies of dimension rope_dim / 2) and M-RoPE sections [2, 3, 3]
    // (default frequencies of rope_dim, contiguous sections), against the rotation by
    // hand (Su et al. eq. 34 per plane, angle = the plane's axis coordinate * theta).
    let (s, h, d) = (9usize, 2usize, 16usize);
    let mut rng = Rng(22);
    let (q, k, v) = (rng.vec(s * h * d), rng.vec(s * h * d), rng.vec(s * h * d));
    let layout = AttentionLayout::Padded { batch: 1, seq_q: s, seq_k: s };
    let heads = AttentionHeads { heads_q: h, heads_kv: h, head_dim: d, head_dim_v: None };
    let sections = [2i64, 3, 3];
    for axes in [2usize, 3] {
        let coords: Vec<i64> = (0..s * axes).map(|_| (rng.next() * 20.0).round() as i64).collect();
        let (theta, plane_axis): (Vec<f64>, Vec<usize>) = if axes == 2 {
            let m = d / (2 * axes);
            (0..d / 2).map(|i| (10000f64.powf(-2.0 * (i % m) as f64 / (d / axes) as f64), i / m)).unzip()
        } else {
            let owner: Vec<usize> = sections.iter().enumerate().flat_map(|(a, &n)| std::iter::repeat(a).take(n as usize)).collect();
            (0..d / 2).map(|i| (10000f64.powf(-2.0 * i as f64 / d as f64), owner[i])).unzip()
        };
        let rot = |t: usize| {
            let mut r = Matrix::zeros(d, d);
            for i in 0..d / 2 {
                let a = coords[t * axes + plane_axis[i]] as f64 * theta[i];
                let (c, sn) = (a.cos(), a.sin());
                r.data[i * d + i] = c;
                r.data[i * d + i + d / 2] = -sn;
                r.data[(i + d / 2) * d + i] = sn;
                r.data[(i + d / 2) * d + i + d / 2] = c;
            }
            r
        };
        let want = attention_by_hand(&rotate_rows(&q, s, h, d, &rot), &rotate_rows(&k, s, h, d, &rot), &v, s, h, h, d, true, &|_, _, _| 0.0);
        let mut options = AttentionOptions { causal: true, rope_dim: d as i64, q_axes: Some(&coords), k_axes: Some(&coords), ..Default::default() };
        if axes == 2 {
            options.rope_axes = 2;
        } else {
            options.rope_sections = Some(&sections);
        }
        // float64: the exact reference; angles up to 20 rad and 16-term dots: 1e-12.
        let (o, _) = attention_forward(&options, &layout, &heads, &q, &k, &v).unwrap();
        assert!(max_abs_diff(&o, &want) < 1e-12, "axes {}", axes);
        // float32: the optimised kernel, float32 rounding of the same sums: 1e-5.
        let f = |x: &[f64]| x.iter().map(|&t| t as f32).collect::<Vec<f32>>();
        let (o32, _) = attention_forward(&options, &layout, &heads, &f(&q), &f(&k), &f(&v)).unwrap();
        let o32: Vec<f64> = o32.iter().map(|&t| t as f64).collect();
        assert!(max_abs_diff(&o32, &want) < 1e-5, "axes {}", axes);
        // The same encoding from a Rope handle: q_axes / k_axes read with the handle's
        // axis count (they were sent as one axis and refused).
        let handle = Rope::new(&RopeOptions {
            axes: if axes == 2 { Axes::Axial(2) } else { Axes::MRope(sections.to_vec()) },
            ..RopeOptions::new(d as i64)
        })
        .unwrap();
        let fused = AttentionOptions { causal: true, rope: Some(&handle), q_axes: Some(&coords), k_axes: Some(&coords), ..Default::default() };
        let (oh, _) = attention_forward(&fused, &layout, &heads, &q, &k, &v).unwrap();
        assert!(max_abs_diff(&oh, &want) < 1e-12, "handle, axes {}", axes);
    }
    // Per-axis coordinates whose length is not a multiple of the axes: refused here.
    let bad = AttentionOptions { rope_dim: d as i64, rope_axes: 2, q_axes: Some(&[0, 1, 2]), k_axes: Some(&[0, 1, 2]), ..Default::default() };
    let e = attention_forward(&bad, &layout, &heads, &q, &k, &v).err().unwrap();
    assert!(e.message.contains("q_axes has 3 values"), "{}", e.message);
}

#[test]
fn attention_algebraic_tree_and_grid_match_exponentials_by_hand() {
    // Kogkalidis et al.: a tree address (c_1, ..., c_m) acts by W_c1 ... W_cm with
    // W_c = exp(S_c) (sec. 3.2); a grid coordinate (x, y) by blockdiag(exp(x S_0),
    // exp(y S_1)) (sec. 3.3). float64 runs the exact reference: 1e-12 against the
    // Taylor exponentials here (orthogonal factors, entries below 1).
    let (s, h, d) = (7usize, 2usize, 8usize);
    let mut rng = Rng(23);
    let (q, k, v) = (rng.vec(s * h * d), rng.vec(s * h * d), rng.vec(s * h * d));
    let layout = AttentionLayout::Padded { batch: 1, seq_q: s, seq_k: s };
    let heads = AttentionHeads { heads_q: h, heads_kv: h, head_dim: d, head_dim_v: None };
    let tree = [skew(&mut rng, d, 0.4), skew(&mut rng, d, 0.4)];
    let w: Vec<Matrix> = tree.iter().map(expm).collect();
    let addresses: Vec<Vec<i64>> = (0..s).map(|t| (0..t % 4).map(|i| ((t + i) % 2) as i64).collect()).collect();
    let address_refs: Vec<&[i64]> = addresses.iter().map(|a| a.as_slice()).collect();
    let node = |t: usize| {
        let mut m = Matrix::new(d, d, (0..d * d).map(|i| if i % (d + 1) == 0 { 1.0 } else { 0.0 }).collect()).unwrap();
        for &c in &addresses[t] {
            let wc = &w[c as usize];
            let mut next = Matrix::zeros(d, d);
            for i in 0..d {
                for j in 0..d {
                    next.data[i * d + j] = (0..d).map(|l| m.at(i, l) * wc.at(l, j)).sum();
                }
            }
            m = next;
        }
        m
    };
    let options = AttentionOptions { causal: true, algebraic_tree: Some(&tree), q_tree: Some(&address_refs), k_tree: Some(&address_refs), ..Default::default() };
    let (o, _) = attention_forward(&options, &layout, &heads, &q, &k, &v).unwrap();
    let want = attention_by_hand(&rotate_rows(&q, s, h, d, &node), &rotate_rows(&k, s, h, d, &node), &v, s, h, h, d, true, &|_, _, _| 0.0);
    assert!(max_abs_diff(&o, &want) < 1e-12);
    let grid = [skew(&mut rng, 4, 0.5), skew(&mut rng, 4, 0.5)];
    let coords: Vec<i64> = (0..s * 2).map(|i| (i as i64 * 7) % 11 - 5).collect();
    let block = |t: usize| {
        let mut m = Matrix::zeros(d, d);
        for a in 0..2 {
            let e = expm(&Matrix::new(4, 4, grid[a].data.iter().map(|x| x * coords[t * 2 + a] as f64).collect()).unwrap());
            for i in 0..4 {
                for j in 0..4 {
                    m.data[(4 * a + i) * d + 4 * a + j] = e.at(i, j);
                }
            }
        }
        m
    };
    let options = AttentionOptions { algebraic_grid: Some(&grid), q_axes: Some(&coords), k_axes: Some(&coords), ..Default::default() };
    let (o, _) = attention_forward(&options, &layout, &heads, &q, &k, &v).unwrap();
    let want = attention_by_hand(&rotate_rows(&q, s, h, d, &block), &rotate_rows(&k, s, h, d, &block), &v, s, h, h, d, false, &|_, _, _| 0.0);
    assert!(max_abs_diff(&o, &want) < 1e-12);
    // Tree addresses on one side only: refused here.
    let half = AttentionOptions { algebraic_tree: Some(&tree), q_tree: Some(&address_refs), ..Default::default() };
    assert!(attention_forward(&half, &layout, &heads, &q, &k, &v).is_err());
    // Generators of different sizes: refused here.
    let mixed = [skew(&mut rng, d, 0.4), skew(&mut rng, 4, 0.4)];
    let bad = AttentionOptions { algebraic_tree: Some(&mixed), q_tree: Some(&address_refs), k_tree: Some(&address_refs), ..Default::default() };
    let e = attention_forward(&bad, &layout, &heads, &q, &k, &v).err().unwrap();
    assert!(e.message.contains("algebraic_tree[1]"), "{}", e.message);
}

// Shaw et al. (eqs. 3-4) by hand, one head, causal, positions 0..s-1: label r =
// clip(j - i, -kmax, kmax) + kmax; s_ij = scale <q_i, k_j + aK_r>, o_i = sum_j p_ij (v_j + aV_r).
#[allow(clippy::too_many_arguments)]
fn shaw_by_hand(q: &[f64], k: &[f64], v: &[f64], s: usize, d: usize, kmax: i64, ak: &[f64], av: &[f64]) -> Vec<f64> {
    let scale = 1.0 / (d as f64).sqrt();
    let mut o = vec![0.0; s * d];
    for i in 0..s {
        let label = |j: usize| ((j as i64 - i as i64).clamp(-kmax, kmax) + kmax) as usize;
        let scores: Vec<f64> = (0..=i).map(|j| scale * (0..d).map(|c| q[i * d + c] * (k[j * d + c] + ak[label(j) * d + c])).sum::<f64>()).collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = scores.iter().map(|x| (x - m).exp()).sum();
        for j in 0..=i {
            let p = (scores[j] - m).exp() / z;
            for c in 0..d {
                o[i * d + c] += p * (v[j * d + c] + av[label(j) * d + c]);
            }
        }
    }
    o
}

#[test]
fn attention_shaw_tables_and_their_gradients() {
    let (s, d, kmax) = (7usize, 4usize, 2i64);
    let rows = (2 * kmax + 1) as usize;
    let mut rng = Rng(24);
    let (q, k, v, w) = (rng.vec(s * d), rng.vec(s * d), rng.vec(s * d), rng.vec(s * d));
    let (ak, av) = (Matrix::new(rows, d, rng.vec(rows * d)).unwrap(), Matrix::new(rows, d, rng.vec(rows * d)).unwrap());
    let layout = AttentionLayout::Padded { batch: 1, seq_q: s, seq_k: s };
    let heads = AttentionHeads { heads_q: 1, heads_kv: 1, head_dim: d, head_dim_v: None };
    let options = |ak: &Matrix, av: &Matrix| -> Vec<f64> {
        let o = AttentionOptions { causal: true, shaw_max_distance: kmax, shaw_key_table: Some(ak), shaw_value_table: Some(av), ..Default::default() };
        attention_forward(&o, &layout, &heads, &q, &k, &v).unwrap().0
    };
    // float64: the exact reference against the formula, double rounding: 1e-12.
    let o = options(&ak, &av);
    assert!(max_abs_diff(&o, &shaw_by_hand(&q, &k, &v, s, d, kmax, &ak.data, &av.data)) < 1e-12);
    let opts = AttentionOptions { causal: true, shaw_max_distance: kmax, shaw_key_table: Some(&ak), shaw_value_table: Some(&av), ..Default::default() };
    let (_, p) = attention_backward_with_parameters(&opts, &layout, &heads, &q, &k, &v, None, &w).unwrap();
    let (gk, gv) = (p.shaw_key_table.unwrap(), p.shaw_value_table.unwrap());
    assert_eq!((gk.rows, gk.cols, gv.rows, gv.cols), (rows, d, rows, d));
    // Central differences of L = <w, o>, step 1e-6: truncation ~1e-12, rounding
    // ~1e-16 / 1e-6 = 1e-10, so 1e-7 absolute (gradients are O(1)).
    let loss = |o: &[f64]| o.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>();
    for which in 0..2 {
        for i in 0..rows * d {
            let (mut up, mut down) = (if which == 0 { ak.clone() } else { av.clone() }, if which == 0 { ak.clone() } else { av.clone() });
            up.data[i] += 1e-6;
            down.data[i] -= 1e-6;
            let (lu, ld) = if which == 0 { (loss(&options(&up, &av)), loss(&options(&down, &av))) } else { (loss(&options(&ak, &up)), loss(&options(&ak, &down))) };
            let got = if which == 0 { gk.data[i] } else { gv.data[i] };
            assert!((got - (lu - ld) / 2e-6).abs() < 1e-7, "table {} entry {}: {} vs {}", which, i, got, (lu - ld) / 2e-6);
        }
    }
    // A table of 3 rows for shaw_max_distance 2 (5 rows expected): the library refuses it.
    let short = Matrix::new(3, d, vec![0.0; 3 * d]).unwrap();
    let bad = AttentionOptions { shaw_max_distance: kmax, shaw_key_table: Some(&short), ..Default::default() };
    let e = attention_forward(&bad, &layout, &heads, &q, &k, &v).err().unwrap();
    assert_eq!(e.status, Status::InvalidArgument);
    assert!(e.message.contains("shaw_key_table"), "{}", e.message);
}

// gpe_attention_backward_v2: dq, dk, dv equal gpe_attention_backward's (the same backward,
// bit for bit), the Shaw tables' gradients equal those of
// gpe_attention_backward_with_parameters and central differences of the forward.
#[test]
fn attention_backward_v2_adds_the_shaw_table_gradients() {
    let (s, d, kmax) = (6usize, 4usize, 2i64);
    let rows = (2 * kmax + 1) as usize;
    let mut rng = Rng(31);
    // Two query heads over one kv head (GQA), so the tables' gradients sum over heads.
    let (q, k, v, w) = (rng.vec(s * 2 * d), rng.vec(s * d), rng.vec(s * d), rng.vec(s * 2 * d));
    let (ak, av) = (Matrix::new(rows, d, rng.vec(rows * d)).unwrap(), Matrix::new(rows, d, rng.vec(rows * d)).unwrap());
    let layout = AttentionLayout::Padded { batch: 1, seq_q: s, seq_k: s };
    let heads = AttentionHeads { heads_q: 2, heads_kv: 1, head_dim: d, head_dim_v: None };
    let opts = AttentionOptions { causal: true, shaw_max_distance: kmax, shaw_key_table: Some(&ak), shaw_value_table: Some(&av), ..Default::default() };
    let (g2, t2) = attention_backward_v2(&opts, &layout, &heads, &q, &k, &v, None, &w).unwrap();
    let g1 = attention_backward(&opts, &layout, &heads, &q, &k, &v, None, &w).unwrap();
    assert_eq!((&g2.dq, &g2.dk, &g2.dv), (&g1.dq, &g1.dk, &g1.dv));
    let (_, p) = attention_backward_with_parameters(&opts, &layout, &heads, &q, &k, &v, None, &w).unwrap();
    assert_eq!(t2.key_table, p.shaw_key_table);
    assert_eq!(t2.value_table, p.shaw_value_table);
    // With the forward's o and lse passed in: the same gradients (float64 recomputes).
    let (o, lse) = attention_forward(&opts, &layout, &heads, &q, &k, &v).unwrap();
    let (g3, t3) = attention_backward_v2(&opts, &layout, &heads, &q, &k, &v, Some((&o, &lse)), &w).unwrap();
    assert_eq!((&g3.dq, &t3), (&g2.dq, &t2));
    // Central differences of L = <w, o>, step 1e-6 in float64: truncation ~1e-12, rounding
    // ~1e-16 / 1e-6 = 1e-10; gradients are O(1), so 1e-7 absolute.
    let loss = |ak: &Matrix, av: &Matrix| -> f64 {
        let o = AttentionOptions { causal: true, shaw_max_distance: kmax, shaw_key_table: Some(ak), shaw_value_table: Some(av), ..Default::default() };
        let out = attention_forward(&o, &layout, &heads, &q, &k, &v).unwrap().0;
        out.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>()
    };
    let (gk, gv) = (t2.key_table.unwrap(), t2.value_table.unwrap());
    for i in 0..rows * d {
        let (mut up, mut down) = (ak.clone(), ak.clone());
        up.data[i] += 1e-6;
        down.data[i] -= 1e-6;
        let fd = (loss(&up, &av) - loss(&down, &av)) / 2e-6;
        assert!((gk.data[i] - fd).abs() < 1e-7, "key table entry {}: {} vs {}", i, gk.data[i], fd);
        let (mut up, mut down) = (av.clone(), av.clone());
        up.data[i] += 1e-6;
        down.data[i] -= 1e-6;
        let fd = (loss(&ak, &up) - loss(&ak, &down)) / 2e-6;
        assert!((gv.data[i] - fd).abs() < 1e-7, "value table entry {}: {} vs {}", i, gv.data[i], fd);
    }
    // Only the key table: its gradient alone, the same numbers.
    let key_only = AttentionOptions { shaw_value_table: None, ..opts };
    let (_, tk) = attention_backward_v2(&key_only, &layout, &heads, &q, &k, &v, None, &w).unwrap();
    assert!(tk.value_table.is_none());
    let (_, pk) = attention_backward_with_parameters(&key_only, &layout, &heads, &q, &k, &v, None, &w).unwrap();
    assert_eq!(tk.key_table, pk.shaw_key_table);
    // No tables, float32 kernels: exactly gpe_attention_backward, with no table gradients.
    let plain = AttentionOptions { causal: true, num_threads: 1, ..Default::default() };
    let (q32, k32, v32, w32): (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) = (
        q.iter().map(|&x| x as f32).collect(),
        k.iter().map(|&x| x as f32).collect(),
        v.iter().map(|&x| x as f32).collect(),
        w.iter().map(|&x| x as f32).collect(),
    );
    let (g32, t32) = attention_backward_v2(&plain, &layout, &heads, &q32, &k32, &v32, None, &w32).unwrap();
    let g32_v1 = attention_backward(&plain, &layout, &heads, &q32, &k32, &v32, None, &w32).unwrap();
    assert_eq!((&g32.dq, &g32.dk, &g32.dv), (&g32_v1.dq, &g32_v1.dk, &g32_v1.dv));
    assert_eq!(t32, ShawTableGrads::default());
    // Bad input keeps its status: d_o of the wrong length.
    assert_eq!(attention_backward_v2(&opts, &layout, &heads, &q, &k, &v, None, &w[1..]).err().unwrap().status, Status::InvalidArgument);
}

// ---- 0.9.0: RoPE handles, sliding windows, the logit softcap and sinks ----------------

// One sequence [s, h, d] by hand with a window (left, right; -1 unbounded), a softcap c
// (0: none) and sink logits z (one per query head): o, lse and dL/dz for L = sum(w * o),
// dz_h = -sum_i exp(z_h - lse_i) <w_i, o_i> (attention/descriptor.h's formulas).
#[allow(clippy::too_many_arguments)]
fn window_softcap_sinks_by_hand(
    q: &[f64],
    k: &[f64],
    v: &[f64],
    w: &[f64],
    (s, hq, hk, d): (usize, usize, usize, usize),
    causal: bool,
    (left, right): (i64, i64),
    cap: f64,
    z: &[f32],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut o = vec![0.0; q.len()];
    let mut lse = vec![0.0; s * hq];
    let mut dz = vec![0.0; hq];
    let scale = 1.0 / (d as f64).sqrt();
    for h in 0..hq {
        let kh = h / (hq / hk);
        for i in 0..s {
            let qi = &q[(i * hq + h) * d..][..d];
            let mut scores = Vec::new();
            for j in 0..s {
                let (pi, pj) = (i as i64, j as i64);
                if (causal && pj > pi) || (left >= 0 && pj < pi - left) || (right >= 0 && pj > pi + right) {
                    continue;
                }
                let kj = &k[(j * hk + kh) * d..][..d];
                let x = scale * qi.iter().zip(kj).map(|(a, b)| a * b).sum::<f64>();
                scores.push((j, if cap > 0.0 { cap * (x / cap).tanh() } else { x }));
            }
            let zh = z[h] as f64;
            let m = scores.iter().map(|x| x.1).fold(zh, f64::max);
            let total: f64 = scores.iter().map(|x| (x.1 - m).exp()).sum::<f64>() + (zh - m).exp();
            let l = m + total.ln();
            lse[i * hq + h] = l;
            let row = (i * hq + h) * d;
            for &(j, sc) in &scores {
                let p = (sc - l).exp();
                for t in 0..d {
                    o[row + t] += p * v[(j * hk + kh) * d + t];
                }
            }
            let dot: f64 = (0..d).map(|t| w[row + t] * o[row + t]).sum();
            dz[h] -= (zh - l).exp() * dot;
        }
    }
    (o, lse, dz)
}

#[test]
fn attention_window_softcap_and_sinks_match_the_formula() {
    let (s, hq, hk, d) = (9usize, 4usize, 2usize, 8usize);
    let mut rng = Rng(11);
    let q: Vec<f64> = rng.vec(s * hq * d).iter().map(|x| 3.0 * x).collect();
    let (k, v, w) = (rng.vec(s * hk * d), rng.vec(s * hk * d), rng.vec(s * hq * d));
    let z = [0.5f32, -2.0, 3.0, 1.25];
    let layout = AttentionLayout::Padded { batch: 1, seq_q: s, seq_k: s };
    let heads = AttentionHeads { heads_q: hq, heads_kv: hk, head_dim: d, head_dim_v: None };
    for &(causal, window, cap) in &[(true, (3i64, -1i64), 2.0), (false, (2, 1), 0.0), (false, (-1, 0), 5.0)] {
        let options = AttentionOptions { causal, window: Some(window), softcap: cap, sinks: Some(&z), ..Default::default() };
        let (o, lse) = attention_forward(&options, &layout, &heads, &q, &k, &v).unwrap();
        let (want_o, want_lse, want_dz) = window_softcap_sinks_by_hand(&q, &k, &v, &w, (s, hq, hk, d), causal, window, cap, &z);
        // float64 runs the exact reference: both double, short sums (~1e-15); 1e-12
        // fails for a window off by one key, a cap after the mask or a missing sink.
        assert!(max_abs_diff(&o, &want_o) < 1e-12, "{:?}", window);
        assert!(max_abs_diff(&lse, &want_lse) < 1e-12, "{:?}", window);
        let (_, p) = attention_backward_with_parameters(&options, &layout, &heads, &q, &k, &v, Some((&o, &lse)), &w).unwrap();
        assert!(max_abs_diff(p.sinks.as_ref().unwrap(), &want_dz) < 1e-12, "{:?}", window);
        // float32 kernels: float32 rounding of scores up to ~10 and 9-term sums stays
        // under 1e-4 on these O(1) values.
        let f = |x: &[f64]| x.iter().map(|&t| t as f32).collect::<Vec<f32>>();
        let (o32, _) = attention_forward(&options, &layout, &heads, &f(&q), &f(&k), &f(&v)).unwrap();
        let o32: Vec<f64> = o32.iter().map(|&t| t as f64).collect();
        assert!(max_abs_diff(&o32, &want_o) < 1e-4, "{:?}", window);
    }
    // Sinks of the wrong count and bad window bounds are errors.
    let bad = AttentionOptions { sinks: Some(&z[..3]), ..Default::default() };
    assert!(attention_forward(&bad, &layout, &heads, &q, &k, &v).is_err());
    let bad = AttentionOptions { window: Some((-2, 0)), ..Default::default() };
    assert!(attention_forward(&bad, &layout, &heads, &q, &k, &v).is_err());
    let bad = AttentionOptions { softcap: f64::NAN, ..Default::default() };
    assert!(attention_forward(&bad, &layout, &heads, &q, &k, &v).is_err());
}

#[test]
fn attention_with_a_rope_handle_equals_rope_then_attention() {
    // xPos scales q and k inversely: the handle rotates q in the query role and k in the
    // key role, as Rope::forward does with Tokens { key, .. }.
    let (s, h, d) = (6usize, 2usize, 8usize);
    let mut rng = Rng(12);
    let (q, k, v, w) = (rng.vec(s * h * d), rng.vec(s * h * d), rng.vec(s * h * d), rng.vec(s * h * d));
    let rope = Rope::new(&RopeOptions { xpos: Some(Xpos { gamma: 0.4, scale_base: 16.0, centre: 3 }), ..RopeOptions::new(d as i64) }).unwrap();
    let layout = AttentionLayout::Padded { batch: 1, seq_q: s, seq_k: s };
    let heads = AttentionHeads { heads_q: h, heads_kv: h, head_dim: d, head_dim_v: None };
    let fused = AttentionOptions { causal: true, rope: Some(&rope), ..Default::default() };
    let (o, _) = attention_forward(&fused, &layout, &heads, &q, &k, &v).unwrap();
    let shape = [1, s, h, d];
    let keys = Tokens { key: true, ..Tokens::bshd() };
    let (rq, rk) = (rope.forward(&Tokens::bshd(), &q, &shape).unwrap(), rope.forward(&keys, &k, &shape).unwrap());
    let want = attention_by_hand(&rq, &rk, &v, s, h, h, d, true, &|_, _, _| 0.0);
    // Both in double (the reference; the rotation's double table): 1e-12.
    assert!(max_abs_diff(&o, &want) < 1e-12);
    // The backward: dq = R_q^T dq' of the attention on the rotated rows.
    let g = attention_backward(&fused, &layout, &heads, &q, &k, &v, None, &w).unwrap();
    let plain = AttentionOptions { causal: true, ..Default::default() };
    let gr = attention_backward(&plain, &layout, &heads, &rq, &rk, &v, None, &w).unwrap();
    assert!(max_abs_diff(&g.dq, &rope.backward(&Tokens::bshd(), &gr.dq, &shape).unwrap()) < 1e-12);
    assert!(max_abs_diff(&g.dk, &rope.backward(&keys, &gr.dk, &shape).unwrap()) < 1e-12);
    // A handle with rope_dim as well is refused.
    let both = AttentionOptions { rope: Some(&rope), rope_dim: d as i64, ..Default::default() };
    assert!(attention_forward(&both, &layout, &heads, &q, &k, &v).is_err());
}

// ---- 0.9.0: SDPA's attn_mask, kv_lengths, paged KV caches -----------------------------

// Padded [b, s, h, d] by hand: scores q.k / sqrt(d) + add[b, h, i, j] (add broadcast
// from [1, h, sq, sk]; -inf masks), keys j < lens[b] only.
fn masked_by_hand(q: &[f64], k: &[f64], v: &[f64], dims: (usize, usize, usize, usize, usize, usize), add: &[f64], lens: &[usize]) -> Vec<f64> {
    let (b, sq, sk, hq, hk, d) = dims;
    let mut o = vec![0.0; q.len()];
    for bi in 0..b {
        for h in 0..hq {
            let g = h / (hq / hk);
            for i in 0..sq {
                let qi = ((bi * sq + i) * hq + h) * d;
                let s: Vec<f64> = (0..lens[bi])
                    .map(|j| {
                        let kj = ((bi * sk + j) * hk + g) * d;
                        (0..d).map(|e| q[qi + e] * k[kj + e]).sum::<f64>() / (d as f64).sqrt() + add[(h * sq + i) * sk + j]
                    })
                    .collect();
                let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                for (j, x) in s.iter().enumerate() {
                    let p = (x - m).exp() / z;
                    let vj = ((bi * sk + j) * hk + g) * d;
                    for e in 0..d {
                        o[qi + e] += p * v[vj + e];
                    }
                }
            }
        }
    }
    o
}

#[test]
fn attention_mask_kv_lengths_and_pages_match() {
    let (b, sq, sk, hq, hk, d) = (2usize, 3usize, 8usize, 2usize, 1usize, 4usize);
    let mut rng = Rng(21);
    let (q, k, v) = (rng.vec(b * sq * hq * d), rng.vec(b * sk * hk * d), rng.vec(b * sk * hk * d));
    let heads = AttentionHeads { heads_q: hq, heads_kv: hk, head_dim: d, head_dim_v: None };
    let layout = AttentionLayout::Padded { batch: b, seq_q: sq, seq_k: sk };
    // [1, hq, sq, sk]: every third key masked (key 0 always allowed), values in (-1, 1).
    let allowed: Vec<u8> = (0..hq * sq * sk).map(|n| (n % sk == 0 || n % 3 != 1) as u8).collect();
    let add: Vec<f32> = (0..hq * sq * sk).map(|n| if allowed[n] == 1 { rng.next() as f32 } else { f32::NEG_INFINITY }).collect();
    let lens = [5i64, 8];
    let ulens = [5usize, 8];
    let shape = [1, hq, sq, sk];
    let options = AttentionOptions { attn_mask: Some(AttnMask { values: MaskValues::Additive(&add), shape }), kv_lengths: Some(&lens), ..Default::default() };
    let (o, _) = attention_forward(&options, &layout, &heads, &q, &k, &v).unwrap();
    let add64: Vec<f64> = add.iter().map(|&x| x as f64).collect();
    let want = masked_by_hand(&q, &k, &v, (b, sq, sk, hq, hk, d), &add64, &ulens);
    // float64 runs the exact reference: double throughout, <= 8-term sums (~1e-15).
    assert!(max_abs_diff(&o, &want) < 1e-12);
    // The boolean mask equals the additive one of 0 / -inf (1e-12: the same reference).
    let zero_inf: Vec<f64> = allowed.iter().map(|&a| if a == 1 { 0.0 } else { f64::NEG_INFINITY }).collect();
    let boolean = AttentionOptions { attn_mask: Some(AttnMask { values: MaskValues::Allowed(&allowed), shape }), kv_lengths: Some(&lens), ..Default::default() };
    let (ob, _) = attention_forward(&boolean, &layout, &heads, &q, &k, &v).unwrap();
    assert!(max_abs_diff(&ob, &masked_by_hand(&q, &k, &v, (b, sq, sk, hq, hk, d), &zero_inf, &ulens)) < 1e-12);
    // The same keys as a paged cache: pages of 4 tokens, shuffled into a pool of 5 with
    // an unused page of NaN; equal to the contiguous call (the reference reads the same
    // values in the same order: 1e-12).
    let page = 4usize;
    let table = [3i64, 0, 4, 1]; // [b, 2]
    let row = page * hk * d;
    let (mut kp, mut vp) = (vec![f64::NAN; 5 * row], vec![f64::NAN; 5 * row]);
    for (n, &p) in table.iter().enumerate() {
        let p = p as usize;
        kp[p * row..(p + 1) * row].copy_from_slice(&k[n * row..(n + 1) * row]);
        vp[p * row..(p + 1) * row].copy_from_slice(&v[n * row..(n + 1) * row]);
    }
    let paged = AttentionLayout::Paged { batch: b, seq_q: sq, num_pages: 5, page_size: page, block_table: &table };
    let (op, _) = attention_forward(&options, &paged, &heads, &q, &kp, &vp).unwrap();
    assert!(max_abs_diff(&op, &o) < 1e-12);
    // Bad input: a mask of the wrong extent, a length past seq_k, a page outside the pool,
    // the backward of a paged cache.
    let bad = AttentionOptions { attn_mask: Some(AttnMask { values: MaskValues::Allowed(&allowed), shape: [1, hq, sk, sq] }), ..Default::default() };
    assert!(attention_forward(&bad, &layout, &heads, &q, &k, &v).is_err());
    let bad = AttentionOptions { kv_lengths: Some(&[9, 1]), ..Default::default() };
    assert!(attention_forward(&bad, &layout, &heads, &q, &k, &v).is_err());
    let far = [3i64, 0, 4, 5];
    let bad_pages = AttentionLayout::Paged { batch: b, seq_q: sq, num_pages: 5, page_size: page, block_table: &far };
    assert!(attention_forward(&AttentionOptions::default(), &bad_pages, &heads, &q, &kp, &vp).is_err());
    assert!(attention_backward(&AttentionOptions::default(), &paged, &heads, &q, &kp, &vp, None, &q).is_err());
}

// ---- 0.10.0: the algebraic encodings' generator gradients ------------------------------

#[test]
fn attention_algebraic_generator_gradients_match_finite_differences() {
    // ParameterGrads::{algebraic, algebraic_tree, algebraic_grid} from
    // attention_backward_with_parameters, against central differences of L = <w, o> in
    // float64 (the exact reference) in the skew directions S_ij += h, S_ji -= h (the
    // generators must stay skew), whose derivative is X_ij - X_ji for the entrywise
    // gradient X. Step 1e-6: truncation ~1e-12, rounding ~1e-10 on O(1) losses: 1e-7
    // absolute. GQA: 4 query heads over 2, so the gradients sum over heads.
    let (s, d) = (5usize, 6usize);
    let mut rng = Rng(57);
    let (q, k, v, w) = (rng.vec(s * 4 * d), rng.vec(s * 2 * d), rng.vec(s * 2 * d), rng.vec(s * 4 * d));
    let layout = AttentionLayout::Padded { batch: 1, seq_q: s, seq_k: s };
    let heads = AttentionHeads { heads_q: 4, heads_kv: 2, head_dim: d, head_dim_v: None };
    let addresses: Vec<Vec<i64>> = (0..s).map(|t| (0..t % 3).map(|i| ((t + i) % 2) as i64).collect()).collect();
    let tree_refs: Vec<&[i64]> = addresses.iter().map(|a| a.as_slice()).collect();
    let coords: Vec<i64> = (0..s * 2).map(|i| (i as i64 * 5) % 7 - 3).collect();
    let loss = |o: &AttentionOptions| -> f64 {
        let out = attention_forward(o, &layout, &heads, &q, &k, &v).unwrap().0;
        out.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>()
    };
    // Each generator's entries (i < j) moved in the skew direction.
    let check = |got: &[Matrix], gens: &[Matrix], options: &dyn Fn(&[Matrix]) -> f64| {
        assert!(got.iter().flat_map(|m| m.data.iter()).any(|x| x.abs() > 1e-3));
        for c in 0..gens.len() {
            let m = gens[c].rows;
            for i in 0..m {
                for j in i + 1..m {
                    let moved = |h: f64| {
                        let mut g = gens.to_vec();
                        g[c].data[i * m + j] += h;
                        g[c].data[j * m + i] -= h;
                        options(&g)
                    };
                    let fd = (moved(1e-6) - moved(-1e-6)) / 2e-6;
                    let x = got[c].at(i, j) - got[c].at(j, i);
                    assert!((x - fd).abs() < 1e-7, "generator {} ({}, {}): {} vs {}", c, i, j, x, fd);
                }
            }
        }
    };
    // A sequence: W^p = exp(p S).
    let seq = [skew(&mut rng, d, 0.3)];
    let handle = AlgebraicSequence::new(&seq[0]).unwrap();
    let opts = AttentionOptions { causal: true, algebraic: Some(&handle), ..Default::default() };
    let (_, p) = attention_backward_with_parameters(&opts, &layout, &heads, &q, &k, &v, None, &w).unwrap();
    assert!(p.algebraic_tree.is_none() && p.algebraic_grid.is_none());
    let g = p.algebraic.unwrap();
    assert_eq!((g.rows, g.cols), (d, d));
    check(&[g], &seq, &|gs: &[Matrix]| {
        let h = AlgebraicSequence::new(&gs[0]).unwrap();
        loss(&AttentionOptions { causal: true, algebraic: Some(&h), ..Default::default() })
    });
    // A binary tree's branch generators.
    let tree = [skew(&mut rng, d, 0.3), skew(&mut rng, d, 0.3)];
    let opts = AttentionOptions { causal: true, algebraic_tree: Some(&tree), q_tree: Some(&tree_refs), k_tree: Some(&tree_refs), ..Default::default() };
    let (_, p) = attention_backward_with_parameters(&opts, &layout, &heads, &q, &k, &v, None, &w).unwrap();
    assert!(p.algebraic.is_none());
    let g = p.algebraic_tree.unwrap();
    assert_eq!(g.len(), 2);
    check(&g, &tree, &|gs: &[Matrix]| {
        loss(&AttentionOptions { causal: true, algebraic_tree: Some(gs), q_tree: Some(&tree_refs), k_tree: Some(&tree_refs), ..Default::default() })
    });
    // A 2D grid of two 3 x 3 axes.
    let grid = [skew(&mut rng, 3, 0.3), skew(&mut rng, 3, 0.3)];
    let opts = AttentionOptions { algebraic_grid: Some(&grid), q_axes: Some(&coords), k_axes: Some(&coords), ..Default::default() };
    let (_, p) = attention_backward_with_parameters(&opts, &layout, &heads, &q, &k, &v, None, &w).unwrap();
    let g = p.algebraic_grid.unwrap();
    assert_eq!((g.len(), g[0].rows), (2, 3));
    check(&g, &grid, &|gs: &[Matrix]| {
        loss(&AttentionOptions { algebraic_grid: Some(gs), q_axes: Some(&coords), k_axes: Some(&coords), ..Default::default() })
    });
}

// Rows of `from` values widened to `to` with zeros (to >= from), or cut to their first
// `to` values (to < from).
fn resize_rows(x: &[f64], from: usize, to: usize) -> Vec<f64> {
    x.chunks(from).flat_map(|r| (0..to).map(move |i| if i < from { r[i] } else { 0.0 })).collect()
}

// v's head size apart from q's and k's (head_dim_v, C ABI 0.10.0; DeepSeek's MLA), both
// ways round: d 24 / dv 16 and d 16 / dv 24, GQA and Shaw tables (the value table's rows
// of dv). The call equals the same call with the narrower side zero-padded to the wider
// (head_dim_v None): zero value columns give zero o and dv columns, zero q and k
// components leave every dot product (only + 0.0 terms), so in float64 (the exact
// reference) the outputs agree bit for bit. The scale is explicit: its default follows
// head_dim, which the padding changes in the second case.
#[test]
fn attention_with_a_value_head_size_of_its_own() {
    // Shaw et al.'s clipping distance 2 (opts below): tables of 5 rows.
    let (s, hq, hk, rows) = (6usize, 4usize, 2usize, 5usize);
    let layout = AttentionLayout::Padded { batch: 1, seq_q: s, seq_k: s };
    for (seed, d, dv) in [(41u64, 24usize, 16usize), (42, 16, 24)] {
        let w = d.max(dv);
        let mut rng = Rng(seed);
        let (q, k, v, d_o) = (rng.vec(s * hq * d), rng.vec(s * hk * d), rng.vec(s * hk * dv), rng.vec(s * hq * dv));
        let (ak, av) = (Matrix::new(rows, d, rng.vec(rows * d)).unwrap(), Matrix::new(rows, dv, rng.vec(rows * dv)).unwrap());
        let heads = AttentionHeads::new(hq, hk, d).with_head_dim_v(dv);
        assert_eq!((heads.head_dim_v, heads.value_dim()), (Some(dv), dv));
        let wide = AttentionHeads::new(hq, hk, w);
        let (qw, kw, vw, dow) = (resize_rows(&q, d, w), resize_rows(&k, d, w), resize_rows(&v, dv, w), resize_rows(&d_o, dv, w));
        let akw = Matrix::new(rows, w, resize_rows(&ak.data, d, w)).unwrap();
        let avw = Matrix::new(rows, w, resize_rows(&av.data, dv, w)).unwrap();
        fn opts<'a>(ak: &'a Matrix, av: &'a Matrix) -> AttentionOptions<'a> {
            AttentionOptions { causal: true, softmax_scale: 0.2, shaw_max_distance: 2, shaw_key_table: Some(ak), shaw_value_table: Some(av), ..Default::default() }
        }
        let (o, lse) = attention_forward(&opts(&ak, &av), &layout, &heads, &q, &k, &v).unwrap();
        let (ow, lsew) = attention_forward(&opts(&akw, &avw), &layout, &wide, &qw, &kw, &vw).unwrap();
        assert_eq!(o.len(), s * hq * dv);
        assert_eq!(resize_rows(&ow, w, dv), o, "d {} dv {}", d, dv);
        assert_eq!(resize_rows(&o, dv, w), ow, "o's padded columns are zero");
        assert_eq!(lse, lsew);
        // The three backward entry points, with and without the forward's o and lse.
        let g = attention_backward(&opts(&ak, &av), &layout, &heads, &q, &k, &v, Some((&o, &lse)), &d_o).unwrap();
        let gw = attention_backward(&opts(&akw, &avw), &layout, &wide, &qw, &kw, &vw, None, &dow).unwrap();
        assert_eq!((g.dq.len(), g.dk.len(), g.dv.len()), (q.len(), k.len(), v.len()));
        assert_eq!(resize_rows(&gw.dq, w, d), g.dq);
        assert_eq!(resize_rows(&gw.dk, w, d), g.dk);
        assert_eq!(resize_rows(&gw.dv, w, dv), g.dv);
        let (g2, t) = attention_backward_v2(&opts(&ak, &av), &layout, &heads, &q, &k, &v, None, &d_o).unwrap();
        let (_, tw) = attention_backward_v2(&opts(&akw, &avw), &layout, &wide, &qw, &kw, &vw, None, &dow).unwrap();
        assert_eq!((&g2.dq, &g2.dk, &g2.dv), (&g.dq, &g.dk, &g.dv));
        let (tk, tv) = (t.key_table.unwrap(), t.value_table.unwrap());
        assert_eq!((tk.rows, tk.cols, tv.rows, tv.cols), (rows, d, rows, dv));
        assert_eq!(resize_rows(&tw.key_table.unwrap().data, w, d), tk.data);
        assert_eq!(resize_rows(&tw.value_table.unwrap().data, w, dv), tv.data);
        let (g3, p) = attention_backward_with_parameters(&opts(&ak, &av), &layout, &heads, &q, &k, &v, None, &d_o).unwrap();
        assert_eq!((&g3.dq, &g3.dk, &g3.dv), (&g.dq, &g.dk, &g.dv));
        assert_eq!((p.shaw_key_table.unwrap().data, p.shaw_value_table.unwrap().data), (tk.data, tv.data));

        // float32 (the optimised kernels) against float64, without the Shaw tables: values
        // below 1 in magnitude, sums of at most 24 products and softmaxes over at most 6
        // keys, so float32 rounding stays under 1e-5 for o and 1e-4 for the gradients
        // (whose sums run over the keys' and the grouped heads' terms as well).
        let plain = AttentionOptions { causal: true, softmax_scale: 0.2, ..Default::default() };
        let f = |x: &[f64]| x.iter().map(|&t| t as f32).collect::<Vec<f32>>();
        let up = |x: &[f32]| x.iter().map(|&t| t as f64).collect::<Vec<f64>>();
        let (o64, _) = attention_forward(&plain, &layout, &heads, &q, &k, &v).unwrap();
        let (o32, _) = attention_forward(&plain, &layout, &heads, &f(&q), &f(&k), &f(&v)).unwrap();
        assert!(max_abs_diff(&up(&o32), &o64) < 1e-5, "d {} dv {}", d, dv);
        let g64 = attention_backward(&plain, &layout, &heads, &q, &k, &v, None, &d_o).unwrap();
        let g32 = attention_backward(&plain, &layout, &heads, &f(&q), &f(&k), &f(&v), None, &f(&d_o)).unwrap();
        for (a, b) in [(&g32.dq, &g64.dq), (&g32.dk, &g64.dk), (&g32.dv, &g64.dv)] {
            assert!(max_abs_diff(&up(a), b) < 1e-4, "d {} dv {}", d, dv);
        }
        // A 16-bit cache (bfloat16 patterns of values on a grid of 1/32 below 4, exact in
        // bfloat16 and float32) against the float32 call: summation order only, 1e-5.
        let grid = |x: &[f64]| x.iter().map(|&t| ((t * 3.5 * 32.0).round() / 32.0) as f32).collect::<Vec<f32>>();
        let (kg, vg) = (grid(&k), grid(&v));
        let bf16 = |x: &[f32]| x.iter().map(|t| (t.to_bits() >> 16) as u16).collect::<Vec<u16>>();
        let (want, _) = attention_forward(&plain, &layout, &heads, &f(&q), &kg, &vg).unwrap();
        let (o16, _) = attention_forward_kv16(&plain, &layout, &heads, &f(&q), &bf16(&kg), &bf16(&vg), KvCache::BFloat16).unwrap();
        assert_eq!(o16.len(), s * hq * dv);
        assert!(max_abs_diff(&up(&o16), &up(&want)) < 1e-5);

        // v, d_o and o of head_dim rows are refused before C is called; a value table of
        // head_dim columns by the library.
        let v_d = resize_rows(&v, dv, d);
        let e = attention_forward(&plain, &layout, &heads, &q, &k, &v_d).err().unwrap();
        assert!(e.message.contains("v has"), "{}", e.message);
        assert!(attention_forward_kv16(&plain, &layout, &heads, &f(&q), &bf16(&kg), &bf16(&f(&v_d)), KvCache::BFloat16).is_err());
        let e = attention_backward(&plain, &layout, &heads, &q, &k, &v_d, None, &d_o).err().unwrap();
        assert!(e.message.contains("v has"), "{}", e.message);
        let e = attention_backward(&plain, &layout, &heads, &q, &k, &v, None, &q).err().unwrap();
        assert!(e.message.contains("d_o has"), "{}", e.message);
        let e = attention_backward_v2(&plain, &layout, &heads, &q, &k, &v, Some((&q, &lse)), &d_o).err().unwrap();
        assert!(e.message.contains("o has"), "{}", e.message);
        let bad = opts(&ak, &ak);
        let e = attention_forward(&bad, &layout, &heads, &q, &k, &v).err().unwrap();
        assert_eq!(e.status, Status::InvalidArgument);
        assert!(e.message.contains("shaw_value_table"), "{}", e.message);
    }
}

#[test]
fn parameter_gradients_refuse_inconsistent_matrices_before_sizing() {
    // A Shaw table whose public fields claim 2^33 x 2^33 with no data, and an algebraic
    // tree generator of 2^32 x 2^32: an Err naming the matrix, before any buffer is sized
    // by them (a panic from Matrix::zeros, or an 8 TiB allocation, before).
    let (s, h, d) = (2usize, 1usize, 4usize);
    let mut rng = Rng(5);
    let (q, k, v, w) = (rng.vec(s * h * d), rng.vec(s * h * d), rng.vec(s * h * d), rng.vec(s * h * d));
    let layout = AttentionLayout::Padded { batch: 1, seq_q: s, seq_k: s };
    let heads = AttentionHeads { heads_q: h, heads_kv: h, head_dim: d, head_dim_v: None };
    let huge = Matrix { rows: 1 << 33, cols: 1 << 33, data: Vec::new() };
    let options = AttentionOptions { shaw_max_distance: 1, shaw_key_table: Some(&huge), ..Default::default() };
    assert!(attention_backward_with_parameters(&options, &layout, &heads, &q, &k, &v, None, &w).is_err());
    let big = [Matrix { rows: 1 << 32, cols: 1 << 32, data: Vec::new() }];
    let options = AttentionOptions { algebraic_tree: Some(&big), ..Default::default() };
    assert!(attention_backward_with_parameters(&options, &layout, &heads, &q, &k, &v, None, &w).is_err());
}
