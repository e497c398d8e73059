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
end
