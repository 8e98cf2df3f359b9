"""Checks the Conan recipes without Conan (it cannot be installed here): both files
compile, the main recipe's own set_version() reads the version that CMakeLists.txt
sets, and its package_info() declares the CMake file and target names of the CMake
package for every option. Conan's modules are replaced by minimal stand-ins for the few names the recipe
imports; only `load` does real work (it reads a file), as Conan's does.

usage: python3 check_conan_recipe.py <source dir> <expected version>
"""
import collections
import importlib.util
import pathlib
import sys
import types


def install_conan_stand_ins():
    def module(name, **members):
        m = types.ModuleType(name)
        m.__dict__.update(members)
        sys.modules[name] = m
        return m

    class ConanFile:  # the recipe only subclasses it
        pass

    class ConanInvalidConfiguration(Exception):
        pass

    def unused(*args, **kwargs):
        raise AssertionError("not expected to be called by set_version()")

    module("conan", ConanFile=ConanFile)
    module("conan.errors", ConanInvalidConfiguration=ConanInvalidConfiguration)
    module("conan.tools")
    module("conan.tools.build", check_min_cppstd=unused, can_run=unused)
    module("conan.tools.files", copy=unused,
           load=lambda conanfile, path: pathlib.Path(path).read_text())
    module("conan.tools.layout", basic_layout=unused)
    module("conan.tools.cmake", CMake=unused, cmake_layout=unused)


class CppInfo:
    """Records what package_info() declares, like Conan's cpp_info."""

    def __init__(self):
        self.properties = {}
        self.components = collections.defaultdict(CppInfo)
        self.requires = []
        self.system_libs = []
        self.defines = []

    def set_property(self, name, value):
        self.properties[name] = value


def check_package_info(recipe_class):
    recipe = recipe_class()
    recipe.options = types.SimpleNamespace(with_engine=True, with_cuda=True, with_mpi=True,
                                           with_nccl=True, with_seccomp=True)
    recipe.settings = types.SimpleNamespace(os="Linux")
    recipe.cpp_info = CppInfo()
    recipe.package_info()
    info = recipe.cpp_info
    if info.properties.get("cmake_file_name") != "cascade_rl":
        sys.exit("conanfile.py: cmake_file_name is not cascade_rl")
    expected = {"core": "cascade_rl::cascade_rl", "cascade": "cascade_rl::cascade",
                "cuda": "cascade_rl::cuda", "mpi": "cascade_rl::mpi", "nccl": "cascade_rl::nccl",
                "verify": "cascade_rl::verify"}
    targets = {name: c.properties.get("cmake_target_name") for name, c in info.components.items()}
    if targets != expected:
        sys.exit(f"conanfile.py: components declare {targets}, expected {expected}")
    verify = info.components["verify"]
    if "seccomp" not in verify.system_libs or "CASCADE_RL_VERIFY_SECCOMP=1" not in verify.defines:
        sys.exit("conanfile.py: the verify component does not link libseccomp with "
                 "CASCADE_RL_VERIFY_SECCOMP=1 (with_seccomp=True)")
    for name, component in info.components.items():
        for required in component.requires:
            if "::" not in required and required not in info.components:
                sys.exit(f"conanfile.py: component {name} requires unknown component {required}")


def main():
    source, expected = pathlib.Path(sys.argv[1]), sys.argv[2]
    recipes = [source / "conan" / "conanfile.py", source / "conan" / "test_package" / "conanfile.py"]
    for recipe in recipes:
        compile(recipe.read_text(), str(recipe), "exec")  # what py_compile checks, without writing

    install_conan_stand_ins()
    spec = importlib.util.spec_from_file_location("cascade_rl_recipe", recipes[0])
    recipe_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe_module)
    recipe = recipe_module.CascadeRlConan()
    recipe.recipe_folder = str(recipes[0].parent)  # as Conan sets it at export time
    recipe.set_version()
    if recipe.version != expected:
        sys.exit(f"conanfile.py reads version {recipe.version}, CMakeLists.txt says {expected}")
    if recipe.name != "cascade_rl":
        sys.exit(f"conanfile.py names the package {recipe.name}, expected cascade_rl")
    check_package_info(recipe_module.CascadeRlConan)
    print(f"conan recipes compile; the recipe reads version {recipe.version} and declares "
          "the CMake package's targets")


if __name__ == "__main__":
    main()
