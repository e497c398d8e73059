#!/usr/bin/env bash
# Writes the sources of //c_api:header_alone_c99_test into DIR: for each public header
# given, NAME.c, which includes gpe/NAME.h first and alone and returns a constant of
# gpe/common.h (which every header must include); then main.c, which calls them all.
#
#   header_alone_gen.sh DIR c_api/include/gpe/common.h c_api/include/gpe/so.h ...
set -euo pipefail
dir="$1"
shift
names=()
for h in "$@"; do
  n="$(basename "$h" .h)"
  names+=("$n")
  printf '#include "gpe/%s.h"\nint header_alone_%s(void);\nint header_alone_%s(void) { return GPE_OK; }\n' \
    "$n" "$n" "$n" >"$dir/$n.c"
done
{
  echo '#include <stdio.h>'
  for n in "${names[@]}"; do echo "int header_alone_$n(void);"; done
  echo 'int main(void) {'
  echo '  int failures = 0;'
  for n in "${names[@]}"; do echo "  failures += header_alone_$n() != 0;"; done
  echo "  printf(\"%d public headers compile alone as C99\\n\", ${#names[@]});"
  echo '  return failures;'
  echo '}'
} >"$dir/main.c"
