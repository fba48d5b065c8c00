#!/usr/bin/env python3
"""A runner that creates Daytona sandboxes under tether, in Python's
standard library only: it declares each sandbox to tether (HTTP over the
Unix socket in $TETHER_SOCKET) before creating it with the name and labels
tether chose, then reports the sandbox id. When its work is done it deletes
the sandbox itself and releases the intent. If it is killed first (docker
stop, OOM, a crash), tether deletes what it left.

    tether run -- python3 runner.py [--sandboxes N] [--label RUN] [--hold]

--hold keeps the sandboxes until the process is killed, as a runner stopped
mid-job; it prints "ready" once they exist.
"""
import argparse
import http.client
import json
import os
import signal
import socket
import sys
import time
import urllib.request

DAYTONA_API_URL = os.environ.get("DAYTONA_API_URL", "https://app.daytona.io/api").rstrip("/")
DAYTONA_API_KEY = os.environ.get("DAYTONA_API_KEY", "")
TETHER_SOCKET = os.environ.get("TETHER_SOCKET", "")
TIMEOUT = 60  # seconds, per request


class UnixConnection(http.client.HTTPConnection):
    """HTTP/1.1 over tether's Unix socket."""

    def __init__(self, path):
        super().__init__("tether", timeout=TIMEOUT)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(self.path)


def tether(method, path, body=None):
    conn = UnixConnection(TETHER_SOCKET)
    try:
        conn.request(method, path, body=json.dumps(body) if body is not None else None,
                     headers={"Content-Type": "application/json"})
        res = conn.getresponse()
        text = res.read().decode()
        if res.status >= 300:
            raise RuntimeError(f"tether {method} {path}: {res.status} {text}")
        return json.loads(text) if text else None
    finally:
        conn.close()


def daytona(method, path, body=None):
    req = urllib.request.Request(
        DAYTONA_API_URL + path, method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {DAYTONA_API_KEY}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as res:
            text = res.read().decode()
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"daytona {method} {path}: {e.code} {e.read().decode()}") from None
    return json.loads(text) if text else None


def create_sandbox(run, i):
    """Declare first (tether journals it before it answers), then create
    with exactly tether's name and labels, then report the id."""
    intent = tether("POST", "/v1/intents", {"labels": {"run": run}, "on_drain": "delete", "key": f"{run}-{i}"})
    sandbox = daytona("POST", "/sandbox", {"name": intent["name"], "labels": intent["labels"], "autoStopInterval": 15})
    tether("POST", f"/v1/intents/{intent['id']}/observe", {"sandbox_id": sandbox["id"]})
    return intent, sandbox


def delete_sandbox(intent, sandbox):
    """The runner's own cleanup, then tell tether it is handled."""
    daytona("DELETE", f"/sandbox/{sandbox['id']}")
    tether("POST", f"/v1/intents/{intent['id']}/release", {"outcome": "deleted"})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sandboxes", type=int, default=1)
    # Each start is a new run: a restarted container must not reuse the keys
    # of the sandboxes its previous start declared (and tether drained).
    p.add_argument("--label", default=f"python-{os.getpid()}-{int(time.time() * 1000)}")
    p.add_argument("--hold", action="store_true")
    a = p.parse_args()
    if not TETHER_SOCKET:
        sys.exit("runner: TETHER_SOCKET is not set: run me under tether run")
    if not DAYTONA_API_KEY:
        sys.exit("runner: DAYTONA_API_KEY is not set")

    held = []
    for i in range(a.sandboxes):
        intent, sandbox = create_sandbox(a.label, i)
        held.append((intent, sandbox))
        print(f"created {intent['id']} {intent['name']} {sandbox['id']}", flush=True)
    if a.hold:
        print("ready", flush=True)
        signal.pause()  # killed mid-job: no cleanup runs
        return
    # ... the agent's work would happen here ...
    for intent, sandbox in held:
        delete_sandbox(intent, sandbox)
        print(f"released {intent['id']} {intent['name']} {sandbox['id']}", flush=True)


if __name__ == "__main__":
    main()
