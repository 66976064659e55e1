#!/usr/bin/env bash
# Every commit subject since the rule began is at most 72 characters, so that
# `git log --oneline` reads as a list of what changed; the why goes in the body.
# Commits made before RULE_SINCE are left as they are: main's history is not rewritten.
set -euo pipefail
cd "$(dirname "$0")/.."
# By date, not by commit, so that a shallow clone checks what it holds.
RULE_SINCE=2026-12-07T23:30:00Z
LIMIT=72
# Characters, not bytes: a subject may hold an arrow or a degree sign.
export LC_ALL=C.UTF-8
long=""
while IFS= read -r line; do
    subject=${line#* }
    if (( ${#subject} > LIMIT )); then
        long+="  $line (${#subject} characters)"$'\n'
    fi
done < <(git log --since="$RULE_SINCE" --format='%h %s' HEAD)
if [[ -n "$long" ]]; then
    echo "check-commits: these subjects are over $LIMIT characters; put the why in the body:" >&2
    printf "%s" "$long" >&2
    exit 1
fi
echo "check-commits: every subject since $RULE_SINCE is at most $LIMIT characters"
