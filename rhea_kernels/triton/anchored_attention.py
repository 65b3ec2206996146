"""Deprecated alias of rhea_kernels/anchored_attention/triton_kernel.py (the Triton kernels moved beside their op)."""
import warnings

from rhea_kernels.anchored_attention.triton_kernel import *  # noqa: F401,F403
from rhea_kernels.anchored_attention.triton_kernel import _bwd_dkdv_kernel, _bwd_dq_kernel, _fwd_kernel  # noqa: F401

warnings.warn("rhea_kernels.triton.anchored_attention is deprecated; use "
              "`from rhea_kernels.anchored_attention import triton_kernel`", DeprecationWarning, stacklevel=2)
