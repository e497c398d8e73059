"""Coordinate encoders as PyTorch operators: gpe.torch.coordinate_encode and the
gpe.torch.CoordinateEncoding module.

    enc = gt.CoordinateEncoding(gpe.FourierFeatures("gaussian", dim=2, num_frequencies=64,
                                                    scale=10.0))
    model = torch.nn.Sequential(enc, torch.nn.Linear(enc.out_features, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 3))
    rgb = model(xy)                                # xy [..., 2], float32 or float64

Any gpe.CoordinateEncoder (Fourier features, SO(2) Bessel, shifted bases, spherical
harmonics) maps points [..., D] to features [..., F] (leading dims flattened and
restored). The library computes in float64 (gpe/coordinate.h): a float32 input is
widened exactly, the features rounded once to float32. The gradient with respect to the
points is the encoder's own vector-Jacobian product (gpe_coordinate_backward), so
coordinates that are themselves learned or produced by a network train through it; the
encoder's frequencies are fixed (no parameters), as in Tancik et al.'s and Zheng et al.'s
set-ups. First derivatives only (a second backward raises). Tensors on any device: the
library computes on the CPU, and the features and gradients come back on the points'
device (a CUDA tensor makes a round trip through host memory).
"""
from typing import Any, Tuple

import numpy as np
import torch

from gpe.coordinate import CoordinateEncoder


class _Encode(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, points: torch.Tensor, encoder: CoordinateEncoder) -> torch.Tensor:
        flat = points.detach().reshape(-1, points.shape[-1]).to(torch.float64).cpu().numpy()
        feats = encoder.encode(flat)
        ctx.encoder = encoder
        ctx.save_for_backward(points)
        # On the points' device: the library computes on the CPU, in float64.
        out = torch.from_numpy(feats).to(device=points.device, dtype=points.dtype)
        return out.reshape(*points.shape[:-1], feats.shape[1])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> Tuple[torch.Tensor, None]:
        (points,) = ctx.saved_tensors
        flat = points.detach().reshape(-1, points.shape[-1]).to(torch.float64).cpu().numpy()
        g = grad.detach().reshape(-1, grad.shape[-1]).to(torch.float64).cpu().numpy()
        dp = ctx.encoder.backward(flat, np.ascontiguousarray(g))
        return (torch.from_numpy(dp).to(device=points.device, dtype=points.dtype)
                .reshape(points.shape), None)


def coordinate_encode(encoder: CoordinateEncoder, points: torch.Tensor) -> torch.Tensor:
    """encoder(points) for points [..., D] (float32 or float64), features [..., F] of the
    points' dtype, differentiable with respect to the points."""
    if not isinstance(encoder, CoordinateEncoder):
        raise TypeError("encoder must be a gpe.CoordinateEncoder (FourierFeatures, So2Bessel, "
                        "ShiftedEncoder, SphericalHarmonics), got %s" % type(encoder).__name__)
    if not isinstance(points, torch.Tensor):
        raise TypeError("points must be a torch.Tensor")
    if points.dtype not in (torch.float32, torch.float64):
        raise TypeError("points must be float32 or float64, got %s" % points.dtype)
    d, _ = encoder.dims
    if points.dim() < 1 or points.shape[-1] != d:
        raise ValueError("points must be [..., %d] for this encoder, got %s"
                         % (d, tuple(points.shape)))
    if points.numel() == 0:
        raise ValueError("points must hold at least one point")
    return _Encode.apply(points, encoder)


class CoordinateEncoding(torch.nn.Module):
    """A gpe.CoordinateEncoder as a layer: forward(points [..., in_features]) ->
    features [..., out_features] (coordinate_encode)."""

    def __init__(self, encoder: CoordinateEncoder) -> None:
        super().__init__()
        if not isinstance(encoder, CoordinateEncoder):
            raise TypeError("encoder must be a gpe.CoordinateEncoder, got %s"
                            % type(encoder).__name__)
        self.encoder = encoder
        self.in_features, self.out_features = encoder.dims

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        return coordinate_encode(self.encoder, points)

    def extra_repr(self) -> str:
        return "%s, in_features=%d, out_features=%d" % (
            type(self.encoder).__name__, self.in_features, self.out_features)
