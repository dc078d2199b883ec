#!/usr/bin/env bash
# make mutation: does the suite notice when the physics is wrong?
#
# Each line of tests/mutation/edits.tsv is one single-line edit of the
# estimator (a dtype size doubled, a term dropped, a wrong sharding divisor, a
# time term scaled). On a scratch copy of the tree (build-mutation/tree) this
# applies each edit alone, rebuilds incrementally, runs the whole Check suite
# and `ftest check` over the committed records, restores the file, and records
#   CAUGHT     a test outside tests/docs.c failed, or `ftest check` put more
#              records outside tolerance than it does on the unedited tree;
#   SURVIVED   nothing failed (or only tests/docs.c, which compares the docs
#              with the program's own output and so proves nothing about the
#              physics: those are marked "docs only");
#   STALE      the edit's text is not found exactly once in its file;
#   BUILD-FAIL the edit does not compile (not a catch: edits should compile);
#   TIMEOUT    the suite ran past the per-edit limit (counted as caught: a
#              hang is noticed, but the table says so).
# Prints a table (also written as Markdown to build-mutation/report.md) and the
# caught fraction; exits 1 when fewer than 90% are caught or any edit is STALE,
# 2 when the unedited tree does not pass its own suite.
#
# Environment: MUTATION_ONLY=regex runs only the edits whose file or
# description matches; MUTATION_LIMIT_S bounds one edit's suite (default 240).
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
edits="$root/tests/mutation/edits.tsv"
work="$root/build-mutation"
tree="$work/tree"
limit_s=${MUTATION_LIMIT_S:-240}
only=${MUTATION_ONLY:-}
export OMP_NUM_THREADS=1
# The build under test is plain -O2 (no -g: smaller objects, faster links).
mk=(make --no-print-directory -s BUILD=build OPT=-O2)

die() { echo "mutation: $*" >&2; exit 2; }

# The scratch copy: the tracked files as they are in the work tree (edits not
# yet committed included), the fitted profiles and the docs.
# (A tracked file deleted in the work tree is simply not copied.)
rm -rf "$tree"
mkdir -p "$tree" || die "cannot create $tree"
(cd "$root" && git ls-files -z | xargs -0 cp --parents -t "$tree" 2>/dev/null)
[ -f "$tree/Makefile" ] || die "cannot copy the tree (git ls-files)"
{ cp -r "$root/calibrate/profiles" "$tree/calibrate/" && cp -r "$root/docs" "$tree/"; } ||
    die "cannot copy calibrate/profiles and docs"
cd "$tree" || die "no $tree"

# Counts of `ftest check`'s summary line: "N records, K outside tolerance, U unreadable".
check_counts() {
    ./build/ftest check --quiet calibrate/records/*.jsonl 2>&1 </dev/null |
        sed -n 's/^\([0-9]*\) records, \([0-9]*\) outside tolerance, \([0-9]*\) unreadable.*/\2 \3/p' | tail -1
}

# Failed tests in a Check log ("file:line:F:tcase:test:..." or ":E:").
failures() { grep -E '^[^:]+:[0-9]+:[FE]:' "$1" | cut -d: -f1,5 | sort -u; }

echo "mutation: building the unedited tree in $tree"
t0=$(date +%s)
"${mk[@]}" build/run_tests build/ftest build/ftrain >"$work/baseline-build.log" 2>&1 ||
    { tail -20 "$work/baseline-build.log"; die "the unedited tree does not build"; }
CK_VERBOSITY=normal timeout "$limit_s" ./build/run_tests >"$work/baseline-suite.log" 2>&1 ||
    { tail -20 "$work/baseline-suite.log"; die "the unedited tree fails its own suite"; }
base_counts=$(check_counts)
[ -n "$base_counts" ] || die "ftest check printed no summary on the unedited tree"
read -r base_out base_bad <<<"$base_counts"
echo "mutation: unedited tree passes the suite; ftest check: $base_out outside tolerance, $base_bad unreadable ($(($(date +%s) - t0)) s)"
rm -rf "$work/pristine"
cp -a build "$work/pristine" || die "cannot save the build"

n=0 caught=0 survived=0 stale=0 buildfail=0 docs_only=0
report="$work/report.md"
{
    echo "| # | file | the edit breaks | result | caught by |"
    echo "|---|---|---|---|---|"
} >"$report"

