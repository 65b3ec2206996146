"""Deprecated: the Triton kernels moved beside their ops.

``rhea_kernels.triton.turn_scores`` is now ``rhea_kernels/turn_scores/triton_kernel.py`` and
``rhea_kernels.triton.anchored_attention`` is ``rhea_kernels/anchored_attention/triton_kernel.py``;
the modules here re-export them with a DeprecationWarning.
"""
