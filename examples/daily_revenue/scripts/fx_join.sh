#!/bin/sh
# fx_join.sh TRANSACTIONS FX_RATES OUT
# Converts every transaction to USD and writes the day's revenue per
# original currency to OUT: ds,currency,amount_usd (one row per currency).
#
# FX_RATE_DAY (the pipeline's variable fx_rate_day) picks the rate:
#   same      the rate of the transaction's own day (correct);
#   previous  the rate of the day before: the bug that wrote 90 wrong days.
set -eu
tx=$1
fx=$2
out=$3
fx_rate_day=${FX_RATE_DAY:-same}
case $fx_rate_day in
same) lag=0 ;;
previous) lag=1 ;;
*)
	echo "fx_join: FX_RATE_DAY=$fx_rate_day: want same or previous" >&2
	exit 2
	;;
esac
awk -F, -v lag="$lag" -f scripts/dates.awk -f scripts/fx_join.awk "$fx" "$tx" > "$out"
