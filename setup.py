"""Build script: everything is in pyproject.toml except the optional C++ extension.

The extension (csrc/) is built only when RHEA_BUILD_EXT=1, and needs torch at build time
(`pip install --no-build-isolation`). Each op's C++ entry (csrc/<op>.cpp) registers its CPU
kernel under the op's own name (TORCH_LIBRARY_IMPL); csrc/module.cpp makes the module
rhea_kernels._C. In place, for a checkout: `RHEA_BUILD_EXT=1 python setup.py build_ext --inplace`.
Without it, rhea_kernels falls back to the plain-torch reference on CPU and to Triton on CUDA.
"""
import glob
import os

from setuptools import setup

ext_modules, cmdclass = [], {}
if os.environ.get("RHEA_BUILD_EXT", "0") == "1":
    from torch.utils.cpp_extension import BuildExtension, CppExtension

    sources = sorted(glob.glob(os.path.join("csrc", "*.cpp")))
    if sources:
        ext_modules.append(
            CppExtension(
                "rhea_kernels._C",
                sources,
                extra_compile_args=["-O3", "-fopenmp", "-march=native"] if os.environ.get("RHEA_NATIVE") == "1" else ["-O3", "-fopenmp"],
                extra_link_args=["-fopenmp"],
                depends=sorted(glob.glob(os.path.join("csrc", "*.h"))),
                py_limited_api=False,
            )
        )
        cmdclass["build_ext"] = BuildExtension.with_options(no_python_abi_suffix=False)

setup(ext_modules=ext_modules, cmdclass=cmdclass)
