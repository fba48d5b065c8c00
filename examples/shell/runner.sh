#!/bin/sh
# A runner that creates Daytona sandboxes under tether, with the tether CLI
# and curl: `tether intent new` declares each sandbox (tether journals it
# before it answers) and prints the intent as JSON; the sandbox is created
# with exactly its name and labels; `tether intent observe` reports the id.
# When its work is done it deletes the sandbox and releases the intent. If
# it is killed first, tether deletes what it left.
#
#   tether run -- sh runner.sh [--sandboxes N] [--label RUN] [--hold]
#
# --hold keeps the sandboxes until the process is killed, as a runner
# stopped mid-job; it prints "ready" once they exist.
set -eu

api=${DAYTONA_API_URL:-https://app.daytona.io/api}
api=${api%/}
: "${DAYTONA_API_KEY:?DAYTONA_API_KEY is not set}"
# Each start is a new run: a restarted container must not reuse the keys of
# the sandboxes its previous start declared (and tether drained).
count=1 run=shell-$$-$(date +%s) hold=
while [ $# -gt 0 ]; do
	case $1 in
	--sandboxes) count=$2; shift 2 ;;
	--label) run=$2; shift 2 ;;
	--hold) hold=1; shift ;;
	*) echo "runner: unknown argument $1" >&2; exit 2 ;;
	esac
done

# field NAME: the first "NAME":"value" of the JSON on stdin (the id comes
# first in both tether's and Daytona's answers).
field() { grep -o "\"$1\":\"[^\"]*\"" | head -n 1 | cut -d '"' -f 4; }

daytona() { # METHOD PATH [BODY]
	curl -fsS --max-time 60 -X "$1" "$api$2" \
		-H "Authorization: Bearer $DAYTONA_API_KEY" -H 'Content-Type: application/json' \
		${3:+-d "$3"}
}

held=
i=0
while [ "$i" -lt "$count" ]; do
	intent=$(tether intent new --label "run=$run" --key "$run-$i")
	id=$(printf '%s' "$intent" | field id)
	name=$(printf '%s' "$intent" | field name)
	labels=$(printf '%s' "$intent" | grep -o '"labels":{[^}]*}' | head -n 1 | cut -c 10-)
	sandbox=$(daytona POST /sandbox "{\"name\":\"$name\",\"labels\":$labels,\"autoStopInterval\":15}" | field id)
	tether intent observe "$id" "$sandbox" >/dev/null
	echo "created $id $name $sandbox"
	held="$held $id:$sandbox"
	i=$((i + 1))
done

if [ -n "$hold" ]; then
	echo ready
	# Killed mid-job: no cleanup runs. (sleep in the background and wait, so
	# the shell itself takes the SIGTERM.)
	while :; do sleep 3600 & wait $!; done
fi

# ... the agent's work would happen here ...
for h in $held; do
	id=${h%%:*} sandbox=${h#*:}
	daytona DELETE "/sandbox/$sandbox" >/dev/null
	tether intent release "$id" >/dev/null
	echo "released $id tether-$id $sandbox"
done
