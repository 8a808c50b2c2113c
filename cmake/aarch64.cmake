# Toolchain file for an aarch64 (arm64) Linux cross build with Debian's cross compiler
# (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross) and libraries of Debian's arm64 multiarch packages
# (libcunit1-dev:arm64); the tests run under qemu-user (qemu-aarch64, the CPU model from
# QEMU_CPU). scripts/test_aarch64.sh
# uses it with -DGPLAN_KERNELS_ONLY=ON:
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64.cmake -DGPLAN_KERNELS_ONLY=ON
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(GP_AARCH64_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${GP_AARCH64_TRIPLE}-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE ${GP_AARCH64_TRIPLE})
# The cross libc (libc6-dev-arm64-cross) under /usr/aarch64-linux-gnu; the multiarch libraries in
# /usr/lib/aarch64-linux-gnu with their headers in /usr/include, found through the root "/".
# GPLAN_AARCH64_SYSROOT (optional): a folder where arm64 packages were unpacked (dpkg -x), searched
# first: the whole project's libraries without installing them (bench/quant-notes.md); point
# pkg-config there too (PKG_CONFIG_LIBDIR, PKG_CONFIG_SYSROOT_DIR).
set(CMAKE_FIND_ROOT_PATH ${GPLAN_AARCH64_SYSROOT} /usr/${GP_AARCH64_TRIPLE} /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Programs link statically (but for a sysroot's build, whose libraries pkg-config names as shared
# objects): qemu-user then needs no arm64 loader and C library at run time (with -L
# /usr/aarch64-linux-gnu the cross libc's loader met the multiarch libc6:arm64, a later build of
# glibc, and pthread_create looped forever in their mismatched stack cache).
if(NOT GPLAN_AARCH64_SYSROOT)
  set(CMAKE_EXE_LINKER_FLAGS_INIT -static)
endif()
# ctest runs each test binary through qemu-user.
find_program(GP_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(GP_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${GP_QEMU_AARCH64})
endif()
