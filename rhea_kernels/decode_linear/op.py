"""``rhea_kernels::decode_linear``: schema, fake kernel and implementations, registered once.

CPU: the C++ entry ``csrc/decode_linear.cpp`` (else `reference.decode_linear`); CUDA: the
reference (cuBLAS already streams a few rows at the memory bound there).
"""
from __future__ import annotations

from rhea_kernels import _library
from rhea_kernels.decode_linear import reference


def _fake(x, weight, bias):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


OP = _library.define(
    "decode_linear", "(Tensor x, Tensor weight, Tensor? bias) -> Tensor",
    reference=reference.decode_linear, triton=None, fake=_fake,
    package="rhea_kernels/decode_linear", cpp_source="csrc/decode_linear.cpp",
)
