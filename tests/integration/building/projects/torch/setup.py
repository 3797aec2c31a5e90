"""Builds a real HIP shared library with the ROCm tree's clang, the way a ROCm torch build does:
for the targets in PYTORCH_ROCM_ARCH, with MAX_JOBS parallel compiles, through the compiler
launcher CMake would use (CMAKE_*_COMPILER_LAUNCHER). Records the environment it saw.

Knobs a test sets through the project's build_env in rocm-build.toml (each mimics a real failure):
FIXTURE_CPU_ONLY=1 (the build silently falls back to CPU), FIXTURE_DROP_ARCH=gfxN (a part of the
build ignores one target), FIXTURE_EXTRA_ARCH=gfxN (a part builds for a target of its own),
FIXTURE_IGNORE_EXTRA_REQUIREMENTS=1 (PYTORCH_EXTRA_INSTALL_REQUIREMENTS is not honoured),
FIXTURE_KILL_WHEN_PARALLEL=1 (a compile job is SIGKILLed while more than one job runs, as the OOM
killer does), FIXTURE_FAIL=1 (a compile error), FIXTURE_USER_SWITCHES="USE_X USE_Y" (the feature
switches the test's user asked for: only those may be set, see FEATURES).

Like the real torch's CMake, it reads the switches a build leaves to chance unless told: Kineto's
ROCM_SOURCE_DIR (PyTorch defaults it to /opt/rocm), the CPU BLAS (TheRock's tree ships OpenBLAS in
lib/host-math), USE_NUMA (LoadHIP: NUMA's link folder can pull a distro libhsa-runtime64), and,
with flash or memory-efficient attention on and no AOTRITON_INSTALLED_PREFIX, it downloads
aotriton (from AOTRITON_URL below: a refused local port stands for the network, denied in tests).
Each fails the build when wrong, as the real build would go wrong.

Its feature options (FEATURES) take torch's own defaults: the composable-kernel SDPA and GEMM
backends on (Linux), built from the checkout's third_party/composable_kernel submodule (a
configure error when its include/ck/ck.hpp is missing), MSLK (FBGEMM GenAI before) on when a target
is gfx942 or gfx950. Neither reference build sets these, so a value the user did not ask for
(FIXTURE_USER_SWITCHES) is a configure error: a build that forces them has left the reference.
The options as decided are recorded in torch/_features.json.
"""

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
AOTRITON_URL = "http://127.0.0.1:9/aotriton-runtime.tar.gz"
OFF = ("0", "OFF", "off", "false", "FALSE", "no", "NO")
CK_HEADER = Path("third_party") / "composable_kernel" / "include" / "ck" / "ck.hpp"
#: torch's ROCm feature options and their default for the targets (CMake option() defaults).
FEATURES = {
    "USE_ROCM_CK_SDPA": lambda targets: True,
    "USE_ROCM_CK_GEMM": lambda targets: True,
    "USE_MSLK": lambda targets: any(t in ("gfx942", "gfx950") for t in targets),
    "USE_FBGEMM_GENAI": lambda targets: any(t in ("gfx942", "gfx950") for t in targets),
}


def check_features(env, targets):
    """The feature options as torch's CMake decides them; a configure error on a value nobody
    asked for, or on CK without the composable_kernel submodule."""
    asked = set(env.get("FIXTURE_USER_SWITCHES", "").replace(",", " ").split())
    forced = [f"{k}={env[k]}" for k in FEATURES if k in env and k not in asked]
    if forced:
        sys.exit(
            f"CMake Error: {', '.join(forced)} set by the build, though the user did not ask "
            "for it: the reference builds leave it to torch's default"
        )
    on = {
        k: (env[k] not in OFF) if k in env else default(targets) for k, default in FEATURES.items()
    }
    ck = [k for k in ("USE_ROCM_CK_SDPA", "USE_ROCM_CK_GEMM") if on[k]]
    if ck and not (HERE / CK_HEADER).is_file():
        sys.exit(
            f"CMake Error: {', '.join(ck)} on, but {CK_HEADER} is missing: "
            "the composable_kernel submodule is not checked out"
        )
    return on


