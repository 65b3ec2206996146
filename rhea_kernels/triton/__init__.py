"""Triton kernels (one file per op). Imported lazily by rhea_kernels.ops on CUDA only.

Test them on CPU in a process started with TRITON_INTERPRET=1 (see tests/kernels).
"""
