# Finds libseccomp >= 2.5 (cascade_rl::verify's syscall filter: SCMP_ACT_NOTIFY and
# 32-bit argument comparisons) and defines the imported target cascade_rl::libseccomp;
# sets cascade_rl_libseccomp_FOUND. Included by cmake/verify.cmake, and installed next
# to the package configuration, which includes it for the verify component when the
# package was built with the filter. pkg-config gives hints where it is there;
# find_path/find_library do the finding, so a prefix on CMAKE_PREFIX_PATH (vcpkg,
# Conan, a custom install) works too. Debian: libseccomp-dev.
if(TARGET cascade_rl::libseccomp)
  set(cascade_rl_libseccomp_FOUND TRUE)
  return()
endif()
set(cascade_rl_libseccomp_FOUND FALSE)
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(PC_CASCADE_RL_LIBSECCOMP QUIET libseccomp)
endif()
find_path(CASCADE_RL_LIBSECCOMP_INCLUDE_DIR seccomp.h HINTS ${PC_CASCADE_RL_LIBSECCOMP_INCLUDE_DIRS})
find_library(CASCADE_RL_LIBSECCOMP_LIBRARY NAMES seccomp HINTS ${PC_CASCADE_RL_LIBSECCOMP_LIBRARY_DIRS})
mark_as_advanced(CASCADE_RL_LIBSECCOMP_INCLUDE_DIR CASCADE_RL_LIBSECCOMP_LIBRARY)
if(CASCADE_RL_LIBSECCOMP_INCLUDE_DIR AND CASCADE_RL_LIBSECCOMP_LIBRARY)
  file(STRINGS "${CASCADE_RL_LIBSECCOMP_INCLUDE_DIR}/seccomp.h" _cascade_rl_seccomp_version
       REGEX "^#define[ \t]+SCMP_VER_(MAJOR|MINOR)[ \t]+[0-9]+")
  string(REGEX REPLACE ".*SCMP_VER_MAJOR[ \t]+([0-9]+).*" "\\1" _cascade_rl_seccomp_major "${_cascade_rl_seccomp_version}")
  string(REGEX REPLACE ".*SCMP_VER_MINOR[ \t]+([0-9]+).*" "\\1" _cascade_rl_seccomp_minor "${_cascade_rl_seccomp_version}")
  if("${_cascade_rl_seccomp_major}.${_cascade_rl_seccomp_minor}" VERSION_GREATER_EQUAL 2.5)
    add_library(cascade_rl::libseccomp UNKNOWN IMPORTED)
    set_target_properties(cascade_rl::libseccomp PROPERTIES
      IMPORTED_LOCATION "${CASCADE_RL_LIBSECCOMP_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CASCADE_RL_LIBSECCOMP_INCLUDE_DIR}")
    set(cascade_rl_libseccomp_FOUND TRUE)
  endif()
  unset(_cascade_rl_seccomp_version)
  unset(_cascade_rl_seccomp_major)
  unset(_cascade_rl_seccomp_minor)
endif()
