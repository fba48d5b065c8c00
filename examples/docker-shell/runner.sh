#!/bin/sh
# A runner that starts one container per task with the docker CLI and knows
# nothing of tether. Under `tether run` its DOCKER_HOST is tether's Docker
# API proxy: each container, network and volume is journaled before the
# engine creates it, and whatever the runner leaves (it is killed, its
# cleanup never runs) tether removes when it ends.
#
#   tether run -- sh runner.sh [--tasks N] [--hold] [--image IMAGE]
#
# --hold: start the tasks and wait to be killed instead of cleaning up.
set -eu

tasks=3 hold= image=${RUNNER_IMAGE:-busybox}
while [ $# -gt 0 ]; do
	case $1 in
	--tasks) tasks=$2; shift 2 ;;
	--hold) hold=1; shift ;;
	--image) image=$2; shift 2 ;;
	*) echo "runner.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done

net=runner-net-$$
docker network create "$net" >/dev/null
ids=
i=1
while [ "$i" -le "$tasks" ]; do
	id=$(docker run -d --network "$net" --label runner.task="$i" "$image" sleep 1000)
	docker exec "$id" sh -c "echo task $i: working in \$(hostname)"
	ids="$ids $id"
	i=$((i + 1))
done
# A one-shot task the engine removes itself when it ends.
docker run --rm "$image" echo "task $i: done and removed (--rm)"
echo "ready"
if [ -n "$hold" ]; then
	# Killed here (SIGKILL, OOM, a crashed host), the runner never reaches
	# its cleanup: tether's drain removes the containers and the network.
	exec sleep 1000
fi
docker rm -f $ids >/dev/null
docker network rm "$net" >/dev/null
echo "cleaned up"
