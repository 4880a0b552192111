# events.awk: the source event stream of one day, generated deterministically
# from the date (-v ds=YYYY-MM-DD) so that every run and every backfill of a
# day sees the same events. Black Friday carries 20 times the usual traffic.
# Output: ts,table,user_id,value (no header).
function rand31() {
	seed = (seed * 16807) % 2147483647
	return seed
}
BEGIN {
	split(ds, d, "-")
	seed = (d[1] * 10000 + d[2] * 100 + d[3]) % 2147483647
	n = 240 + rand31() % 60
	if (ds == black_friday) n *= 20
	tables[0] = "orders"; tables[1] = "sessions"; tables[2] = "clicks"; tables[3] = "clicks"; tables[4] = "sessions"
	for (i = 0; i < n; i++) {
		t = int(i * 86400 / n)
		table = tables[rand31() % 5]
		value = (table == "orders") ? (rand31() % 20000) / 100 : rand31() % 600
		printf "%sT%02d:%02d:%02dZ,%s,u%05d,%s\n", ds, t / 3600, (t % 3600) / 60, t % 60, table, rand31() % 50000, value
	}
}
