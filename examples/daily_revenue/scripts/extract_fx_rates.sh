#!/bin/sh
# extract_fx_rates.sh DS OUT
# Extracts the FX rates published for day DS (USD per unit of each currency)
# into OUT. A day without rates fails: converting with another day's rate is
# the bug this pipeline exists to avoid.
set -eu
ds=$1
out=$2
mkdir -p "$(dirname "$out")"
awk -F, -v ds="$ds" '
	NR == 1 { print; next }
	$1 == ds { print; n++ }
	END {
		if (n == 0) { printf "extract_fx_rates: no rates for %s\n", ds > "/dev/stderr"; exit 1 }
		printf "extract_fx_rates: %d rates for %s\n", n, ds > "/dev/stderr"
	}
' data/fx_rates.csv > "$out"
