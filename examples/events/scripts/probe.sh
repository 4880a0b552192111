#!/bin/sh
# probe.sh DS
# Prints the size of day DS's input (its number of events) on stdout: the
# skew probe compares it with the window's median to find hot dates.
set -eu
awk -v ds="$1" -v black_friday=2025-11-28 -f scripts/events.awk | wc -l | tr -d ' '
