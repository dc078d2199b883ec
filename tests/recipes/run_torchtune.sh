#!/bin/sh
# make recipes-torchtune (and tests/torchtune.c): runs `ftest --torchtune
# CONFIG FLAGS` on each stock torchtune config of tests/recipes/torchtune.tsv
# (shipped in tests/recipes/torchtune/) and prints one line per config: the
# estimate (peak on the device and verdict) or ftest's refusal. A config that
# does otherwise than the list's third column says is marked UNEXPECTED and
# the script exits 1.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
list=${1:-$root/tests/recipes/torchtune.tsv}
ftest=${FTEST:-$root/build/ftest}
case $ftest in /*) ;; *) ftest=$(pwd)/$ftest ;; esac # each config runs from its folder
est=0 ref=0 bad=0
grep -v '^#' "$list" | {
while IFS='	' read -r path flags expect; do
    [ -n "$path" ] || continue
    [ "$flags" = - ] && flags=
    # shellcheck disable=SC2086
    out=$(cd "$root/tests/recipes/torchtune" && "$ftest" --torchtune "$path" $flags --json 2>&1)
    rc=$?
    if [ $rc -le 1 ]; then
        peak=$(printf '%s\n' "$out" | sed -n 's/.*"device_used_bytes":[[:space:]]*\([0-9.e+]*\).*/\1/p' | head -1)
        verdict=$(printf '%s\n' "$out" | sed -n 's/.*"result":[[:space:]]*"\([a-z_]*\)".*/\1/p' | head -1)
        got=$(printf 'estimates  %s GiB on the device (%s)' \
            "$(awk -v b="$peak" 'BEGIN { printf "%.1f", b / 1073741824 }')" "$verdict")
        est=$((est + 1))
        ok=$(case "$expect" in estimates) [ -n "$peak" ] && echo 1 || echo 0 ;; *) echo 0 ;; esac)
    else
        line=$(printf '%s\n' "$out" | tail -1)
        got="refuses    $line"
        ref=$((ref + 1))
        want=${expect#refuses: }
        ok=$(case "$expect" in refuses:*) case "$line" in *"$want"*) echo 1 ;; *) echo 0 ;; esac ;; *) echo 0 ;; esac)
        [ $rc -eq 2 ] || ok=0
    fi
    [ "$ok" = 1 ] || { got="$got   UNEXPECTED (expected: $expect)"; bad=$((bad + 1)); }
    printf '%-40s %-22s %s\n' "$path" "$flags" "$got"
done
echo "$est estimate, $ref refuse, $bad unexpected"
[ "$bad" -eq 0 ]
}
