# Cross build for arm (aarch64 Linux; the Makefile picks cmake/toolchains/<arch>.cmake) with Debian's gcc-aarch64-linux-gnu; tests and qk run under
# qemu-user (Debian's qemu-user) with the arm64 sysroot. QEMU_CPU in the environment picks
# the emulated CPU (max: every feature qemu has, BF16 included; cortex-a72: no BF16).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Programs run against Debian's multiarch arm64 libraries (libc6:arm64, libgomp1:arm64,
# libjansson4:arm64 under /lib/aarch64-linux-gnu), hence -L /: with the cross sysroot's older
# libc (2.36-8cross1) every program that starts a second thread hangs under qemu-user 7.2.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)
# arm64 jansson (libjansson-dev:arm64) through pkg-config
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_SYSROOT_DIR} /)
