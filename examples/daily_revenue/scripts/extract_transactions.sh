#!/bin/sh
# extract_transactions.sh DS OUT
# Extracts the transactions of day DS (UTC) from the payments system into
# OUT, a CSV with a header: tx_id,ts,customer_id,currency,amount (in the
# currency's own units). The payments system is simulated by
# scripts/source.awk: the same date always yields the same transactions.
set -eu
awk -v what=transactions -v ds="$1" -f scripts/dates.awk -f scripts/source.awk > "$2"
