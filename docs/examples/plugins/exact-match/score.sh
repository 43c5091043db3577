#!/bin/sh
# exact-match: score PREDICTIONS against REFERENCES, one example per line (exact match).
# Usage: sh /tuneplane/capsule/plugins/exact-match/score.sh PREDICTIONS REFERENCES
# Prints "exact-match: M/N = S" and, when $TUNEPLANE_OUTPUT_DIR is set, writes
# eval/exact-match.json there ({"matched", "total", "score"}). POSIX sh and awk only.
set -eu
if [ "$#" -ne 2 ]; then
    echo "usage: score.sh PREDICTIONS REFERENCES" >&2
    exit 2
fi
for f in "$1" "$2"; do
    [ -r "$f" ] || { echo "exact-match: cannot read $f" >&2; exit 2; }
done
awk -v out="${TUNEPLANE_OUTPUT_DIR:-}" '
    NR == FNR { want[FNR] = $0; n = FNR; next }
    { got[FNR] = $0; m = FNR }
    END {
        if (m != n) {
            printf "exact-match: %d predictions for %d references\n", m, n > "/dev/stderr"
            exit 3
        }
        for (i = 1; i <= n; i++) if (got[i] == want[i]) hit++
        score = n ? hit / n : 0
        printf "exact-match: %d/%d = %.3f\n", hit, n, score
        if (out != "") {
            system("mkdir -p \"" out "/eval\"")
            file = out "/eval/exact-match.json"
            printf "{\"matched\": %d, \"total\": %d, \"score\": %.6f}\n", hit, n, score > file
        }
    }
' "$2" "$1"
