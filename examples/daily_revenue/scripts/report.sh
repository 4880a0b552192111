#!/bin/sh
# report.sh DS REVENUE OUTPUT_DIR
# Publishes the day's revenue: copies REVENUE to OUTPUT_DIR/revenue_DS.csv
# and writes a one-line summary OUTPUT_DIR/report_DS.txt.
set -eu
ds=$1
revenue=$2
outdir=$3
mkdir -p "$outdir"
cp "$revenue" "$outdir/revenue_$ds.csv"
awk -F, -v ds="$ds" '
	NR == 1 { next }
	{ tx += $3; usd += $5; n++ }
	END { printf "%s revenue: %.2f USD from %d transactions in %d currencies\n", ds, usd, tx, n }
' "$revenue" | tee "$outdir/report_$ds.txt"
