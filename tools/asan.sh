#!/usr/bin/env bash
# Run the C accelerator's tests against an AddressSanitizer/UBSan build of _speedups.c.
#
# The package and the tests are copied to a scratch directory with a sanitizer build of the
# extension in place of the installed one; the normal build is not touched. Needs gcc with
# libasan and libubsan, and the project's .venv (make test sets it up). About a minute.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
python=$root/.venv/bin/python
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

cp -r "$root/src/amqp_sansio" "$root/tests" "$scratch/"
rm -f "$scratch"/amqp_sansio/_speedups*.so
include=$("$python" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
suffix=$("$python" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
gcc -shared -fPIC -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
    -fno-sanitize-recover=undefined -Wall -Wextra -Wno-unused-parameter -Werror \
    -I"$include" "$root/src/amqp_sansio/_speedups.c" -o "$scratch/amqp_sansio/_speedups$suffix"

cd "$scratch"
# Python itself leaks at exit by design: leak detection off, everything else fatal.
ASAN_OPTIONS=detect_leaks=0 \
LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)" \
PYTHONPATH="$scratch" \
    "$python" -bb -m pytest -q -p no:cacheprovider -c "$root/pyproject.toml" --rootdir "$scratch" \
    tests/amqp_sansio/test_table_speedups.py tests/amqp_sansio/test_spec_speedups.py tests/amqp_sansio/test_table.py \
    tests/amqp_sansio/test_frames.py tests/amqp_sansio/test_fuzz.py \
    tests/amqp_sansio/test_spec.py --deselect tests/amqp_sansio/test_spec.py::test_checked_in_module_is_fresh \
    --deselect tests/amqp_sansio/test_spec.py::test_check_fails_on_a_stale_module
