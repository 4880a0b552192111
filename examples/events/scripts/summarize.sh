#!/bin/sh
# summarize.sh DS RUN_DIR OUTPUT_DIR
# Counts the loaded rows of every table and publishes
# OUTPUT_DIR/summary_DS.csv: ds,table,rows,value.
set -eu
ds=$1
dir=$2
outdir=$3
mkdir -p "$outdir"
{
	echo "ds,table,rows,value"
	for f in "$dir"/tables/*.csv; do
		awk -F, -v ds="$ds" -v table="$(basename "$f" .csv)" '
			NR == 1 { next }
			{ rows++; value += $5 }
			END { printf "%s,%s,%d,%.2f\n", ds, table, rows, value }
		' "$f"
	done
} > "$outdir/summary_$ds.csv"
cat "$outdir/summary_$ds.csv"
