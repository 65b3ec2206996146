"""rhea_kernels: fused turn scoring and prefix-anchored attention (Triton, C++ fallback, references).

This package never imports `rhea`.
"""
