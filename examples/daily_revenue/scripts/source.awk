# source.awk: the upstream systems of the daily revenue example, simulated.
# Everything is derived from the date alone (a Park-Miller pseudo-random
# sequence seeded with the day number), so every machine generates the same
# data for the same date. POSIX awk only; needs dates.awk:
#   awk -v what=transactions -v ds=2025-07-01 -f dates.awk -f source.awk
#
#   what=transactions  prints the day's transactions (CSV with a header):
#                     tx_id,ts,customer_id,currency,amount
#   what=rates         prints the FX rates of ds and of the day before (CSV with a header):
#                     date,currency,usd_per_unit

# The pseudo-random sequence: seeded by (day, stream), values in (0, 1).
# Every product stays below 2^53, so awk's doubles compute it exactly.
function seed(day, stream) {
	_s = (day * 7919 + stream * 104729 + 12345) % 2147483647
	if (_s <= 0) _s += 2147483646
	rnd(); rnd(); rnd()
}
function rnd() {
	_s = (_s * 16807) % 2147483647
	return _s / 2147483647
}

function currencies() {
	# code, USD per unit around which the rate moves, share of transactions
	_ncur = split("USD EUR GBP JPY VND", _cur, " ")
	_base["USD"] = 1;          _share["USD"] = 0.35
	_base["EUR"] = 1.17;       _share["EUR"] = 0.25
	_base["GBP"] = 1.36;       _share["GBP"] = 0.15
	_base["JPY"] = 0.0068;     _share["JPY"] = 0.15
	_base["VND"] = 0.0000382;  _share["VND"] = 0.10
}

# rate(day, i): USD per unit of currency i on that day. The dollar zigzags
# against every other currency around a slow wave: from one day to the next
# a rate moves by 0.5% to 3%, so a join on the wrong day is visibly wrong
# (about 1% of the day's revenue in USD).
function rate(day, i,   c, a, x) {
	c = _cur[i]
	if (c == "USD") return 1
	seed(day, i)
	a = 0.0025 + 0.0125 * rnd()
	x = 0.01 * sin(6.283185307179586 * day / 61 + i) + (day % 2 == 0 ? a : -a)
	return _base[c] * exp(x)
}

function rates(ds,   day, i) {
	currencies()
	day = day_number(ds)
	for (i = 1; i <= _ncur; i++)
		printf "%s,%s,%.10g\n", ds, _cur[i], rate(day, i)
}

# transactions(ds): 30 to 59 transactions spread over the day, in several
# currencies, amounts worth 5 to 600 USD (JPY and VND have no decimals).
function transactions(ds,   day, n, i, u, acc, c, j, usd, amt, sec) {
	currencies()
	day = day_number(ds)
	seed(day, 0)
	n = 30 + int(rnd() * 30)
	for (i = 0; i < n; i++) {
		u = rnd(); acc = 0
		for (j = 1; j <= _ncur; j++) {
			c = _cur[j]; acc += _share[c]
			if (u < acc) break
		}
		if (j > _ncur) c = _cur[_ncur]
		u = rnd()
		usd = 5 + 595 * u * u
		amt = usd / _base[c]
		amt = (c == "JPY" || c == "VND") ? sprintf("%d", int(amt)) : sprintf("%.2f", amt)
		sec = int((i + rnd()) * 86400 / n)
		printf "tx-%s-%03d,%sT%02d:%02d:%02dZ,cus-%03d,%s,%s\n", \
			substr(ds, 1, 4) substr(ds, 6, 2) substr(ds, 9, 2), i + 1, \
			ds, int(sec / 3600), int(sec % 3600 / 60), sec % 60, \
			1 + int(rnd() * 80), c, amt
	}
	return n
}

BEGIN {
	if (what == "transactions") {
		print "tx_id,ts,customer_id,currency,amount"
		printf "source.awk: %d transactions for %s\n", transactions(ds), ds > "/dev/stderr"
	} else if (what == "rates") {
		print "date,currency,usd_per_unit"
		rates(day_string(day_number(ds) - 1)); rates(ds)
		printf "source.awk: FX rates for the day before %s and %s\n", ds, ds > "/dev/stderr"
	} else {
		printf "source.awk: what=%s: want transactions or rates\n", what > "/dev/stderr"
		exit 2
	}
}
