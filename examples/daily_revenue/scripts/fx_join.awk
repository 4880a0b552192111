# fx_join.awk (needs dates.awk): FX_RATES TRANSACTIONS -> ds,currency,amount_usd
# The rate of a transaction is the one of its own date minus lag days.
FNR == 1 { next }
FILENAME == ARGV[1] { rate[$1 "," $2] = $3; next }
{
	day = substr($2, 1, 10)
	rate_day = lag ? day_string(day_number(day) - lag) : day
	r = rate[rate_day "," $4]
	if (r == "") {
		printf "fx_join: no %s rate for %s (transaction %s)\n", $4, rate_day, $1 > "/dev/stderr"
		failed = 1
		exit 1
	}
	if (ds == "") ds = day
	if (day != ds) {
		printf "fx_join: transaction %s of %s among those of %s\n", $1, day, ds > "/dev/stderr"
		failed = 1
		exit 1
	}
	if (!(($4) in usd)) cur[++ncur] = $4
	n++
	usd[$4] += $5 * r
}
END {
	if (failed) exit 1
	if (n == 0) { print "fx_join: no transactions" > "/dev/stderr"; exit 1 }
	# currencies in alphabetical order (insertion sort: a handful of them)
	for (i = 2; i <= ncur; i++)
		for (j = i; j > 1 && cur[j - 1] > cur[j]; j--) { c = cur[j]; cur[j] = cur[j - 1]; cur[j - 1] = c }
	print "ds,currency,amount_usd"
	for (i = 1; i <= ncur; i++) printf "%s,%s,%.6f\n", ds, cur[i], usd[cur[i]]
	printf "fx_join: %d transactions, %s rates\n", n, (lag ? "previous day's" : "same day's") > "/dev/stderr"
}
