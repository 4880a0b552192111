# dates.awk: calendar arithmetic on "YYYY-MM-DD" strings in POSIX awk
# (Howard Hinnant's days_from_civil / civil_from_days).

# days_from_civil("YYYY-MM-DD"): days since 1970-01-01 (proleptic Gregorian).
function day_number(ds,   y, m, d, era, yoe, doy, doe) {
	y = substr(ds, 1, 4) + 0; m = substr(ds, 6, 2) + 0; d = substr(ds, 9, 2) + 0
	if (ds !~ /^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]$/ || m < 1 || m > 12 || d < 1 || d > 31) {
		printf "dates.awk: not a date: %s\n", ds > "/dev/stderr"
		exit 2
	}
	if (m <= 2) y--
	era = int((y >= 0 ? y : y - 399) / 400)
	yoe = y - era * 400
	doy = int((153 * (m > 2 ? m - 3 : m + 9) + 2) / 5) + d - 1
	doe = yoe * 365 + int(yoe / 4) - int(yoe / 100) + doy
	return era * 146097 + doe - 719468
}

# civil_from_days(n): the date "YYYY-MM-DD" of day number n.
function day_string(z,   era, doe, yoe, y, doy, mp, d, m) {
	z += 719468
	era = int((z >= 0 ? z : z - 146096) / 146097)
	doe = z - era * 146097
	yoe = int((doe - int(doe / 1460) + int(doe / 36524) - int(doe / 146096)) / 365)
	y = yoe + era * 400
	doy = doe - (365 * yoe + int(yoe / 4) - int(yoe / 100))
	mp = int((5 * doy + 2) / 153)
	d = doy - int((153 * mp + 2) / 5) + 1
	m = (mp < 10 ? mp + 3 : mp - 9)
	if (m <= 2) y++
	return sprintf("%04d-%02d-%02d", y, m, d)
}

