# An overlay port built from this repository's own tree (no download):
#   vcpkg install cascade-rl --overlay-ports=<repo>/vcpkg/ports
# It installs the CMake package exactly as `cmake --install` does; the features turn
# on the optional targets, whose CUDA, NCCL and MPI come from the system (through
# vcpkg's cuda, nccl and mpi ports, which only check that the system has them); the
# default feature seccomp builds the sandbox's syscall filter with the system's
# libseccomp (found by the package's cascade_rl_libseccomp.cmake, there and later in
# the consumer's find_package).
set(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../../..")
set(VCPKG_BUILD_TYPE release)  # header-only: one configuration is enough

vcpkg_check_features(OUT_FEATURE_OPTIONS feature_options
  FEATURES
    cuda CASCADE_RL_WITH_CUDA
    mpi  CASCADE_RL_WITH_MPI
    nccl CASCADE_RL_WITH_NCCL
    seccomp CASCADE_RL_WITH_SECCOMP)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    -DCASCADE_RL_BUILD_TESTS=OFF
    -DCASCADE_RL_BUILD_BENCHMARKS=OFF
    -DCASCADE_RL_BUILD_EXAMPLES=OFF
    ${feature_options})
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(PACKAGE_NAME cascade_rl CONFIG_PATH share/cmake/cascade_rl)

file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