def check_switches(env):
    """Fail as the real build goes wrong when a switch is left to chance."""
    rocm = Path(env["ROCM_PATH"]).resolve()
    source_dir = env.get("ROCM_SOURCE_DIR", "/opt/rocm")
    if Path(source_dir).resolve() != rocm:
        sys.exit(f"Kineto: ROCM_SOURCE_DIR is {source_dir}, not the ROCm tree {rocm}")
    if env.get("USE_NUMA", "ON") not in OFF:
        sys.exit(
            "LoadHIP: USE_NUMA is on: NUMA's link folder can pull in a distro libhsa-runtime64"
        )
    host_math = rocm / "lib" / "host-math"
    if host_math.is_dir() and (
        env.get("BLAS") != "OpenBLAS" or env.get("OpenBLAS_HOME") != str(host_math)
    ):
        sys.exit(f"BLAS: the tree's OpenBLAS ({host_math}) is not used: BLAS={env.get('BLAS')}")
    targets = [t for t in env.get("PYTORCH_ROCM_ARCH", "").split(";") if t]
    features = check_features(env, targets)
    wants = [
        k for k in ("USE_FLASH_ATTENTION", "USE_MEM_EFF_ATTENTION") if env.get(k, "1") not in OFF
    ]
    prefix = env.get("AOTRITON_INSTALLED_PREFIX")
    if wants and prefix:
        if not list((Path(prefix) / "lib").glob("libaotriton_v2.so*")):
            sys.exit(f"aotriton: no lib/libaotriton_v2.so in AOTRITON_INSTALLED_PREFIX {prefix}")
    elif wants:
        print(f"aotriton: {', '.join(wants)} on: downloading {AOTRITON_URL}", flush=True)
        try:
            urllib.request.urlopen(AOTRITON_URL, timeout=10)
        except OSError as exc:
            sys.exit(f"aotriton: download of {AOTRITON_URL} failed (network denied?): {exc}")
    return features


def version():
    if os.environ.get("PYTORCH_BUILD_VERSION"):
        # Like PyTorch: a build version needs a build number.
        if not os.environ.get("PYTORCH_BUILD_NUMBER"):
            sys.exit("PYTORCH_BUILD_VERSION is set but PYTORCH_BUILD_NUMBER is not")
        return os.environ["PYTORCH_BUILD_VERSION"]
    return (HERE / "version.txt").read_text().strip()


def git_sha():
    """Like PyTorch's tools/generate_torch_version.py (get_sha): git rev-parse HEAD in the
    source folder, "Unknown" when that fails; no variable overrides it."""
    res = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True)
    return res.stdout.strip() if res.returncode == 0 else "Unknown"


