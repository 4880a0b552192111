#!/bin/sh
# extract_events.sh DS RUN_DIR
# Extracts day DS of the event stream into RUN_DIR/events.csv.
set -eu
ds=$1
dir=$2
mkdir -p "$dir"
{
	echo "ts,table,user_id,value"
	awk -v ds="$ds" -v black_friday=2025-11-28 -f scripts/events.awk
} > "$dir/events.csv"
echo "extract_events: $(($(wc -l < "$dir/events.csv") - 1)) events for $ds"
