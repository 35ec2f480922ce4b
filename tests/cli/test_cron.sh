#!/usr/bin/env bash
# test_cron.sh - `due cron`: next fire times across DST in explicit zones,
# add/ls/rm, and every kind of bad input (one-line error naming the field
# or zone, nothing changed).
. "$(dirname "$0")/lib.sh"
"$DUE" init >/dev/null

# Berlin, spring forward 2026-03-29: 02:00 does not exist -> 03:00 CEST (01:00Z)
expect_eq "berlin march" "2026-03-28T01:00:00.000Z 2026-03-29T01:00:00.000Z 2026-03-30T00:00:00.000Z" \
	"$("$DUE" cron next '0 2 * * *' --tz Europe/Berlin --from 2026-03-27T12:00:00Z --count 3 | tr '\n' ' ' | sed 's/ $//')"
# Berlin, fall back 2026-10-25: 02:00 happens once (CEST, 00:00Z)
expect_eq "berlin october" "2026-10-24T00:00:00.000Z 2026-10-25T00:00:00.000Z 2026-10-26T01:00:00.000Z" \
	"$("$DUE" cron next '0 2 * * *' --tz Europe/Berlin --from 2026-10-23T12:00:00Z --count 3 | tr '\n' ' ' | sed 's/ $//')"
# New York 2026-03-08: 02:30 skipped -> 03:00 EDT = 07:00Z
expect_eq "new york spring" "2026-03-08T07:00:00.000Z" \
	"$("$DUE" cron next '30 2 * * *' --tz America/New_York --from 2026-03-08T00:00:00Z --count 1)"
# Lord Howe 2026-10-04: 02:00 -> 02:30 (+10:30 -> +11); 02:15 does not exist
expect_eq "lord howe" "2026-10-03T15:30:00.000Z" \
	"$("$DUE" cron next '15 2 * * *' --tz Australia/Lord_Howe --from 2026-10-03T12:00:00Z --count 1)"
expect_eq "hourly count on a fall-back day (NY): 24 local hours, 25 real" 24 \
	"$("$DUE" cron next '0 * * * *' --tz America/New_York --from 2026-11-01T03:59:59Z --count 40 | grep -c '^2026-11-01T\|^2026-11-02T0[0-4]')"
expect_eq "leap day" "2028-02-29T00:00:00.000Z" "$("$DUE" cron next '0 0 29 2 *' --from 2026-12-01T00:00:00Z --count 1)"
expect_eq "seconds field" 6 "$("$DUE" cron next '*/10 * * * * *' --count 6 | wc -l)"

# add / ls / rm
"$DUE" cron add report '0 2 * * *' report --tz Europe/Berlin --payload '{"r":1}' | has "report next" && ok || bad "cron add"
"$DUE" cron ls | has "^report .*Europe/Berlin" && ok || bad "cron ls"
"$DUE" cron ls --json | python3 -c "
import json,sys; d=json.load(sys.stdin)[0]
assert d['name']=='report' and d['tz']=='Europe/Berlin' and d['payload']=='{\"r\":1}'
assert d['next_fire'].endswith(('T00:00:00.000Z','T01:00:00.000Z'))
assert d['next_fire_local'][11:19]=='02:00:00'" && ok || bad "cron ls --json"
"$DUE" cron add report '30 3 * * *' report --tz Europe/Berlin >/dev/null && ok || bad "replace"
"$DUE" cron ls | has "30 3 \* \* \*" && ok || bad "replaced expression listed"

before=$("$DUE" cron ls --json | md5sum)
expect_err 2 "month: 13 is out of range" "$DUE" cron add bad '0 2 * 13 *' k
expect_err 2 "unknown time zone 'Europe/Berln'" "$DUE" cron add bad '0 2 * * *' k --tz Europe/Berln
expect_err 2 "never fires" "$DUE" cron add bad '0 0 30 2 *' k
expect_err 2 "invalid schedule name" "$DUE" cron add 'bad name' '* * * * *' k
expect_err 2 "--misfire" "$DUE" cron add bad '* * * * *' k --misfire sometimes
expect_err 2 "--overlap" "$DUE" cron add bad '* * * * *' k --overlap maybe
expect_err 2 "expected NAME 'EXPR' KIND" "$DUE" cron add bad '* * * * *'
expect_err 2 "minute" "$DUE" cron next '61 * * * *'
expect_err 2 "field" "$DUE" cron next '* * *'
expect_err 2 "--from" "$DUE" cron next '* * * * *' --from yesterday
expect_err 2 "unknown cron command 'list'" "$DUE" cron list
expect_err 3 "no schedule named 'nope'" "$DUE" cron rm nope
expect_eq "bad input changed no schedule" "$before" "$("$DUE" cron ls --json | md5sum)"
"$DUE" cron rm report | has "removed report" && ok || bad "cron rm"
expect_eq "empty after rm" "[]" "$("$DUE" cron ls --json | tr -d ' \n')"
finish
