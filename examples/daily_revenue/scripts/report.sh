#!/bin/sh
# report.sh DS REVENUE TRANSACTIONS OUTPUT_DIR
# Publishes the day's revenue: copies REVENUE to OUTPUT_DIR/revenue_DS.csv
# and writes a one-line summary to OUTPUT_DIR/report_DS.txt and stdout.
set -eu
mkdir -p "$4"
awk -F, -v ds="$1" -v copy="$4/revenue_$1.csv" -v report="$4/report_$1.txt" '
	FNR == 1 && FILENAME == ARGV[1] { print > copy; next }
	FNR == 1 { next }
	FILENAME == ARGV[1] { print > copy; usd += $3; c++; next }
	{ n++ }
	END {
		line = sprintf("%s revenue: %.2f USD from %d transactions in %d currencies", ds, usd, n, c)
		print line > report
		print line
	}
' "$2" "$3"
