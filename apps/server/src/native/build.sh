#!/bin/sh
# Builds dist/native/release-memory.node (release-memory.c), with which the idle server gives the
# C heap's free pages back to the system. Optional: without a C compiler, or off Linux, the server
# runs as before and keeps those pages. Run by the package's `build` script.
set -eu
cd "$(dirname "$0")/../.."
[ "$(uname -s)" = Linux ] || exit 0
compiler=${CC:-cc}
if ! command -v "$compiler" >/dev/null 2>&1; then
  echo "@aleph/server: no C compiler ('$compiler'): the idle server keeps its freed C heap (set CC to build release-memory.node)" >&2
  exit 0
fi
mkdir -p dist/native
"$compiler" -O2 -Wall -Wextra -shared -fPIC -o dist/native/release-memory.node src/native/release-memory.c
