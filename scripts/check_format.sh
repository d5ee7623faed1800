#!/usr/bin/env bash
# Fails when a C++ file under src/, tests/, fuzz/ or bench/ differs from what clang-format makes
# of it with the tree's .clang-format (CTest test `format`, label `lint`). Fix with
#   scripts/check_format.sh --fix        (or `git clang-format` for just a change)
set -euo pipefail
ORCHARD_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ORCHARD_ROOT"
cf=$(command -v clang-format || command -v clang-format-14 || true)
if [ -z "$cf" ]; then
  echo "check_format.sh: clang-format not found (scripts/setup.sh installs it)" >&2
  exit 2
fi
mapfile -t files < <(find src tests fuzz bench -type f \( -name '*.cc' -o -name '*.h' \) -not -path '*/node_modules/*' | sort)
if [ "${1:-}" = "--fix" ]; then
  "$cf" -i --style=file "${files[@]}"
  exit 0
fi
# One clang-format process for all files; its warnings name each file that would change.
out=$("$cf" --style=file --dry-run "${files[@]}" 2>&1 || true)
mapfile -t bad < <(printf '%s\n' "$out" | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: warning: code should be clang-formatted.*/\1/p' | sort -u)
if [ ${#bad[@]} -gt 0 ] && [ -n "${bad[0]}" ]; then
  echo "check_format.sh: ${#bad[@]} file(s) not formatted as .clang-format says (scripts/check_format.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format.sh: ${#files[@]} files formatted"
