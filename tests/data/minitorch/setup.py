import os
import subprocess
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class BuildHip(build_ext):
    def build_extension(self, ext):
        rocm = Path(os.environ["ROCM_PATH"])
        archs = [a for a in os.environ["PYTORCH_ROCM_ARCH"].split(";") if a]
        out = Path(self.get_ext_fullpath(ext.name))
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                str(rocm / "lib/llvm/bin/clang++"),
                "-x",
                "hip",
                f"--rocm-path={rocm}",
                *(f"--offload-arch={a}" for a in archs),
                f'-DARCH_FLAGS="{" ".join(archs)}"',
                "-fPIC",
                "-shared",
                f"-I{sysconfig.get_paths()['include']}",
                *ext.sources,
                f"-L{rocm / 'lib'}",
                "-lamdhip64",
                "-o",
                str(out),
            ],
            check=True,
        )


setup(
    packages=["torch", "torch.cuda"],
    ext_modules=[Extension("torch._C", sources=["csrc/module.hip"])],
    cmdclass={"build_ext": BuildHip},
)
