"""A runner that starts one container per task with docker-py and knows
nothing of tether. Under `tether run` its DOCKER_HOST is tether's Docker API
proxy, which docker.from_env() reads: each container, network and volume is
journaled before the engine creates it, and whatever the runner leaves (it is
killed, its finally never runs) tether removes when it ends.

    tether run -- python3 runner.py [--tasks N] [--hold] [--image IMAGE]

--hold: start the tasks and wait to be killed instead of cleaning up.
Needs docker-py (Debian: python3-docker; pip: docker).
"""

import argparse
import os
import time

import docker


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=3)
    ap.add_argument("--hold", action="store_true")
    ap.add_argument("--image", default=os.environ.get("RUNNER_IMAGE", "busybox"))
    args = ap.parse_args()

    client = docker.from_env()
    # check_duplicate: docker-py leaves it off, and an engine before API 1.44
    # then makes a second network of the same name.
    net = client.networks.create("runner-net-%d" % os.getpid(), check_duplicate=True)
    work = client.volumes.create("runner-work-%d" % os.getpid())
    containers = []
    try:
        for i in range(1, args.tasks + 1):
            c = client.containers.run(
                args.image, ["sleep", "1000"], detach=True, network=net.name,
                volumes={work.name: {"bind": "/work", "mode": "rw"}}, labels={"runner.task": str(i)},
            )
            out = c.exec_run(["sh", "-c", "echo task %d: working in $(hostname)" % i]).output
            print(out.decode().strip(), flush=True)
            containers.append(c)
        print("ready", flush=True)
        if args.hold:
            # Killed here (SIGKILL, OOM, a crashed host), the finally below
            # never runs: tether's drain removes what the runner made.
            time.sleep(1000)
    finally:
        for c in containers:
            c.remove(force=True)
        net.remove()
        work.remove()
    print("cleaned up", flush=True)


if __name__ == "__main__":
    main()
