# shellcheck shell=bash
# scripts/lib/ports.sh - the port picker of the private test servers, and
# their check that a recorded pid is still theirs; sourced by
# scripts/pg-test-cluster, redis-test-server, redis-test-cluster,
# mariadb-test-server, pg-test-pair and pgbouncer-test-server (each defines
# die() first).
#
# A port is checked, not reserved: a script whose server cannot bind its
# port starts it again on another one from free_port.  Ports come from 20000
# up to the start of the kernel's ephemeral range when that leaves room:
# outgoing connections take their local ports from that range, and one of
# them on a port makes a server's bind fail although nothing listens there.

# How many ports from 20000 a server may take.
port_span() {
	local lo
	lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 0)
	if [ "${lo:-0}" -gt 21000 ] 2>/dev/null; then echo $((lo - 20000)); else echo 40000; fi
}

# free_port [EXCEPT]: a TCP port on 127.0.0.1 that nothing listens on, other
# than EXCEPT (a port this script has recorded for another server).
free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$((20000 + RANDOM % $(port_span)))
		[ "$p" != "${1:-}" ] || continue
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	die "no free TCP port found on 127.0.0.1"
}

# pid_is PID NAME: PID is alive and runs NAME (its /proc comm).  A pidfile
# outlives a server killed with -9, and this machine has only pid_max pids
# (32768 here): a busy test reuses the dead server's pid within minutes,
# and `kill -0` alone would take the stranger for the server.
pid_is() {
	local comm
	[ -n "$1" ] && kill -0 "$1" 2>/dev/null || return 1
	[ -r "/proc/$1/comm" ] || return 0 # no procfs: the pid is all we have
	comm=$(cat "/proc/$1/comm" 2>/dev/null) || return 1
	[ "$comm" = "$2" ]
}
