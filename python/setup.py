"""Builds the convkit PyTorch extension.

1. Configures and builds the convkit C++/CUDA library with CMake (the repository root, tests and tools off)
   in python/build-cmake, or in $CONVKIT_CMAKE_BUILD_DIR.
2. Copies libconvkit.so.<major> into the package (python/convkit/).
3. Compiles the extension (csrc/) with torch.utils.cpp_extension and links it against that copy, with
   rpath $ORIGIN, so the kernels are compiled once, in the library.

Environment:
  TORCH_CUDA_ARCH_LIST    GPU architectures, default "9.0" (passed to CMake as CMAKE_CUDA_ARCHITECTURES=90).
  CONVKIT_ENABLE_CUDA     "0" forces a CPU-only build, "1" requires CUDA; by default CUDA is used when nvcc is
                          found and torch was built with CUDA.
  CONVKIT_CMAKE_BUILD_DIR where the library is built (kept between installs: rebuilds are incremental).
  CONVKIT_BUILD_JOBS      parallel compile jobs (default: the CPU count).
"""
import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PKG = HERE / "convkit"
BUILD_DIR = Path(os.environ.get("CONVKIT_CMAKE_BUILD_DIR", HERE / "build-cmake")).resolve()
JOBS = os.environ.get("CONVKIT_BUILD_JOBS", str(os.cpu_count() or 2))


def log(msg):
    print(f"[convkit setup] {msg}", flush=True)


def nvcc_path():
    if CUDA_HOME is None:
        return None
    p = Path(CUDA_HOME) / "bin" / "nvcc"
    return str(p) if p.exists() else shutil.which("nvcc")


def use_cuda():
    forced = os.environ.get("CONVKIT_ENABLE_CUDA", "").strip().lower()
    have = torch.version.cuda is not None and nvcc_path() is not None
    if forced in ("0", "off", "no", "false"):
        return False
    if forced in ("1", "on", "yes", "true"):
        if not have:
            sys.exit("CONVKIT_ENABLE_CUDA=1 but nvcc was not found or torch has no CUDA "
                     f"(torch.version.cuda={torch.version.cuda}, CUDA_HOME={CUDA_HOME})")
        return True
    if not have:
        log(f"CPU-only build (torch.version.cuda={torch.version.cuda}, nvcc={nvcc_path()})")
    return have


def cuda_archs():
    """TORCH_CUDA_ARCH_LIST ("9.0", "8.0;9.0+PTX", "9.0a") -> CMake's "90", "80;90", "90a"."""
    raw = os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0")
    out = []
    for item in raw.replace(",", ";").replace(" ", ";").split(";"):
        item = item.strip().replace("+PTX", "")
        if item:
            out.append(item.replace(".", ""))
    return ";".join(out) or "90"


def build_library(cuda):
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    cfg = ["cmake", "-S", str(ROOT), "-B", str(BUILD_DIR), "-DCMAKE_BUILD_TYPE=Release",
           "-DCONVKIT_BUILD_TESTS=OFF", "-DCONVKIT_BUILD_TOOLS=OFF",
           f"-DCONVKIT_ENABLE_CUDA={'ON' if cuda else 'OFF'}"]
    if cuda:
        cfg += [f"-DCMAKE_CUDA_ARCHITECTURES={cuda_archs()}", f"-DCMAKE_CUDA_COMPILER={nvcc_path()}"]
    if shutil.which("ninja") and not (BUILD_DIR / "Makefile").exists():
        cfg += ["-G", "Ninja"]
    log(" ".join(cfg))
    subprocess.check_call(cfg)
    cmd = ["cmake", "--build", str(BUILD_DIR), "--target", "convkit", "-j", JOBS]
    log(" ".join(cmd))
    subprocess.check_call(cmd)
    # Copy the library under its soname (what the extension records as NEEDED) into the package.
    for old in PKG.glob("libconvkit.so*"):
        old.unlink()
    real = sorted(glob.glob(str(BUILD_DIR / "libconvkit.so.*.*.*")))
    if not real:
        sys.exit(f"libconvkit.so was not produced in {BUILD_DIR}")
    soname = "libconvkit.so." + Path(real[0]).name.split(".so.")[1].split(".")[0]
    shutil.copy2(real[0], PKG / soname)
    log(f"copied {real[0]} -> {PKG / soname}")
    return soname


class BuildExtWithLibrary(BuildExtension):
    """Builds the convkit library first (only when the extension is built, not for metadata)."""

    def run(self):
        soname = build_library(CUDA)
        for ext in self.extensions:
            ext.extra_link_args += [f"-L{PKG}", f"-l:{soname}", "-Wl,-rpath,$ORIGIN"]
        super().run()
        # In-place / develop builds: the extension sits next to the library already. Wheel builds: copy the
        # library next to the built extension too (package_data is collected before build_ext runs).
        if not self.inplace:
            dest = Path(self.build_lib) / "convkit"
            dest.mkdir(parents=True, exist_ok=True)
            shutil.copy2(PKG / soname, dest / soname)


CUDA = use_cuda()
if CUDA:
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")

sources = ["csrc/ext.cpp", "csrc/autograd.cpp", "csrc/autocast.cpp"]
ext_cls = CppExtension
if CUDA:
    sources += ["csrc/ext_cuda.cpp", "csrc/kernels.cu"]
    ext_cls = CUDAExtension
ext = ext_cls(
    name="convkit._C",
    sources=sources,
    include_dirs=[str(ROOT / "include"), str(HERE / "csrc")],
    define_macros=[("Py_LIMITED_API", "0x030A0000")],
    extra_compile_args={"cxx": ["-O2", "-std=c++17", "-Wall"], "nvcc": ["-O2", "-std=c++17", "-lineinfo"]},
    # NOTE: keep any statically linked runtime private. On the H200 machine the toolchain put a static
    # libstdc++ into this extension; exported, its std::locale interposed on libc10's and the first error
    # message (an ostringstream) crashed the process (seen 2026-11-29).
    extra_link_args=["-Wl,--exclude-libs,ALL"],
    py_limited_api=True,
)

setup(
    name="convkit",
    version="0.1.0",
    packages=["convkit"],
    package_data={"convkit": ["libconvkit.so*"]},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExtWithLibrary},
)
