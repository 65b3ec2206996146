"""Deprecated alias of rhea_kernels/turn_scores/triton_kernel.py (the Triton kernel moved beside its op)."""
import warnings

from rhea_kernels.turn_scores.triton_kernel import *  # noqa: F401,F403
from rhea_kernels.turn_scores.triton_kernel import _SHRUNK, _sm_count, _turn_scores_kernel  # noqa: F401

warnings.warn("rhea_kernels.triton.turn_scores is deprecated; use "
              "`from rhea_kernels.turn_scores import triton_kernel`", DeprecationWarning, stacklevel=2)
