"""Conan 2 recipe for cascade_rl, a header-only C++20 library.

Run from the repository root: `conan create conan/ --build=missing`
(add `-o "&:with_cuda=True"` and friends for the optional parts).
The version is read from the top-level CMakeLists.txt, the one place it is written.
"""
import os
import re

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.files import copy, load
from conan.tools.layout import basic_layout


class CascadeRlConan(ConanFile):
    name = "cascade_rl"
    license = "MIT"
    description = ("Cascade RL (Nemotron-Cascade) algorithms for C++ trainers: GRPO and "
                   "friends, policy losses with dL/dlogp, MOPD, cascades of RL stages")
    topics = ("reinforcement-learning", "grpo", "llm", "header-only", "cuda")
    package_type = "header-library"
    # Settings only to check the C++ standard; package_id() clears them: one package
    # serves every configuration.
    settings = "os", "arch", "compiler", "build_type"
    options = {
        "with_engine": [True, False],  # cascade_rl::cascade (needs nlohmann_json), and on
                                       # Linux cascade_rl::verify (sandboxed rewards)
        "with_cuda": [True, False],    # cascade_rl::cuda (system CUDA toolkit)
        "with_mpi": [True, False],     # cascade_rl::mpi (system MPI)
        "with_nccl": [True, False],    # cascade_rl::nccl (system NCCL; needs cuda and mpi)
        "with_seccomp": [True, False],  # cascade_rl::verify's syscall filter (system libseccomp
                                        # >= 2.5, Debian: libseccomp-dev); Linux with the engine
    }
    default_options = {
        "with_engine": True,
        "with_cuda": False,
        "with_mpi": False,
        "with_nccl": False,
        "with_seccomp": True,
    }
    no_copy_source = True

    @property
    def _repository_root(self):
        # The recipe lives in conan/ of the repository; set_version and export_sources
        # run at export time, from there.
        return os.path.join(self.recipe_folder, "..")

    def set_version(self):
        cmakelists = load(self, os.path.join(self._repository_root, "CMakeLists.txt"))
        match = re.search(r"project\(cascade_rl\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", cmakelists)
        if not match:
            raise ConanInvalidConfiguration("no 'project(cascade_rl VERSION x.y.z' in CMakeLists.txt")
        self.version = match.group(1)

    def export_sources(self):
        for pattern in ("include/*", "kernels/*", "LICENSE", "README.md", "CHANGELOG.md"):
            copy(self, pattern, src=self._repository_root, dst=self.export_sources_folder)

    def layout(self):
        basic_layout(self, src_folder=".")

    def config_options(self):
        if self.settings.os != "Linux":  # no sandbox, so no syscall filter
            del self.options.with_seccomp

    def requirements(self):
        if self.options.with_engine:
            self.requires("nlohmann_json/3.11.3")

    def validate(self):
        if self.settings.compiler.get_safe("cppstd"):
            check_min_cppstd(self, 20)
        if self.options.with_nccl and not (self.options.with_cuda and self.options.with_mpi):
            raise ConanInvalidConfiguration("with_nccl needs with_cuda and with_mpi "
                                            "(NCCL's unique id is bootstrapped over MPI)")

    def package_id(self):
        self.info.clear()

    def package(self):
        copy(self, "LICENSE", src=self.source_folder, dst=os.path.join(self.package_folder, "licenses"))
        # The CUDA executors install next to the host headers, as CMake installs them.
        copy(self, "*", src=os.path.join(self.source_folder, "include"),
             dst=os.path.join(self.package_folder, "include"))
        copy(self, "*.hpp", src=os.path.join(self.source_folder, "kernels"),
             dst=os.path.join(self.package_folder, "include"))
        copy(self, "*.cuh", src=os.path.join(self.source_folder, "kernels"),
             dst=os.path.join(self.package_folder, "include"))

    def package_info(self):
        # The same file and target names as the CMake package: find_package(cascade_rl).
        self.cpp_info.set_property("cmake_file_name", "cascade_rl")
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        self._component("core", "cascade_rl::cascade_rl", system_libs=["pthread"])  # exec::par
        if self.options.with_engine:
            self._component("cascade", "cascade_rl::cascade",
                            requires=["core", "nlohmann_json::nlohmann_json"],
                            system_libs=["pthread"])
            if self.settings.os == "Linux":  # the sandbox needs Linux namespaces and cgroups
                # The syscall filter links the system's libseccomp, as the CMake package
                # does when it finds it (CASCADE_RL_VERIFY_SECCOMP=1 turns it on).
                seccomp = bool(self.options.with_seccomp)
                self._component("verify", "cascade_rl::verify", requires=["cascade"],
                                system_libs=["pthread"] + (["seccomp"] if seccomp else []),
                                defines=["CASCADE_RL_VERIFY_SECCOMP=1"] if seccomp else [])
        if self.options.with_cuda:
            # CUDA, MPI and NCCL come from the system, as vcpkg's cuda, mpi and nccl ports.
            self._component("cuda", "cascade_rl::cuda", requires=["core"], system_libs=["cudart"])
        if self.options.with_mpi:
            self._component("mpi", "cascade_rl::mpi", requires=["core"],
                            system_libs=["mpi_cxx", "mpi"])  # Debian: libopenmpi-dev
        if self.options.with_nccl:
            self._component("nccl", "cascade_rl::nccl", requires=["cuda", "mpi"],
                            system_libs=["nccl"])

    def _component(self, name, target, requires=(), system_libs=(), defines=()):
        component = self.cpp_info.components[name]
        component.set_property("cmake_target_name", target)
        component.requires = list(requires)
        component.system_libs = list(system_libs)
        component.defines = list(defines)
        component.bindirs = []
        component.libdirs = []
