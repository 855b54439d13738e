"""`pip install ./python`: builds libmoe_ep (shared) with CMake from the repository
root and installs it inside the `moe_ep` package. setuptools only.

Environment:
  MOE_EP_BUILD_DIR    CMake build directory to use; one already configured (such as
                      the repository's build/) is only rebuilt (target moe_ep), so an
                      up-to-date build costs nothing. Default: a directory under
                      setuptools' build_temp, configured with tests and tools off.
  MOE_EP_CMAKE_ARGS   extra configure arguments, e.g. "-DMOE_EP_WITH_CUDA=OFF".
"""
import os
import shlex
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class BuildWithLibrary(build_py):
    """build_py, then the library built by CMake copied into the package."""

    def run(self):
        super().run()
        bdir = os.environ.get("MOE_EP_BUILD_DIR") or os.path.join(
            os.path.abspath(self.get_finalized_command("build").build_temp), "cmake")
        if not os.path.exists(os.path.join(bdir, "CMakeCache.txt")):
            if not os.path.exists(os.path.join(ROOT, "CMakeLists.txt")):
                raise RuntimeError(f"moe_ep: no CMakeLists.txt in {ROOT}: build from a checkout")
            subprocess.check_call(["cmake", "-S", ROOT, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release",
                                   "-DMOE_EP_BUILD_TESTS=OFF", "-DMOE_EP_BUILD_TOOLS=OFF"]
                                  + shlex.split(os.environ.get("MOE_EP_CMAKE_ARGS", "")))
        subprocess.check_call(["cmake", "--build", bdir, "--target", "moe_ep",
                               "-j", str(os.cpu_count() or 1)])
        dest = os.path.join(self.build_lib, "moe_ep", "libmoe_ep.so")
        shutil.copyfile(os.path.realpath(os.path.join(bdir, "libmoe_ep.so")), dest)


class BinaryDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(
    name="moe_ep",
    version="0.1.0",
    description="One Mixture-of-Experts layer with expert parallelism (ctypes over libmoe_ep)",
    packages=["moe_ep"],
    python_requires=">=3.8",
    cmdclass={"build_py": BuildWithLibrary},
    distclass=BinaryDistribution,
    zip_safe=False,
)
