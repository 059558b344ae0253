#!/usr/bin/env bash
# Installs the build in $1 into a temporary prefix and builds a user program against it
# twice: with pkg-config and with CMake's find_package. Checks the SONAME.
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" > "$tmp/install.log"
libdir=$(ls -d "$tmp"/prefix/lib*/ | head -n 1)
soname=$(readelf -d "$libdir/libqkern.so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = "libqkern.so.1" ] || { echo "SONAME is '$soname', expected libqkern.so.1"; exit 1; }
for f in include/qkern.h; do [ -f "$tmp/prefix/$f" ] || { echo "missing $f"; exit 1; }; done
[ -f "$libdir/libqkern.a" ] || { echo "missing libqkern.a"; exit 1; }
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cc "$here/consumer.c" -o "$tmp/consumer_pc" $(pkg-config --cflags --libs qkern) -Wl,-rpath,"$libdir"
"$tmp/consumer_pc"
cmake -S "$here" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" > "$tmp/cmake.log"
cmake --build "$tmp/cm" > "$tmp/cmake-build.log"
LD_LIBRARY_PATH="$libdir" "$tmp/cm/consumer"
echo "install check: pkg-config and find_package consumers built and ran; SONAME $soname"