while IFS=$'\t' read -r file find repl desc; do
    case "$file" in '' | '#'*) continue ;; esac
    if [ -n "$only" ] && ! printf '%s %s\n' "$file" "$desc" | grep -Eq -- "$only"; then continue; fi
    n=$((n + 1))
    status="" by=""
    te=$(date +%s)
    hits=$(grep -F -o -- "$find" "$file" 2>/dev/null | wc -l)
    if [ ! -f "$file" ] || [ "$hits" != 1 ] || [ "$find" = "$repl" ]; then
        status=STALE
        by="found $hits times"
    else
        cp -p "$file" "$work/original.c"
        # Literal replacement of the one occurrence (awk index/substr: no regex).
        FIND="$find" REPL="$repl" awk '{
            i = index($0, ENVIRON["FIND"])
            if (i) $0 = substr($0, 1, i - 1) ENVIRON["REPL"] substr($0, i + length(ENVIRON["FIND"]))
            print }' "$work/original.c" >"$file"
        if ! "${mk[@]}" build/run_tests build/ftest >"$work/edit-$n-build.log" 2>&1 </dev/null; then
            status=BUILD-FAIL
            by=$(grep -m1 -E 'error' "$work/edit-$n-build.log" | cut -c1-80)
        else
            CK_VERBOSITY=normal timeout "$limit_s" ./build/run_tests >"$work/edit-$n-suite.log" 2>&1 </dev/null
            rc=$?
            fails=$(failures "$work/edit-$n-suite.log")
            real=$(printf '%s\n' "$fails" | grep -v '^tests/docs.c:' | grep -v '^$')
            counts=$(check_counts)
            read -r out bad <<<"${counts:-x x}"
            check_caught=0
            if [ "$out" = x ] || [ "$out" -gt "$base_out" ] || [ "$bad" -gt "$base_bad" ]; then
                check_caught=1
            fi
            if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
                status=TIMEOUT
                by="suite past ${limit_s} s"
            elif [ -z "$fails" ] && [ "$rc" != 0 ]; then
                status=CAUGHT # the runner itself failed (a crash outside any test)
                by="suite exit $rc"
            elif [ -n "$real" ] || [ "$check_caught" = 1 ]; then
                status=CAUGHT
                by=$(printf '%s\n' "$real" | cut -d: -f2 | head -3 | paste -sd, - | sed 's/,/, /g')
                n_real=$(printf '%s\n' "$real" | grep -c .)
                [ "$n_real" -gt 3 ] && by="$by (+$((n_real - 3)))"
                if [ "$check_caught" = 1 ]; then
                    by="${by:+$by, }ftest check ($out outside)"
                fi
            else
                status=SURVIVED
                [ -n "$fails" ] && { by="docs only"; docs_only=$((docs_only + 1)); }
            fi
        fi
        cp -p "$work/original.c" "$file"
        cp -a "$work/pristine/." build/
    fi
    case "$status" in
    CAUGHT | TIMEOUT) caught=$((caught + 1)) ;;
    SURVIVED) survived=$((survived + 1)) ;;
    STALE) stale=$((stale + 1)) ;;
    BUILD-FAIL) buildfail=$((buildfail + 1)) ;;
    esac
    printf '%3d %-10s %-32s %-52s %s (%d s)\n' "$n" "$status" "${file#estimator/}" \
        "${desc:0:52}" "$by" "$(($(date +%s) - te))"
    esc() { printf '%s' "$1" | sed 's/|/\\|/g'; }
    printf '| %d | %s | %s | %s | %s |\n' "$n" "${file#estimator/}" "$(esc "$desc")" "$status" \
        "$(esc "$by")" >>"$report"
done <"$edits"

[ "$n" -gt 0 ] || die "no edits in $edits"
pct=$((100 * caught / n))
docs_note=""
[ "$docs_only" -gt 0 ] && docs_note=" ($docs_only of them failing tests/docs.c only)"
summary="caught $caught of $n edits ($pct%): $survived survived$docs_note, $stale stale, $buildfail failed to build; $(($(date +%s) - t0)) s"
echo
echo "mutation: $summary"
printf '\n%s\n' "$summary" >>"$report"
echo "mutation: table in ${report#"$root"/}"
[ "$stale" = 0 ] || { echo "mutation: $stale edit(s) are STALE: refresh tests/mutation/edits.tsv"; exit 1; }
[ $((10 * caught)) -ge $((9 * n)) ] || { echo "mutation: below 90%"; exit 1; }
exit 0
