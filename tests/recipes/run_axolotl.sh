#!/bin/sh
# make recipes AXOLOTL=/path/to/axolotl: runs `ftest --axolotl RECIPE --gpus 8`
# on each stock recipe of tests/recipes/axolotl.tsv, in the checkout (as
# `axolotl train` runs there, so that its deepspeed_configs/ paths resolve),
# with the base models' config.json from tests/fixtures/hf_cache, and prints
# one line per recipe: estimates (peak and verdict) or refuses (ftest's line).
# The checkout is not ours to ship: the test reads it where it lies.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
ax=${1:?usage: run_axolotl.sh /path/to/axolotl-checkout}
ftest="$root/build/ftest"
est=0 ref=0 miss=0
export HF_HUB_CACHE="$root/tests/fixtures/hf_cache"
grep -v '^#' "$root/tests/recipes/axolotl.tsv" | {
while IFS='	' read -r path family kind base; do
    [ -n "$path" ] || continue
    if [ ! -f "$ax/$path" ]; then
        printf '%-48s missing from the checkout\n' "$path"
        miss=$((miss + 1))
        continue
    fi
    out=$(cd "$ax" && "$ftest" --axolotl "$path" --gpus 8 --json 2>&1)
    rc=$?
    if [ $rc -le 1 ]; then
        peak=$(printf '%s\n' "$out" | sed -n 's/.*"device_used_bytes":[[:space:]]*\([0-9.e+]*\).*/\1/p' | head -1)
        verdict=$(printf '%s\n' "$out" | sed -n 's/.*"result":[[:space:]]*"\([a-z_]*\)".*/\1/p' | head -1)
        printf '%-48s estimates  %s GiB on the device (%s)\n' "$path" \
            "$(awk -v b="$peak" 'BEGIN { printf "%.1f", b / 1073741824 }')" "$verdict"
        est=$((est + 1))
    else
        printf '%-48s refuses    %s\n' "$path" "$(printf '%s\n' "$out" | tail -1)"
        ref=$((ref + 1))
    fi
done
echo "$est estimate, $ref refuse, $miss missing"
}
