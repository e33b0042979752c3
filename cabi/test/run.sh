#!/bin/sh
# run.sh: build and run the cabi C tests (make cabi-test). The registry is
# built as a shared object, as in the real library, so its own statics never
# share a page with the test's static buffers.
set -eu
cd "$(dirname "$0")/../.."
CC=${CC:-cc}
OUT=out/cabi/test
mkdir -p "$OUT/bench"
STD="-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pthread -Icabi/ibverbs -Icabi/include"
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -g"

build() { # dir flags...
	dir=$1
	shift
	$CC $STD "$@" -fPIC -shared -o "$dir/libmemreg.so" cabi/ibverbs/memreg.c
	$CC $STD "$@" -o "$dir/memreg_test" cabi/test/memreg_test.c -L"$dir" -lmemreg -Wl,-rpath,"$PWD/$dir"
}
build "$OUT" $SAN
build "$OUT/bench" -O2 # timings without the sanitizers

rc=0
echo "== memreg (VMAs by PROCMAP_QUERY where the kernel has it)"
"$OUT/memreg_test" || rc=1
echo "== memreg (VMAs from the text of /proc/self/maps: older kernels' path)"
"$OUT/memreg_test" --text-maps || rc=1
echo "== memreg timings (-O2, no sanitizers)"
"$OUT/bench/memreg_test" --bench || rc=1
if [ $rc -eq 0 ]; then echo "cabi tests: PASS"; else echo "cabi tests: FAIL"; fi
exit $rc
