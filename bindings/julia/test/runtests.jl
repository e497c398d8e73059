# The Julia bindings against direct formulas, and bad input as GPEError.
# Run: GPE_LIBRARY=/path/to/libgpe.so julia --startup-file=no test/runtests.jl
using LinearAlgebra, Random, Test

include(joinpath(@__DIR__, "..", "GroupPE.jl"))
using .GroupPE

Random.seed!(20261123)

@testset "GroupPE" begin
    @testset "version" begin
        n, s = gpe_version()
        @test s == "$(div(n, 10000)).$(div(n, 100) % 100).$(n % 100)"
    end

    @testset "RoPE planes match the rotation" begin
        rep = so_rep_planes(8; base=100.0)
        @test so_rep_dim(rep) == 8
        positions = Int64[0, 5, -17, 1234]
        x = randn(8, 4)
        y = so_rep_apply(rep, positions, x)
        for (n, p) in enumerate(positions), i in 0:3
            a = p * 100.0^(-2i / 8)
            x1, x2 = x[2i+1, n], x[2i+2, n]
            # |a| < 1300 rad: the reference's own angle error is ~1.5e-13; 1e-11 covers it.
            @test abs(y[2i+1, n] - (x1 * cos(a) - x2 * sin(a))) < 1e-11
            @test abs(y[2i+2, n] - (x1 * sin(a) + x2 * cos(a))) < 1e-11
        end
        # apply is the matrix times the column (1e-12 on O(1) sums of 8 terms).
        @test maximum(abs.(so_rep_matrix(rep, 1234) * x[:, 4] - y[:, 4])) < 1e-12
        # A strided view (every other column) is described by strides, not copied.
        xv = view(randn(8, 8), :, 1:2:8)
        @test so_rep_apply(rep, positions, xv) ≈ so_rep_apply(rep, positions, Matrix(xv)) atol=0
    end

    @testset "rank-2 is an orthogonal homomorphism" begin
        rep = so_rep_rank2(randn(6), randn(6), 0.7)
        mp, mq, mpq = so_rep_matrix(rep, 3), so_rep_matrix(rep, -11), so_rep_matrix(rep, -8)
        @test maximum(abs.(mp * mq - mpq)) < 1e-12
        @test maximum(abs.(mp * mp' - I)) < 1e-12
    end

    @testset "sinusoidal" begin
        e = sinusoidal_encode(Int64[0, 1, 50], 6)
        for (n, p) in enumerate([0, 1, 50]), i in 0:2
            a = p * 10000.0^(-2i / 6)
            @test abs(e[2i+1, n] - sin(a)) < 1e-13
            @test abs(e[2i+2, n] - cos(a)) < 1e-13
        end
    end

    @testset "learned positions" begin
        table = randn(3, 5)
        t = LearnedPositions(table)
        @test learned_shape(t) == (5, 3)
        @test learned_lookup(t, Int64[4, 0]) == table[:, [5, 1]]
        g = zeros(3, 5)
        learned_backward!(g, t, Int64[4, 0, 4], [1.0 4 10; 2 5 20; 3 6 30])
        @test g[:, 5] == [11.0, 22, 33]
        @test_throws GPEError learned_lookup(t, Int64[5])
    end

    @testset "GRAPE-M backward vs central differences" begin
        dim, m = 5, 2
        a, b, ω = randn(dim, m), randn(dim, m), [0.4, -0.3]
        positions = Int64[2, -3, 7]
        x, c = randn(dim, 3), randn(dim, 3)
        loss(a, b, ω) = sum(grape_m_apply(GrapeM(a, b, ω), positions, x) .* c)
        g = GrapeM(a, b, ω)
        @test grape_m_shape(g) == (dim, m)
        gx, ga, gb, gω = grape_m_backward(g, positions, x, c)
        # h = 1e-6: O(h^2) truncation, O(eps / h) ≈ 1e-10 rounding; 1e-7 leaves margin.
        h = 1e-6
        for k in 1:m
            e = zeros(m); e[k] = h
            @test abs(gω[k] - (loss(a, b, ω + e) - loss(a, b, ω - e)) / 2h) < 1e-7
            for j in 1:dim
                E = zeros(dim, m); E[j, k] = h
                @test abs(ga[j, k] - (loss(a + E, b, ω) - loss(a - E, b, ω)) / 2h) < 1e-7
                @test abs(gb[j, k] - (loss(a, b + E, ω) - loss(a, b - E, ω)) / 2h) < 1e-7
            end
        end
        for (n, p) in enumerate(positions)
            @test maximum(abs.(gx[:, n] - grape_m_matrix(g, p)' * c[:, n])) < 1e-12
        end
    end

    @testset "algebraic" begin
        r = randn(4, 4)
        s = 0.3 * (r - r')
        seq = AlgebraicSequence(s)
        @test algebraic_dim(seq) == 4
        # W^p = exp(p S), against Julia's own matrix exponential (1e-12 on O(1) entries).
        @test maximum(abs.(algebraic_matrix(seq, 3) - exp(3 * s))) < 1e-12
        x = randn(4, 1)
        @test maximum(abs.(algebraic_apply(seq, Int64[3], x) - exp(3 * s) * x)) < 1e-12
    end

    @testset "Shaw scores" begin
        q, table = randn(4, 3), randn(4, 5)   # d = 4, Lq = 3, k = 2
        qp, kp = Int64[0, 10, -4], Int64[1, 2, 30, -9]
        sc = shaw_key_scores(q, table, qp, kp)
        for a in 1:3, b in 1:4
            r = clamp(kp[b] - qp[a], -2, 2) + 3
            @test abs(sc[a, b] - dot(q[:, a], table[:, r])) < 1e-14
        end
        gq, gl = shaw_key_scores_backward(q, table, qp, kp, ones(3, 4))
        @test size(gq) == size(q) && size(gl) == size(table)
    end

    @testset "shifted basis, stable rank, fit and predict" begin
        coords = collect(0:11) ./ 12
        psi = shifted_basis_encode(coords; num_shifts=6, width=0.2)
        for n in 1:12, i in 1:6
            u = (i - 1) / 6 - coords[n]
            @test abs(psi[n, i] - exp(-u^2 / (2 * 0.04))) < 1e-15
        end
        @test abs(stable_rank(Matrix(1.0I, 3, 3)) - 3) < 1e-12
        w_true = randn(6, 6)
        image = psi * w_true * psi'
        w = fit_separable_2d(psi, psi, image)
        # Normal equations of a 12 × 6 Gaussian factor: 1e-8.
        @test maximum(abs.(predict_separable_2d(psi, psi, w) - image)) < 1e-8
    end

    # ---- Since 0.4.0 ----
    @testset "coordinate encoders and their VJP" begin
        b = randn(3, 2)
        e = fourier_features_from_frequencies(b)
        @test encoder_dims(e) == (2, 6)
        w = angular_frequencies(e)
        @test maximum(abs.(w - 2π * b)) < 1e-15          # one rounding of 2π b
        x = randn(2, 4)
        f = coordinate_encode(e, x)
        # [cos(w x); sin(w x)] with |angles| < 40: a few ulps of cos / sin.
        @test maximum(abs.(f - vcat(cos.(w * x), sin.(w * x)))) < 1e-13
        g = randn(6, 4)
        gx = coordinate_backward(e, x, g)
        # Central differences, h = 1e-5: truncation ~h² |w|³ / 6 < 1e-7.
        h = 1e-5
        for n in 1:4, d in 1:2
            xp, xm = copy(x), copy(x)
            xp[d, n] += h
            xm[d, n] -= h
            num = sum(g .* (coordinate_encode(e, xp) - coordinate_encode(e, xm))) / 2h
            @test abs(num - gx[d, n]) < 1e-6
        end
        nerf = fourier_features(:nerf, 2, 3)
        @test angular_frequencies(nerf)[1:3, 1] == [π, 2π, 4π]
        sh = spherical_harmonics(1)
        p = [1.0, 2.0, 2.0]
        c = sqrt(3 / 4π)
        # Y_00, Y_1-1 ∝ y, Y_10 ∝ z, Y_11 ∝ x (no Condon-Shortley phase), |p| = 3.
        @test maximum(abs.(coordinate_encode(sh, reshape(p, 3, 1))[:, 1] - [1 / sqrt(4π), c * 2 / 3, c * 2 / 3, c / 3])) < 1e-15
        enc = shifted_encoder(:complex, [(kind=:gaussian, num_shifts=3, width=0.3, lo=0.0, hi=1.0),
                                         (kind=:gaussian, num_shifts=2, width=0.5, lo=0.0, hi=1.0)])
        @test encoder_dims(enc) == (2, 6)
        so2 = so2_bessel(Int64[0, 2], [1.5, 0.7], Int64[1, 3])
        @test so2_bessel_terms(so2) == (Int64[0, 2], [1.5, 0.7], Int64[1, 3])
        @test_throws GPEError fourier_features(:txt, 3, 4)
    end

    @testset "Bessel, Laplacian, analysis" begin
        # J_m by its power series (DLMF 10.2.2): good to ~2e-12 for x ≤ 12.
        series(m, x) = sum((-1)^s * (x / 2)^(2s + m) / (factorial(big(s)) * factorial(big(s + m))) for s in 0:60)
        xs = collect(0:0.5:12)
        for m in (0, 1, 5)
            @test maximum(abs.(bessel_j(m, xs) - Float64.(series.(m, xs)))) < 1e-11
        end
        n = 6
        vals, vecs = laplacian_eigenvectors(n, [(i, i + 1) for i in 0:n-2], 4)
        # Path graph: λ_k = 2 - 2 cos(π k / n) (dense eigensolver: 1e-12).
        @test maximum(abs.(vals - [2 - 2cos(π * k / n) for k in 0:3])) < 1e-12
        L = zeros(n, n)
        for i in 1:n-1
            L[i, i] += 1; L[i+1, i+1] += 1; L[i, i+1] -= 1; L[i+1, i] -= 1
        end
        @test maximum(abs.(L * vecs - vecs * Diagonal(vals))) < 1e-12
        f = randn(3, 4)
        @test maximum(abs.(embedded_distance_matrix(f, 0.25) - 0.25 * f' * f)) < 1e-15
        @test abs(embedder_distance(:gaussian, 0.05, 0.1) - sqrt(π) * 0.05 * exp(-1)) < 1e-15
        @test abs(embedder_stable_rank(:rectangle, 0.1, 1000) - 10) < 1e-12
        @test abs(condition_number([3.0 0; 0 0.5; 0 0]) - 6) < 1e-13
    end

    @testset "3D and blended fits" begin
        p0, p1, p2 = randn(5, 3), randn(4, 2), randn(6, 3)
        w = randn(3, 2, 3)
        v = [sum(w[i, j, l] * p0[a, i] * p1[b, j] * p2[c, l] for i in 1:3, j in 1:2, l in 1:3)
             for a in 1:5, b in 1:4, c in 1:6]
        @test maximum(abs.(predict_separable_3d(p0, p1, p2, w) - v)) < 1e-13
        # Exact data, full-rank random factors: W back to ~cond² eps; 1e-9 margin.
        @test maximum(abs.(fit_separable_3d(p0, p1, p2, v) - w)) < 1e-9
        axis = [(kind=:gaussian, num_shifts=4, width=0.35, lo=0.0, hi=1.0)]
        ex, ey = shifted_encoder(:simple, axis), shifted_encoder(:simple, axis)
        grid = collect(0:8) ./ 8
        wt = randn(4, 4)
        pts = rand(2, 60)
        vals = predict_blended_2d(ex, ey, grid, grid, pts, wt)
        wf, its, rms = fit_blended_2d(ex, ey, grid, grid, pts, vals; max_iterations=2000, lambda=0.0, tolerance=1e-12)
        # A model in the search space: the residual is CGLS's (1e-6 of the data's scale).
        @test rms < 1e-6 * sqrt(sum(abs2, vals) / 60)
    end

    @testset "algebraic trees, grids, periodic, locality" begin
        r1, r2 = randn(3, 3), randn(3, 3)
        t = AlgebraicTree([r1 - r1', r2 - r2'])
        @test algebraic_tree_shape(t) == (3, 2)
        # ρ(0, 1) = W_0 W_1 = exp(S_0) exp(S_1) (Kogkalidis et al. sec. 3.2).
        @test maximum(abs.(algebraic_tree_matrix(t, Int64[0, 1]) - exp(r1 - r1') * exp(r2 - r2'))) < 1e-13
        x = randn(3, 2)
        y = algebraic_tree_apply(t, [Int64[0, 1], Int64[]], x)
        @test maximum(abs.(y[:, 1] - algebraic_tree_matrix(t, Int64[0, 1]) * x[:, 1])) < 1e-14
        @test y[:, 2] == x[:, 2]
        gx, gs = algebraic_tree_backward(t, [Int64[0, 1], Int64[]], x, ones(3, 2))
        @test size(gs) == (3, 3, 2)
        # Every node of depth <= 2 in level order (root; 0, 1; 00, 01, 10, 11): each the
        # product ρ(address) (1e-12: one product per node from the previous level against
        # the direct path, orthogonal factors, so rounding stays near 1e-15).
        nodes = algebraic_tree_node_matrices(t, 2)
        @test size(nodes) == (3, 3, 7)
        order = [Int64[], Int64[0], Int64[1], Int64[0, 0], Int64[0, 1], Int64[1, 0], Int64[1, 1]]
        for (n, addr) in enumerate(order)
            @test maximum(abs.(nodes[:, :, n] - algebraic_tree_matrix(t, addr))) < 1e-12
        end
        @test_throws GPEError algebraic_tree_node_matrices(t, -1)
        s1, s2 = randn(2, 2), randn(3, 3)
        g = AlgebraicGrid([s1 - s1', s2 - s2'])
        @test algebraic_grid_shape(g) == (5, 2)
        pos = reshape(Int64[3, -2], 2, 1)
        xg = randn(5, 1)
        blk = cat(exp(3 * (s1 - s1')), exp(-2 * (s2 - s2')); dims=(1, 2))
        @test maximum(abs.(algebraic_grid_apply(g, pos, xg) - blk * xg)) < 1e-13
        xp = randn(4, 2)
        yp = algebraic_periodic_apply(12, Int64[1, 5], Int64[7, 19], xp)
        @test yp[:, 1] == yp[:, 2]                        # 19 = 7 + period
        a = 2π * mod(5 * 7, 12) / 12
        @test abs(yp[3, 1] - (xp[3, 1] * cos(a) - xp[4, 1] * sin(a))) < 1e-15
        sc = ones(2, 3)
        locality_scale!(sc, 0.5, Int64[0, 4], Int64[0, 1, 7])
        @test sc == [1 0.5 0.5^7; 0.5^4 0.5^3 0.5^3]
    end

    @testset "Shaw values and Transformer-XL" begin
        P, table = rand(3, 4), randn(2, 5)   # dv = 2, k = 2
        qp, kp = Int64[0, 3, 7], Int64[0, 1, 5, 6]
        out = shaw_value_output(P, table, qp, kp)
        for a in 1:3
            want = sum(P[a, b] * table[:, clamp(kp[b] - qp[a], -2, 2) + 3] for b in 1:4)
            @test maximum(abs.(out[:, a] - want)) < 1e-15
        end
        q, k, w_r, u, v = randn(4, 2), randn(4, 3), randn(4, 6), randn(4), randn(4)
        qp2, kp2 = Int64[5, 9], Int64[0, 4, 9]
        terms = transformer_xl_score_terms(q, k, qp2, kp2, w_r, u, v)
        for a in 1:2, b in 1:3
            R = sinusoidal_encode(Int64[qp2[a] - kp2[b]], 6)[:, 1]
            want = dot(q[:, a], w_r * R) + dot(u, k[:, b]) + dot(v, w_r * R)
            @test abs(terms[a, b] - want) < 1e-14
        end
        gr = transformer_xl_score_terms_backward(q, k, qp2, kp2, w_r, u, v, ones(2, 3))
        # The terms are linear in u: dL/du = Σ_b k[:, b] per query row.
        @test maximum(abs.(gr.u - 2 * vec(sum(k; dims=2)))) < 1e-14
    end

    @testset "RoPE, biases, attention" begin
        r = Rope(8; pairing=:interleaved, base=100.0)
        @test rope_shape(r) == (8, 8, 1)
        θ, m = rope_frequencies(r)
        @test maximum(abs.(θ - [100.0^(-2i / 8) for i in 0:3])) < 1e-15 && m == 1.0
        x = randn(8, 2, 3, 1)                      # head_dim × heads × seq × batch (bshd)
        y = rope_forward(r, x)
        for s in 1:3, h in 1:2, i in 0:3
            a = (s - 1) * θ[i+1]
            x1, x2 = x[2i+1, h, s, 1], x[2i+2, h, s, 1]
            # |a| < 3: cos / sin of one angle, one rounding each.
            @test abs(y[2i+1, h, s, 1] - (x1 * cos(a) - x2 * sin(a))) < 1e-15
            @test abs(y[2i+2, h, s, 1] - (x1 * sin(a) + x2 * cos(a))) < 1e-15
        end
        @test maximum(abs.(rope_backward(r, y) - x)) < 1e-15
        p = published_schedule(:llama3)
        @test (p.factor, p.low_freq_factor, p.high_freq_factor, p.original_max_position) == (8.0, 1.0, 4.0, 8192)
        @test rope_shape(Rope(16; base=500000.0, p...)) == (16, 16, 1)

        b = bias_alibi(2; slopes=[0.5, 0.25])
        # Causal ALiBi on keys j <= i: -m_h (i - j), exact for power-of-two slopes.
        tile = bias_fill_tile(b, 1, Int64[3, 5], Int64[0, 2, 3])
        @test tile == [-0.25 * (i - j) for i in (3, 5), j in (0, 2, 3)]
        ga = bias_grape_a(2, 3; slopes=[0.5, 0.25])
        @test bias_fill_tile(ga, 0, Int64[3, 5], Int64[0, 3, 4]) == [0.5 * (j - i) for i in (3, 5), j in (0, 3, 4)]
        q3, k3 = randn(3, 2), randn(3, 3)
        lq, lk = bias_grape_a_lift(ga, 0, Int64[3, 5], q3), bias_grape_a_lift(ga, 0, Int64[0, 3, 4], k3; key=true)
        # <lift_q(i), lift_k(j)> = <q, k> + m (j - i): sums of 5 products, 1e-14.
        @test maximum(abs.(lq' * lk - (q3' * k3 + [0.5 * (j - i) for i in (3, 5), j in (0, 3, 4)]))) < 1e-14

        # float64 attention (the exact reference) against softmax(q'k / sqrt(d)) v.
        q, k, v = randn(4, 1, 3, 1), randn(4, 1, 5, 1), randn(4, 1, 5, 1)
        o, lse = attention_forward(q, k, v)
        for i in 1:3
            s = [dot(q[:, 1, i, 1], k[:, 1, j, 1]) / 2 for j in 1:5]
            w = exp.(s .- maximum(s))
            @test maximum(abs.(o[:, 1, i, 1] - v[:, 1, :, 1] * (w / sum(w)))) < 1e-14
            @test abs(lse[1, i] - (maximum(s) + log(sum(w)))) < 1e-14
        end
        # A closed handle (C_NULL: "no bias" to the options) and an unknown pairing are
        # refused, not read as plain attention / half-split pairs.
        closed = bias_alibi(1)
        close(closed)
        @test_throws GPEError attention_forward(q, k, v; bias=closed)
        @test_throws GPEError attention_forward(q, k, v; rope_dim=4, rope_pairing=:interleave)
        # Strided views (a head slice of a fused array) in the backward: as their copies.
        big = randn(4, 2, 5, 1)
        qv, kv_, vv = view(big, :, 1:1, 1:3, :), view(big, :, 2:2, :, :), view(big, :, 1:1, :, :)
        gv = attention_backward(qv, kv_, vv, ones(4, 1, 3, 1))
        gc = attention_backward(copy(qv), copy(kv_), copy(vv), ones(4, 1, 3, 1))
        @test all(map((a, b) -> a == b, gv, gc))
        # dL/dslopes for L = <d_o, o> against central differences (h = 1e-6: ~1e-10).
        qa, ka, va, d_o = randn(4, 2, 5, 1), randn(4, 2, 5, 1), randn(4, 2, 5, 1), randn(4, 2, 5, 1)
        slopes = [0.5, 0.25]
        loss(s) = sum(d_o .* attention_forward(qa, ka, va; causal=true, bias=bias_alibi(2; slopes=s))[1])
        _, _, _, params = attention_backward_with_parameters(qa, ka, va, d_o; causal=true, bias=bias_alibi(2; slopes=slopes))
        for i in 1:2
            e = zeros(2); e[i] = 1e-6
            @test abs(params.bias_a[i] - (loss(slopes + e) - loss(slopes - e)) / 2e-6) < 1e-8
        end
        dq, dk, dv = attention_backward(qa, ka, va, d_o; causal=true, bias=bias_alibi(2; slopes=slopes))
        @test size(dq) == size(qa)
    end

    @testset "attention with v's own head size" begin
        # head_dim_v (v's first dimension, C ABI 0.10.0) apart from head_dim, both ways
        # round, with GQA and Shaw tables (the value table head_dim_v × 5). The call equals
        # the same call with the narrower side zero-padded: zero v columns give zero o and
        # dv rows, zero q and k components add only + 0.0 to the dot products, so Float64
        # (the exact reference) agrees bit for bit. The scale is explicit: its default
        # follows head_dim, which the padding changes in the second case.
        s, hq, hk, kmax = 6, 4, 2, 2
        pad(x, n) = vcat(x, zeros(eltype(x), n - size(x, 1), Base.tail(size(x))...))
        cut(x, n) = x[1:n, ntuple(_ -> Colon(), ndims(x) - 1)...]
        for (d, dv) in ((24, 16), (16, 24))
            w = max(d, dv)
            q, k, v, d_o = randn(d, hq, s, 1), randn(d, hk, s, 1), randn(dv, hk, s, 1), randn(dv, hq, s, 1)
            ak, av = randn(d, 2kmax + 1), randn(dv, 2kmax + 1)
            kw = (causal=true, softmax_scale=0.2, shaw_max_distance=kmax)
            o, lse = attention_forward(q, k, v; kw..., shaw_key_table=ak, shaw_value_table=av)
            ow, lsew = attention_forward(pad(q, w), pad(k, w), pad(v, w); kw..., shaw_key_table=pad(ak, w),
                                         shaw_value_table=pad(av, w))
            @test size(o) == (dv, hq, s, 1)
            @test cut(ow, dv) == o && all(ow[dv+1:end, :, :, :] .== 0) && lse == lsew
            dq, dk, dvv, params = attention_backward_with_parameters(q, k, v, d_o; kw..., shaw_key_table=ak,
                                                                     shaw_value_table=av)
            dqw, dkw, dvw, pw = attention_backward_with_parameters(pad(q, w), pad(k, w), pad(v, w), pad(d_o, w); kw...,
                                                                   shaw_key_table=pad(ak, w), shaw_value_table=pad(av, w))
            @test (cut(dqw, d), cut(dkw, d), cut(dvw, dv)) == (dq, dk, dvv)
            @test size(params.shaw_value_table) == (dv, 2kmax + 1)
            @test cut(pw.shaw_key_table, d) == params.shaw_key_table && cut(pw.shaw_value_table, dv) == params.shaw_value_table
            @test attention_backward(q, k, v, d_o; kw..., shaw_key_table=ak, shaw_value_table=av) == (dq, dk, dvv)
            @test attention_backward_v2(q, k, v, d_o; kw..., shaw_key_table=ak, shaw_value_table=av)[4].shaw_value_table ==
                  params.shaw_value_table
            # Float32 (the optimised kernels) against Float64, without Shaw tables: values of
            # randn, sums of at most 24 products and softmaxes over at most 6 keys; float32
            # rounding stays under 1e-4 for o and 1e-3 for the gradients.
            f = x -> Float32.(x)
            o64, _ = attention_forward(q, k, v; causal=true, softmax_scale=0.2)
            o32, _ = attention_forward(f(q), f(k), f(v); causal=true, softmax_scale=0.2)
            @test maximum(abs.(o32 - o64)) < 1e-4
            g64 = attention_backward(q, k, v, d_o; causal=true, softmax_scale=0.2)
            g32 = attention_backward(f(q), f(k), f(v), f(d_o); causal=true, softmax_scale=0.2)
            @test all(maximum(abs.(a - b)) < 1e-3 for (a, b) in zip(g32, g64))
            # d_o of head_dim rows, a value table of head_dim rows and a v of other tokens
            # than k are refused.
            @test_throws GPEError attention_backward(q, k, v, randn(d, hq, s, 1); causal=true)
            @test_throws GPEError attention_forward(q, k, v; shaw_max_distance=kmax, shaw_value_table=randn(d, 2kmax + 1))
            @test_throws GPEError attention_forward(q, k, randn(dv, hk, s - 1, 1))
        end
    end

    @testset "RoPE tables, structured positions and Shaw tables" begin
        r = Rope(8)
        t = rope_table(r, zeros(8, 3, 5, 2); offsets=Int64[0, 4])   # 2 sequences of 5 tokens
        x = randn(8, 1, 5, 2)                                        # another head count
        want = rope_forward(r, x; offsets=Int64[0, 4])
        # Both form the angles p θ_i in double (p < 9, θ_i <= 1): a few ulps apart.
        @test maximum(abs.(rope_table_forward(t, x) - want)) < 1e-14
        @test maximum(abs.(rope_table_backward(t, want) - x)) < 1e-14
        @test_throws GPEError rope_table_forward(t, Float32.(x))    # a Float64 table
        close(t)

        # Rotations written out, then plain attention (float64: the exact reference on
        # both sides, so 1e-12 covers the rounding of the rotated 8-term dots).
        d, s = 8, 6
        q, k, v = randn(d, 1, s, 1), randn(d, 1, s, 1), randn(d, 1, s, 1)
        rotate(x, m) = (y = copy(x); for tt in 1:s; y[:, 1, tt, 1] = m(tt) * x[:, 1, tt, 1]; end; y)
        attend(m; kw...) = attention_forward(rotate(q, m), rotate(k, m), v; kw...)[1]
        # Axial 2D RoPE: half-split planes i (pairs (i, i + d/2)) in 2 blocks of d/4, plane i
        # of block b turning by coords[b, t] θ_j, j = i mod d/4, θ_j = 10000^(-2j / (d/2)).
        coords = Int64[mod(3tt + 5a, 7) - 3 for a in 1:2, tt in 1:s]    # axes × tokens
        function axial(tt)
            m = Matrix{Float64}(I, d, d)
            for i in 0:(d÷2-1)
                b, j = divrem(i, d ÷ 4)
                a = coords[b+1, tt] * 10000.0^(-2j / (d ÷ 2))
                m[i+1, i+1], m[i+1, i+1+d÷2] = cos(a), -sin(a)
                m[i+1+d÷2, i+1], m[i+1+d÷2, i+1+d÷2] = sin(a), cos(a)
            end
            return m
        end
        o, _ = attention_forward(q, k, v; causal=true, rope_dim=d, rope_axes=2, q_axes=coords, k_axes=coords)
        @test maximum(abs.(o - attend(axial; causal=true))) < 1e-12
        # Kogkalidis et al.: a tree address acts by the path product of W_c = exp(S_c)
        # (sec. 3.2), a grid coordinate by blockdiag(exp(x S_1), exp(y S_2)) (sec. 3.3).
        tree = [0.4 * (a - a') for a in (randn(d, d), randn(d, d))]
        addresses = [Int64[mod(tt + i, 2) for i in 1:mod(tt, 4)] for tt in 1:s]
        node(tt) = foldl(*, (exp(tree[c+1]) for c in addresses[tt]); init=Matrix{Float64}(I, d, d))
        o, _ = attention_forward(q, k, v; causal=true, algebraic_tree=tree, q_tree=addresses, k_tree=addresses)
        @test maximum(abs.(o - attend(node; causal=true))) < 1e-12
        grid = [0.5 * (a - a') for a in (randn(4, 4), randn(4, 4))]
        block(tt) = cat(exp(coords[1, tt] * grid[1]), exp(coords[2, tt] * grid[2]); dims=(1, 2))
        o, _ = attention_forward(q, k, v; algebraic_grid=grid, q_axes=coords, k_axes=coords)
        @test maximum(abs.(o - attend(block))) < 1e-12
        @test_throws GPEError attention_forward(q, k, v; algebraic_tree=tree, q_tree=addresses)

        # Shaw et al.: tables d × (2k + 1); their gradients against central differences
        # of L = <d_o, o> (step 1e-6: truncation ~1e-12, rounding ~1e-10; 1e-7 absolute).
        kmax = 2
        ak, av, d_o = randn(d, 2kmax + 1), randn(d, 2kmax + 1), randn(d, 1, s, 1)
        shaw(a, b) = sum(d_o .* attention_forward(q, k, v; causal=true, shaw_max_distance=kmax,
                                                  shaw_key_table=a, shaw_value_table=b)[1])
        _, _, _, params = attention_backward_with_parameters(q, k, v, d_o; causal=true, shaw_max_distance=kmax,
                                                             shaw_key_table=ak, shaw_value_table=av)
        for i in eachindex(ak)
            e = zeros(size(ak)); e[i] = 1e-6
            @test abs(params.shaw_key_table[i] - (shaw(ak + e, av) - shaw(ak - e, av)) / 2e-6) < 1e-7
            @test abs(params.shaw_value_table[i] - (shaw(ak, av + e) - shaw(ak, av - e)) / 2e-6) < 1e-7
        end
        # gpe_attention_backward_v2: dq, dk, dv of attention_backward and the tables'
        # gradients of attention_backward_with_parameters, bit for bit.
        dq2, dk2, dv2, tables = attention_backward_v2(q, k, v, d_o; causal=true, shaw_max_distance=kmax,
                                                      shaw_key_table=ak, shaw_value_table=av)
        @test (dq2, dk2, dv2) == attention_backward(q, k, v, d_o; causal=true, shaw_max_distance=kmax,
                                                    shaw_key_table=ak, shaw_value_table=av)
        @test tables.shaw_key_table == params.shaw_key_table
        @test tables.shaw_value_table == params.shaw_value_table
        @test attention_backward_v2(q, k, v, d_o; causal=true, shaw_max_distance=kmax,
                                    shaw_key_table=ak)[4].shaw_value_table === nothing
        @test_throws GPEError attention_forward(q, k, v; shaw_max_distance=kmax, shaw_key_table=randn(d, 3))

        # 0.10.0: dL/dS of the skew generators against central differences in the skew
        # directions S_ij += h, S_ji -= h (the generators must stay skew), whose
        # derivative is X_ij - X_ji for the entrywise gradient X (step 1e-6: 1e-7).
        function skew_fd(gens, got, lossof)
            for c in eachindex(gens), i in 1:size(gens[c], 1), j in i+1:size(gens[c], 1)
                moved(h) = (g = deepcopy(gens); g[c][i, j] += h; g[c][j, i] -= h; lossof(g))
                @test abs(got[c][i, j] - got[c][j, i] - (moved(1e-6) - moved(-1e-6)) / 2e-6) < 1e-7
            end
        end
        lossof(; kw...) = sum(d_o .* attention_forward(q, k, v; causal=true, kw...)[1])
        _, _, _, params = attention_backward_with_parameters(q, k, v, d_o; causal=true, algebraic_tree=tree,
                                                             q_tree=addresses, k_tree=addresses)
        @test params.algebraic === nothing && length(params.algebraic_tree) == 2
        skew_fd(tree, params.algebraic_tree, g -> lossof(algebraic_tree=g, q_tree=addresses, k_tree=addresses))
        _, _, _, params = attention_backward_with_parameters(q, k, v, d_o; causal=true, algebraic_grid=grid,
                                                             q_axes=coords, k_axes=coords)
        skew_fd(grid, params.algebraic_grid, g -> lossof(algebraic_grid=g, q_axes=coords, k_axes=coords))
        seq = [0.3 * (a - a') for a in (randn(d, d),)]
        _, _, _, params = attention_backward_with_parameters(q, k, v, d_o; causal=true,
                                                             algebraic=AlgebraicSequence(seq[1]))
        @test size(params.algebraic) == (d, d)
        skew_fd(seq, [params.algebraic], g -> lossof(algebraic=AlgebraicSequence(g[1])))

        # 0.9.0's options: a causal window of 2 keys equals a Bool mask (seq_k × seq_q ×
        # 1 × 1, true where allowed); the sinks' gradient against central differences.
        allowed = reshape([j <= i && j >= i - 1 for j in 1:s, i in 1:s], s, s, 1, 1)
        o1, _ = attention_forward(q, k, v; causal=true, window=(1, 0))
        o2, _ = attention_forward(q, k, v; attn_mask=allowed)
        @test maximum(abs.(o1 - o2)) < 1e-14
        z = Float32[0.5]
        _, _, _, params = attention_backward_with_parameters(q, k, v, d_o; causal=true, sinks=z, softcap=5.0)
        sinkloss(x) = sum(d_o .* attention_forward(q, k, v; causal=true, sinks=Float32[x], softcap=5.0)[1])
        # The sink logit is read as Float32: a step of 2^-10 is exact in it (truncation ~1e-7).
        @test abs(params.sinks[1] - (sinkloss(0.5 + 2.0^-10) - sinkloss(0.5 - 2.0^-10)) / 2.0^-9) < 1e-5
        # kv_lengths: the keys past 4 are not read, as if k and v ended there.
        o3, _ = attention_forward(q, k, v; kv_lengths=Int64[4])
        @test maximum(abs.(o3 - attention_forward(q, k[:, :, 1:4, :], v[:, :, 1:4, :])[1])) < 1e-14
    end

    @testset "bad input" begin
        err = try
            so_rep_planes(1)
            nothing
        catch e
            e
        end
        @test err isa GPEError
        @test err.status == 1 && err.name == "GPE_ERROR_INVALID_ARGUMENT"
        @test occursin("dim", err.message)
        @test_throws GPEError stable_rank(zeros(2, 2))
        @test_throws GPEError shifted_basis_encode([0.5]; num_shifts=4, width=-1.0)
        @test_throws GPEError so_rep_apply(so_rep_planes(4), Int64[0, 1], zeros(4, 3))
    end
    @testset "INR data, splits and metrics (0.5)" begin
        # Lim et al. D.1 written here; 1e-12: the same closed forms in double.
        n = 9
        c(k) = -1 + (2k + 1) / n
        for task in (:radial, :spiral)
            img = synthetic_image(task, n; signed=true)
            mag = synthetic_image(task, n)
            field = synthetic_vector_field(task, n)
            @test size(field) == (n, n, 2)
            for i in 0:n-1, j in 0:n-1
                x, y = c(j), c(i)
                r, th = hypot(x, y), atan(y, x)
                f = task === :radial ? sin(15 * sqrt(r)) : sin(30 * sqrt(0.1 * r) + th)
                @test abs(img[i+1, j+1] - f) < 1e-12
                @test abs(mag[i+1, j+1] - abs(f)) < 1e-12
                @test abs(field[i+1, j+1, 1] - f * cos(th)) < 1e-12
                @test abs(field[i+1, j+1, 2] - f * sin(th)) < 1e-12
            end
        end
        g = grid_coordinates(5)
        @test size(g) == (2, 25)
        # Column i * n + j + 1 is (x_j, y_i); 1e-15: one division each.
        @test maximum(abs.(g[:, 2 * 5 + 3 + 1] - [-1 + 7 / 5, -1 + 5 / 5])) < 1e-15
        s = random_split(101, 0.05, 0.4, 7)
        @test (length(s.train), length(s.validation), length(s.test)) == (5, 40, 56)
        @test sort(vcat(s.train, s.validation, s.test)) == collect(0:100)
        @test issorted(s.train) && issorted(s.validation) && issorted(s.test)
        @test random_split(101, 0.05, 0.4, 7) == s
        gs = regular_grid_split(5, 6)
        @test gs.train == [k for k in 0:29 if iseven(div(k, 6)) && iseven(k % 6)]
        @test isempty(gs.validation) && length(gs.test) == 30 - length(gs.train)
        a, b = randn(4, 5), randn(4, 5)
        m = sum((a .- b) .^ 2) / 20
        # 1e-14 relative: 20 squares summed in another order.
        @test abs(inr_mse(a, b) - m) <= 1e-14 * m
        @test abs(inr_psnr(a, b; peak=2.0) - 10 * log10(4 / m)) < 1e-12
        @test inr_psnr(a, a) == Inf
        @test_throws GPEError inr_mse(a, randn(5, 4))
        @test_throws GPEError random_split(10, 0.7, 0.4, 1)
    end

    @testset "INR fits report the losses of their outputs (0.5)" begin
        n = 12
        y = reshape(permutedims(synthetic_image(:spiral, n)), 1, :)  # row-major pixel order
        xy = grid_coordinates(n)
        o = mlp_options(hidden_width=32, num_hidden_layers=2, steps=200, learning_rate=1e-2, seed=42)
        @test mlp_num_parameters(o, 2, 1) == (2 * 32 + 32) + (32 * 32 + 32) + (32 + 1)
        p0 = mlp_init(o, 2, 1)
        p, loss, final = mlp_fit(o, xy, y)
        @test length(loss) == 200
        # 1e-12 relative: the same double arithmetic, another summation order.
        l0 = sum((mlp_predict(o, p0, xy, 1) .- y) .^ 2) / length(y)
        lf = sum((mlp_predict(o, p, xy, 1) .- y) .^ 2) / length(y)
        @test abs(loss[1] - l0) <= 1e-12 * l0
        @test abs(final - lf) <= 1e-12 * lf
        @test final < 0.5 * loss[1]
        @test mlp_fit(o, xy, y; initial=p0)[1] == p
        # A held-out set (every third pixel): the curve's entries are the held-out MSE of
        # the network after that many updates (a fit of exactly that many steps, scored
        # here: 1e-12 relative, another summation order); the training is unchanged.
        held = 1:3:size(xy, 2)
        train = setdiff(1:size(xy, 2), held)
        ov = mlp_options(hidden_width=16, num_hidden_layers=2, steps=25, learning_rate=1e-2, seed=3)
        @test mlp_num_evaluations(25, 10) == 3
        pv, lv, fv, vs, vl = mlp_fit_validated(ov, xy[:, train], y[:, train], xy[:, held], y[:, held]; eval_every=10)
        @test vs == [10, 20, 25]
        @test (pv, lv, fv) == mlp_fit(ov, xy[:, train], y[:, train])
        for (i, s) in enumerate(vs)
            os = mlp_options(hidden_width=16, num_hidden_layers=2, steps=s, learning_rate=1e-2, seed=3)
            ps, _, _, _, vls = mlp_fit_validated(os, xy[:, train], y[:, train], xy[:, held], y[:, held])
            @test vls == [vl[i]]
            direct = sum((mlp_predict(os, ps, xy[:, held], 1) .- y[:, held]) .^ 2) / length(held)
            @test abs(vl[i] - direct) <= 1e-12 * direct
        end
        @test_throws GPEError mlp_fit_validated(ov, xy[:, train], y[:, train], xy[:, held], y[:, held[2:end]])
        # The validation progress (0.7.0): one call per evaluation with the curve's values.
        seen = Tuple{Int64,Float64,Float64}[]
        got = mlp_fit_validated(ov, xy[:, train], y[:, train], xy[:, held], y[:, held]; eval_every=10,
                                validation_progress=(s, t, v) -> push!(seen, (s, t, v)))
        @test got == (pv, lv, fv, vs, vl)
        @test [e[1] for e in seen] == vs
        @test [e[3] for e in seen] == vl
        @test [e[2] for e in seen] == lv[vs]
        @test_throws ErrorException mlp_fit_validated(ov, xy[:, train], y[:, train], xy[:, held], y[:, held];
                                                      validation_progress=(s, t, v) -> error("stop"))
        # No hidden layer: X W + b with W (in × out) row-major then b (1e-13).
        o0 = mlp_options(num_hidden_layers=0)
        q = randn(4 * 2 + 2)
        x = randn(4, 6)
        W = permutedims(reshape(q[1:8], 2, 4))  # row-major [4, 2]
        @test maximum(abs.(mlp_predict(o0, q, x, 2) - (W' * x .+ q[9:10]))) < 1e-13

        # Adam on a consistent, well-conditioned linear system recovers W to 1e-2.
        phi, wt = randn(40, 3), randn(3, 2)
        lo = linear_adam_options(steps=400, learning_rate=5e-2, final_learning_rate=1e-3)
        w, dl, df = fit_dense_adam(lo, phi, phi * wt)
        @test abs(dl[1] - sum((phi * wt) .^ 2) / 80) <= 1e-12 * dl[1]
        # The final MSE to 1e-12 of the data's scale (the residual's rounding scales with it).
        @test abs(df - sum((phi * w - phi * wt) .^ 2) / 80) <= 1e-12 * dl[1]
        @test maximum(abs.(w - wt)) < 1e-2
        py, px, w2 = randn(9, 3), randn(8, 2), randn(3, 2)
        img = py * w2 * px'
        ws, sl, sf = fit_separable_adam_2d(lo, py, px, img)
        @test size(ws) == (3, 2)
        @test abs(sf - sum((py * ws * px' - img) .^ 2) / 72) <= 1e-12 * sl[1]
        @test sf < 1e-3 * sl[1]
    end

    @testset "image files round trip (0.5)" begin
        dir = mktempdir()
        v = 0.5 .+ 0.5 .* (2 .* rand(6, 7) .- 1)
        path = joinpath(dir, "gray.png")
        image_write_png(path, v)
        im = image_read(path; grayscale=true)
        @test image_shape(im) == (6, 7, 1)
        # 8-bit: round(255 v) / 255, decoded to 1e-12.
        @test maximum(abs.(image_pixels(im)[:, :, 1] - round.(255 .* v) ./ 255)) < 1e-12
        rgb = image_pixels(image_read(path))
        @test size(rgb) == (6, 7, 3) && rgb[:, :, 1] == rgb[:, :, 3]
        smooth = [0.2 + 0.6 * j / 16 for i in 1:16, j in 0:15, c in 1:3]
        jpg = joinpath(dir, "rgb.jpg")
        image_write_jpeg(jpg, smooth; quality=95)
        # Lossy: within 4/255 on a smooth ramp at quality 95.
        @test maximum(abs.(image_pixels(image_read(jpg)) - smooth)) < 4 / 255
        err = try
            image_read(joinpath(dir, "missing.png"))
            nothing
        catch e
            e
        end
        @test err isa GPEError && occursin("missing.png", err.message)
    end
end
