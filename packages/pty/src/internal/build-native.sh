#!/bin/sh
# Builds the package's native helpers (src/internal/*.c) into dist/native, with the C compiler that
# node-pty's addon already needs. Run by the package's `build` script.
set -eu
cd "$(dirname "$0")/../.."
compiler=${CC:-cc}
if ! command -v "$compiler" >/dev/null 2>&1; then
  echo "@aleph/pty: no C compiler: '$compiler' was not found. Install one (Debian: apt-get install build-essential; macOS: xcode-select --install) or set CC." >&2
  exit 1
fi
mkdir -p dist/native
for source in src/internal/*.c; do
  "$compiler" -O2 -Wall -Wextra -o "dist/native/aleph-pty-$(basename "$source" .c)" "$source"
done
