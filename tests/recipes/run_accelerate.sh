#!/bin/sh
# make recipes-accelerate ACCELERATE=DIR PEFT=DIR TRL=DIR: runs
# `ftest --accelerate-config CONFIG --model MODEL --stack 2026-11 FLAGS` on
# each published accelerate config of tests/recipes/accelerate.tsv and prints
# one line per config: estimates (peak on the device) or refuses (ftest's
# line), and UNEXPECTED where that differs from the file's expectation
# (exit 1). Each DIR is a checkout or a git directory of that repository;
# a config is read at the commit the file names (git show) when DIR is a git
# directory, else as the checkout has it. A deepspeed_config_file the config
# names is read beside it, as accelerate reads it.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
ftest="$root/build/ftest"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ftest-recipes-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
est=0 ref=0 miss=0 bad=0

# repo commit path -> the file under $tmp (empty when it cannot be read)
fetch() {
    case "$1" in
    accelerate) dir=${ACCELERATE:-} ;;
    peft) dir=${PEFT:-} ;;
    trl) dir=${TRL:-} ;;
    *) dir= ;;
    esac
    out="$tmp/$1/$3"
    mkdir -p "$(dirname "$out")"
    if [ -n "$dir" ] && [ -f "$dir/$3" ]; then
        cp "$dir/$3" "$out"
    elif [ -n "$dir" ] && git -C "$dir" cat-file -e "$2:$3" 2>/dev/null; then
        git -C "$dir" show "$2:$3" > "$out"
    else
        return 1
    fi
    ds=$(sed -n 's/^ *deepspeed_config_file: *\([^ #]*\).*/\1/p' "$out" | head -1)
    if [ -n "$ds" ]; then
        rel=$(realpath -m --relative-to=/ "/$(dirname "$3")/$ds" | sed 's|^/||')
        mkdir -p "$tmp/$1/$(dirname "$rel")"
        if [ -f "$dir/$rel" ]; then cp "$dir/$rel" "$tmp/$1/$rel"
        else git -C "$dir" show "$2:$rel" > "$tmp/$1/$rel" 2>/dev/null; fi
    fi
    echo "$out"
}

grep -v '^#' "$root/tests/recipes/accelerate.tsv" > "$tmp/list"
while IFS='	' read -r repo commit path model flags expect; do
    [ -n "$repo" ] || continue
    [ "$flags" = - ] && flags=
    if ! file=$(fetch "$repo" "$commit" "$path"); then
        printf '%-60s missing (set %s)\n' "$repo/$path" "$(echo "$repo" | tr a-z A-Z)"
        miss=$((miss + 1))
        continue
    fi
    # shellcheck disable=SC2086
    out=$("$ftest" --model "$model" --stack 2026-11 $flags --accelerate-config "$file" --json 2>&1)
    rc=$?
    if [ $rc -le 1 ]; then
        peak=$(printf '%s\n' "$out" | sed -n 's/.*"device_used_bytes":[[:space:]]*\([0-9.e+]*\).*/\1/p' | head -1)
        got="estimates  $(awk -v b="$peak" 'BEGIN { printf "%.1f", b / 1073741824 }') GiB on the device"
        est=$((est + 1))
        ok=$([ "$expect" = estimates ] && echo 1 || echo 0)
    else
        line=$(printf '%s\n' "$out" | tail -1)
        got="refuses    $line"
        ref=$((ref + 1))
        want=${expect#refuses: }
        ok=$(case "$expect" in refuses:*) case "$line" in *"$want"*) echo 1 ;; *) echo 0 ;; esac ;; *) echo 0 ;; esac)
    fi
    [ "$ok" = 1 ] || { got="$got   UNEXPECTED (expected: $expect)"; bad=$((bad + 1)); }
    printf '%-60s %s %s\n' "$repo/$path" "$flags" "$got"
done < "$tmp/list"
echo "$est estimate, $ref refuse, $miss missing, $bad unexpected"
[ "$bad" -eq 0 ]