def run(cmd):
    print("+", shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def compile_library(out_dir):
    env = os.environ
    features = check_switches(env)
    (out_dir.parent / "_features.json").write_text(json.dumps(features, sort_keys=True))
    rocm = env["ROCM_PATH"]
    clang = str(Path(env["HIP_CLANG_PATH"]) / "clang++")
    jobs = int(env.get("MAX_JOBS") or 1)
    launcher = shlex.split(env.get("CMAKE_HIP_COMPILER_LAUNCHER", ""))
    targets = [t for t in env.get("PYTORCH_ROCM_ARCH", "").split(";") if t]
    targets = [t for t in targets if t != env.get("FIXTURE_DROP_ARCH")]
    targets += [env["FIXTURE_EXTRA_ARCH"]] if env.get("FIXTURE_EXTRA_ARCH") else []
    if env.get("FIXTURE_FAIL") == "1":
        print("csrc/ops.hip:3:1: error: fixture compile error on purpose", flush=True)
        sys.exit(1)
    if env.get("FIXTURE_KILL_WHEN_PARALLEL") == "1" and jobs > 1:
        # One compile job dies from SIGKILL, as under the kernel's OOM killer.
        child = subprocess.run(
            [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
        )
        assert child.returncode == -signal.SIGKILL, child.returncode
        print("clang++: error: unable to execute command: Killed", flush=True)
        print("clang++: fatal error: Killed signal terminated program clang", flush=True)
        sys.exit(1)
    build = HERE / "build" / "objects"
    build.mkdir(parents=True, exist_ok=True)
    cpu_only = env.get("FIXTURE_CPU_ONLY") == "1"
    common = ["-fPIC", "-O1", f"-I{HERE / 'csrc'}", *shlex.split(env.get("CXXFLAGS", ""))]
    hip = [
        *launcher,
        clang,
        "-x",
        "hip",
        f"--rocm-path={rocm}",
        *(f"--offload-arch={t}" for t in targets),
    ]
    jobs_list = [
        [
            *launcher,
            clang,
            *common,
            "-c",
            str(HERE / "csrc" / "host.cpp"),
            "-o",
            str(build / "host.o"),
        ]
    ]
    objects = [build / "host.o"]
    if not cpu_only:
        jobs_list[0][len(launcher) + 1 : len(launcher) + 1] = [
            "-DFIXTURE_WITH_HIP",
            f"-I{rocm}/include",
            "-D__HIP_PLATFORM_AMD__",
        ]
        jobs_list.append(
            [*hip, *common, "-c", str(HERE / "csrc" / "ops.hip"), "-o", str(build / "ops.o")]
        )
        objects.append(build / "ops.o")
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(run, jobs_list))
    lib = out_dir / "libtorch_fixture_hip.so"
    link = [
        clang,
        "-shared",
        "-Wl,-soname,libtorch_fixture_hip.so",
        *map(str, objects),
        "-o",
        str(lib),
    ]
    if not cpu_only:
        link += [f"-L{rocm}/lib", "-lamdhip64"]
    link += shlex.split(env.get("LDFLAGS", ""))
    run(link)


def gpu_asserts(env):
    """ROCM_FORCE_ENABLE_GPU_ASSERTS as torch's CMake would see it: set by the file CMake
    includes before project() (CMAKE_PROJECT_INCLUDE_BEFORE), which this fixture reads."""
    include = env.get("CMAKE_PROJECT_INCLUDE_BEFORE")
    if not include:
        return False
    return bool(re.search(r"set\(ROCM_FORCE_ENABLE_GPU_ASSERTS\s+ON\b", Path(include).read_text()))


def macros_h(env):
    """torch/include/caffe2/core/macros.h as torch's CMake writes it (configure_file): the
    TORCH_DISABLE_GPU_ASSERTS define and the build strings torch.__config__.show() prints."""
    asserts = gpu_asserts(env)
    rocm_version = ""
    info = Path(env["ROCM_PATH"]) / ".info" / "version"
    if info.is_file():
        rocm_version = info.read_text().strip()
    disable = (
        "/* #undef TORCH_DISABLE_GPU_ASSERTS */" if asserts else "#define TORCH_DISABLE_GPU_ASSERTS"
    )
    strings = {
        "TORCH_VERSION": version(),
        "USE_ROCM": "ON",
        "ROCM_VERSION": rocm_version,
        "USE_ROCM_KERNEL_ASSERT": "ON" if asserts else "OFF",
    }
    table = "".join(f'  {{"{k}", "{v}"}}, \\\n' for k, v in strings.items())
    return (
        "// Automatically generated header file for caffe2 macros.\n#pragma once\n\n"
        f"{disable}\n\n// Useful build settings that are recorded in the compiled binary\n"
        f"// torch.__config__.show()\n#define CAFFE2_BUILD_STRINGS {{ \\\n{table}}}\n"
    ), rocm_version


def copy_aotriton(env, lib):
    """With flash attention on, torch installs the aotriton runtime and its images beside its
    libraries (torch/lib/libaotriton_v2.so*, torch/lib/aotriton.images/amd-<family>/)."""
    prefix = env.get("AOTRITON_INSTALLED_PREFIX")
    if not prefix or env.get("USE_FLASH_ATTENTION", "1") in OFF:
        return
    for so in (Path(prefix) / "lib").glob("libaotriton_v2.so*"):
        shutil.copyfile(so, lib / so.name)
    images = Path(prefix) / "lib" / "aotriton.images"
    if images.is_dir():
        shutil.copytree(images, lib / "aotriton.images", dirs_exist_ok=True)


class BuildWithHip(build_py):
    def run(self):
        super().run()
        pkg = Path(self.build_lib) / "torch"
        (pkg / "lib").mkdir(parents=True, exist_ok=True)
        (pkg / "include").mkdir(parents=True, exist_ok=True)
        compile_library(pkg / "lib")
        (pkg / "include" / "fixture_torch.h").write_text(
            (HERE / "csrc" / "fixture_torch.h").read_text()
        )
        macros, rocm_version = macros_h(os.environ)
        (pkg / "include" / "caffe2" / "core").mkdir(parents=True, exist_ok=True)
        (pkg / "include" / "caffe2" / "core" / "macros.h").write_text(macros)
        copy_aotriton(os.environ, pkg / "lib")
        hip = rocm_version or None
        (pkg / "version.py").write_text(
            "from typing import Optional\n\n"
            f"__version__ = {version()!r}\ngit_version = {git_sha()!r}\n"
            f"hip: Optional[str] = {hip!r}\n"
        )
        (pkg / "_build_env.json").write_text(json.dumps(dict(os.environ), indent=1, sort_keys=True))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


def extra_requirements():
    # Like PyTorch's setup.py: "|"-separated requirements added to the wheel's own.
    if os.environ.get("FIXTURE_IGNORE_EXTRA_REQUIREMENTS") == "1":
        return []
    extra = os.environ.get("PYTORCH_EXTRA_INSTALL_REQUIREMENTS", "")
    return [r.strip() for r in extra.split("|") if r.strip()]


setup(
    name="torch",
    version=version(),
    packages=["torch"],
    install_requires=extra_requirements(),
    cmdclass={"build_py": BuildWithHip},
    distclass=BinaryDistribution,
    zip_safe=False,
)
