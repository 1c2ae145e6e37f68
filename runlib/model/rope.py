"""RoPE frequencies: the plain ones (Su et al. 2021, arXiv 2104.09864), and two rescalings for a context
longer than the one trained at, as phases[].rope_scaling names them.

    inv_freq, attention_factor = rope_frequencies(dims, theta, scaling)   # [dims / 2], a cos/sin multiplier

  llama3  Llama 3.1's (meta-llama/llama-models, models/llama3/reference_impl/model.py, apply_scaling; the
          same as transformers' modeling_rope_utils._compute_llama3_parameters): a frequency whose
          wavelength 2 pi / f exceeds original / low_freq_factor is divided by factor, one whose wavelength
          is below original / high_freq_factor is kept, and between them the two are blended by
          (original / wavelength - low) / (high - low).
  yarn    YaRN (Peng et al. 2023, arXiv 2309.00071, sections 3.2-3.4; transformers'
          _compute_yarn_parameters with truncate): dimension d turns original / (2 pi base^(d/dims))
          times over the original context; those that turn more than beta_fast times keep their frequency,
          fewer than beta_slow are divided by factor, a linear ramp over the dimensions between (the
          correction range, floored and ceiled), and cos and sin are multiplied by 0.1 ln(factor) + 1 (the
          paper's sqrt(1/t), eq. 22).
"""

from __future__ import annotations

import math

import torch

from runlib.spec.models import RopeScalingSpec


def rope_frequencies(
    dims: int, theta: float, scaling: RopeScalingSpec | None = None, device: torch.device | None = None
) -> tuple[torch.Tensor, float]:
    """The inverse frequencies [dims / 2] of RoPE over `dims` rotated dimensions at base theta, rescaled as
    `scaling` says, and the factor cos and sin are multiplied by (1 without YaRN)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dims, 2, device=device, dtype=torch.float32) / dims))
    if scaling is None:
        return inv_freq, 1.0
    if scaling.kind == "llama3":
        return _llama3(inv_freq, scaling), 1.0
    return _yarn(inv_freq, dims, theta, scaling), 0.1 * math.log(scaling.factor) + 1.0


def _llama3(inv_freq: torch.Tensor, s: RopeScalingSpec) -> torch.Tensor:
    wavelength = 2 * math.pi / inv_freq
    low_wavelength = s.original_seq_len / s.low_freq_factor  # longer: scaled fully
    high_wavelength = s.original_seq_len / s.high_freq_factor  # shorter: kept
    scaled = torch.where(wavelength > low_wavelength, inv_freq / s.factor, inv_freq)
    smooth = (s.original_seq_len / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelength >= high_wavelength) & (wavelength <= low_wavelength)
    return torch.where(medium, blended, scaled)


def _yarn(inv_freq: torch.Tensor, dims: int, theta: float, s: RopeScalingSpec) -> torch.Tensor:
    def dimension_turning(turns: float) -> float:  # the dimension that turns `turns` times over the original context
        return dims * math.log(s.original_seq_len / (turns * 2 * math.pi)) / (2 * math.log(theta))

    low: float = max(math.floor(dimension_turning(s.beta_fast)), 0)
    high: float = min(math.ceil(dimension_turning(s.beta_slow)), dims - 1)
    if low == high:
        high += 0.001  # no empty ramp
    ramp = ((torch.arange(dims // 2, dtype=torch.float32, device=inv_freq.device) - low) / (high - low)).clamp(0, 1)
    kept = 1 - ramp  # 1: the frequency kept (fast dimensions), 0: interpolated by factor
    return inv_freq / s.factor * (1 - kept) + inv_freq * kept
