#!/bin/sh
# extract_fx_rates.sh DS OUT
# Extracts the FX rates (USD per unit of each currency, USD included) of day
# DS and of the day before into OUT, a CSV with a header:
# date,currency,usd_per_unit. The rates service is simulated by
# scripts/source.awk; a rate moves by 0.5% to 3% from one day to the next.
set -eu
awk -v what=rates -v ds="$1" -f scripts/dates.awk -f scripts/source.awk > "$2"
