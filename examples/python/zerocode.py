#!/usr/bin/env python3
"""A runner that knows nothing of tether, in Python's standard library only.
It reads DAYTONA_API_URL and DAYTONA_API_KEY, as the official SDKs do, and
calls the Daytona REST API: no intent, no socket, no tether name. Under
`tether run` its DAYTONA_API_URL is tether's Daytona API proxy, which
journals each create and labels the sandbox; whatever the runner leaves
behind when it exits or is killed, tether deletes.

    tether run -- python3 zerocode.py [--sandboxes N] [--name NAME] [--delete K] [--hold]

It creates N sandboxes with neither name nor labels, then (with --name) one
named NAME labelled job=NAME, deletes the first K itself, prints "ready",
and exits -- or with --hold waits to be killed.
"""
import argparse
import json
import os
import signal
import sys
import urllib.error
import urllib.request

DAYTONA_API_URL = os.environ.get("DAYTONA_API_URL", "https://app.daytona.io/api").rstrip("/")
DAYTONA_API_KEY = os.environ.get("DAYTONA_API_KEY", "")
TIMEOUT = 60  # seconds, per request


def daytona(method, path, body=None):
    """Send a JSON request to the Daytona API and return the decoded answer."""
    req = urllib.request.Request(
        DAYTONA_API_URL + path, method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {DAYTONA_API_KEY}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as res:
            text = res.read().decode()
    except urllib.error.HTTPError as e:
        raise RuntimeError(f"{method} {path}: {e.code} {e.read().decode()}") from None
    return json.loads(text) if text else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sandboxes", type=int, default=1)
    p.add_argument("--name", default="")
    p.add_argument("--delete", type=int, default=0)
    p.add_argument("--hold", action="store_true")
    a = p.parse_args()
    if not DAYTONA_API_KEY:
        sys.exit("zerocode: DAYTONA_API_KEY is not set")

    created = [daytona("POST", "/sandbox", {}) for _ in range(a.sandboxes)]  # Daytona's defaults
    if a.name:
        created.append(daytona("POST", "/sandbox", {"name": a.name, "labels": {"job": a.name}}))
    for sb in created:
        print(f"created {sb['id']} {sb['name']}", flush=True)
    # ... the agent's work would happen here; it cleans up only some ...
    for sb in created[:a.delete]:
        daytona("DELETE", f"/sandbox/{sb['id']}")
        print(f"deleted {sb['id']} {sb['name']}", flush=True)
    print("ready", flush=True)
    if a.hold:
        signal.pause()  # killed mid-job: no cleanup runs


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, OSError) as e:
        sys.exit(f"zerocode: {e}")
