#!/bin/sh
# extract_transactions.sh DS OUT
# Extracts the transactions of day DS (their timestamp's date, UTC) from the
# day-partitioned source under data/transactions into OUT (CSV with header).
set -eu
ds=$1
out=$2
src=data/transactions/$ds.csv
if [ ! -f "$src" ]; then
	echo "extract_transactions: no source partition $src" >&2
	exit 1
fi
mkdir -p "$(dirname "$out")"
awk -F, -v ds="$ds" '
	NR == 1 { print; next }
	substr($2, 1, 10) == ds { print; n++ }
	END { printf "extract_transactions: %d transactions for %s\n", n, ds > "/dev/stderr" }
' "$src" > "$out"
