#!/bin/sh
# make recipes AXOLOTL=/path/to/axolotl: runs `ftest --axolotl RECIPE --gpus 8`
# on each stock recipe of tests/recipes/axolotl.tsv, in the checkout (as
# `axolotl train` runs there, so that its deepspeed_configs/ paths resolve),
# with the base models' config.json from tests/fixtures/hf_cache, and prints
# one line per recipe: estimates (peak and verdict) or refuses (ftest's line).
# The checkout is not ours to ship: the test reads it where it lies.
# A second argument names another list of the same shape (axolotl_more.tsv),
# whose fifth column says what ftest is expected to do (`estimates`, or
# `refuses: TEXT`): a recipe that does otherwise is marked UNEXPECTED and the
# script exits 1.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
ax=${1:?usage: run_axolotl.sh /path/to/axolotl-checkout [LIST.tsv]}
list=${2:-$root/tests/recipes/axolotl.tsv}
ftest="$root/build/ftest"
est=0 ref=0 miss=0 bad=0
export HF_HUB_CACHE="$root/tests/fixtures/hf_cache"
grep -v '^#' "$list" | {
while IFS='	' read -r path family kind base expect; do
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
        got=$(printf 'estimates  %s GiB on the device (%s)' \
            "$(awk -v b="$peak" 'BEGIN { printf "%.1f", b / 1073741824 }')" "$verdict")
        est=$((est + 1))
        ok=$(case "${expect:-}" in ''|estimates) echo 1 ;; *) echo 0 ;; esac)
    else
        line=$(printf '%s\n' "$out" | tail -1)
        got="refuses    $line"
        ref=$((ref + 1))
        want=${expect#refuses: }
        ok=$(case "${expect:-}" in '') echo 1 ;; refuses:*) case "$line" in *"$want"*) echo 1 ;; *) echo 0 ;; esac ;; *) echo 0 ;; esac)
    fi
    [ "$ok" = 1 ] || { got="$got   UNEXPECTED (expected: $expect)"; bad=$((bad + 1)); }
    printf '%-48s %s\n' "$path" "$got"
done
echo "$est estimate, $ref refuse, $miss missing${bad:+, $bad unexpected}"
[ "$bad" -eq 0 ]
}
