#!/usr/bin/env bash
# Compares the SASS of the CUDA objects two builds share: `scripts/sass_diff.sh OLD_BUILD NEW_BUILD`.
# For a change that moves kernel code without changing it (a file split, a rename), the instructions must
# stay the same. Anonymous-namespace hashes (they follow the file) and instruction addresses are removed
# before comparing; the source-path `identifier` line differs whenever the folders do. Needs cuobjdump and
# nvdisasm (the GPU machine has them; the toolkit on the CPU machines has neither: PyPI's wheels
# nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm hold both, in nvidia/cu13/bin, for `pip download --no-deps`
# and unzip; put that folder on PATH). Prints one line per object, and the first differences.
set -u
[ $# -eq 2 ] || { echo "usage: $0 OLD_BUILD NEW_BUILD" >&2; exit 2; }
A=$1; B=$2
norm() {
  cuobjdump -sass "$1" 2>/dev/null |
    sed -E 's/_GLOBAL__N__[0-9a-f]+_[0-9]+_[A-Za-z0-9_]+_[0-9a-f]+//g; s@/\*[0-9a-f]{4,}\*/@@g' |
    grep -v -e '^\s*$' -e 'identifier = '
}
status=0
for o in $(cd "$A" && find . -name '*.cu.o' | sort); do
  [ -f "$B/$o" ] || { echo "only in $A: $o"; continue; }
  norm "$A/$o" > /tmp/sass_a.$$; norm "$B/$o" > /tmp/sass_b.$$
  if cmp -s /tmp/sass_a.$$ /tmp/sass_b.$$; then
    echo "identical  $o ($(wc -l < /tmp/sass_a.$$) lines)"
  else
    status=1
    echo "DIFFERENT  $o"; diff /tmp/sass_a.$$ /tmp/sass_b.$$ | head -8
  fi
done
rm -f /tmp/sass_a.$$ /tmp/sass_b.$$
exit $status
