#!/bin/sh
# mkman.sh PROGRAM NAME SUMMARY > NAME.1
#
# A section-1 man page whose body is PROGRAM --help verbatim, so the page and
# the help cannot drift apart (tests/frontdoor.c reads the body back and
# compares it with --help). roff needs two escapes in no-fill text: a
# backslash is written \e, and a line starting with . or ' gets a leading \&.
set -eu
prog=$1 name=$2 summary=$3
upper=$(printf '%s' "$name" | tr '[:lower:]' '[:upper:]')
# SEE ALSO names the other program, never the page itself.
if [ "$name" = ftest ]; then other=ftrain; else other=ftest; fi
synopsis=$("$prog" --help | sed -n '1s/^usage: //p')
cat <<ROFF
.TH $upper 1 "" "$name" "User Commands"
.SH NAME
$name \\- $summary
.SH SYNOPSIS
.B $name
$(printf '%s' "${synopsis#"$name"}" | sed -e 's/^ *//' -e 's/\\/\\e/g')
.SH DESCRIPTION
The text below is \\fB$name \\-\\-help\\fR.
.PP
.nf
ROFF
"$prog" --help | sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/"
cat <<ROFF
.fi
.SH FILES
Models, the GPU and instance catalogs, the fitted profiles and the records are
read from \\fB\$FTEST_DATA_DIR\\fR when set; else from beside the binary: the
source tree above its build folder, or, installed by \\fBmake install\\fR,
\\fIPREFIX\\fR/share/ftest beside \\fIPREFIX\\fR/bin; else from the current
folder when it holds models/; else from the source tree it was built in.
.PP
The documents named above (docs/reliability.md, docs/trainer.md, ...) are installed
as \\fIPREFIX\\fR/share/doc/ftest/reliability.md and so on, beside README.md.
.SH SEE ALSO
.BR $other (1);
README.md and docs/ in the source tree, or \\fIPREFIX\\fR/share/doc/ftest installed.
ROFF
