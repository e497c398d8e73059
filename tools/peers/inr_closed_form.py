"""The NumPy peer of GroupPE's closed-form INR fit (Zheng et al. eq. 10), for `gpe bench`.

What a NumPy user would write: the Gaussian shifted-basis factor, the per-factor ridge
pseudo-inverse A = (Psi^T Psi + lambda I)^-1 Psi^T through np.linalg.solve, and
W = A_y S A_x^T. Reads the image (float64, row-major, n x n) from a raw file, prints one
JSON line: the best time over the repetitions (seconds) and the PSNR of the fit on the
full grid. Runs on the BLAS thread count its environment sets (`gpe bench` sets
OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and MKL_NUM_THREADS to GroupPE's thread count
before the interpreter starts, as NumPy's BLAS reads them once, at import), and names it.

usage: inr_closed_form.py IMAGE_FILE N K SIGMA LAMBDA REPETITIONS
"""

import json
import os
import sys
import time

import numpy as np


def gaussian_factor(coords, k, sigma, lo=0.0, hi=1.0):
    shifts = lo + np.arange(k) * (hi - lo) / k
    u = coords[:, None] - shifts[None, :]
    return np.exp(-u * u / (2.0 * sigma * sigma))


def fit(image, n, k, sigma, lam):
    coords = (np.arange(n) + 0.5) / n
    psi = gaussian_factor(coords, k, sigma)
    a = np.linalg.solve(psi.T @ psi + lam * np.eye(k), psi.T)
    return psi, a @ image @ a.T


def main():
    path, n, k, sigma, lam, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
        float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
    image = np.fromfile(path, dtype=np.float64).reshape(n, n)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        psi, w = fit(image, n, k, sigma, lam)
        best = min(best, time.perf_counter() - start)
    mse = float(np.mean((psi @ w @ psi.T - image) ** 2))
    threads = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    print(json.dumps({"seconds": best, "psnr_db": 10 * np.log10(1.0 / mse),
                      "numpy": np.__version__, "dtype": str(image.dtype),
                      "blas_threads": int(threads) if threads else None}))


if __name__ == "__main__":
    main()
