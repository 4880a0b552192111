#!/bin/sh
# fx_join.sh TRANSACTIONS FX_RATES OUT
# Converts every transaction to USD with the rate of the transaction's own
# day (joined on date and currency) and writes the day's revenue per
# original currency to OUT: ds,currency,transactions,amount,amount_usd.
set -eu
tx=$1
fx=$2
out=$3
awk -F, '
	FNR == 1 { next }
	FILENAME == ARGV[1] { rate[$1 "," $2] = $3; next }
	{
		day = substr($2, 1, 10)
		r = ($4 == "USD") ? 1 : rate[day "," $4]
		if (r == "") {
			printf "fx_join: no %s rate for %s (transaction %s)\n", $4, day, $1 > "/dev/stderr"
			failed = 1
			exit 1
		}
		ds = day
		count[$4]++
		amount[$4] += $5
		usd[$4] += $5 * r
	}
	END {
		if (failed) exit 1
		print "ds,currency,transactions,amount,amount_usd"
		for (c in count) printf "%s,%s,%d,%.2f,%.2f\n", ds, c, count[c], amount[c], usd[c] | "sort"
	}
' "$fx" "$tx" > "$out"
