#!/bin/sh
# load_table.sh TABLE DS RUN_DIR
# Loads the day's events of one table into RUN_DIR/tables/TABLE.csv,
# replacing that day's partition (idempotent: a rerun gives the same file).
set -eu
table=$1
ds=$2
dir=$3
mkdir -p "$dir/tables"
awk -F, -v table="$table" -v ds="$ds" '
	NR == 1 { print "ds," $0; next }
	$2 == table { print ds "," $0; n++ }
	END { printf "load_table: %d rows into %s for %s (pool %s)\n", n, table, ds, ENVIRON["REWIND_POOL"] > "/dev/stderr" }
' "$dir/events.csv" > "$dir/tables/$table.csv.tmp"
mv "$dir/tables/$table.csv.tmp" "$dir/tables/$table.csv"
