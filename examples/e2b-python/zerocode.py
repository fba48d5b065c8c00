#!/usr/bin/env python3
"""A runner that knows nothing of tether, in Python's standard library only.

It makes the HTTP calls the official E2B SDK (the ``e2b`` PyPI package) makes
for ``Sandbox.create()`` and ``sandbox.kill()``, and reads E2B_API_KEY,
E2B_DOMAIN and E2B_API_URL as the SDK does. Under ``tether run`` its
E2B_API_URL is tether's E2B API proxy, which journals each create before
forwarding it and adds tether's metadata beside the runner's; whatever the
runner leaves behind when it exits or is killed, tether kills.

    tether run -- python3 zerocode.py [--sandboxes N] [--job NAME] [--kill K] [--hold]

It creates N sandboxes with the SDK's defaults, then (with --job) one with
metadata job=NAME, kills the first K itself, prints "ready", and exits — or
with --hold waits to be killed. With the SDK the same runner is

    from e2b import Sandbox
    sbx = Sandbox.create(metadata={"job": name})
    sbx.kill()

Each call below cites the SDK source it copies (github.com/e2b-dev/E2B,
packages/python-sdk).
"""
import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

# e2b/connection_config.py:169-186, 259-263: E2B_API_URL, else
# https://api.<E2B_DOMAIN or e2b.app>.
E2B_DOMAIN = os.environ.get("E2B_DOMAIN") or "e2b.app"
E2B_API_URL = (os.environ.get("E2B_API_URL") or f"https://api.{E2B_DOMAIN}").rstrip("/")
E2B_API_KEY = os.environ.get("E2B_API_KEY")


class APIError(Exception):
    def __init__(self, status, message):
        super().__init__(f"{status} {message}")
        self.status = status


def e2b(method, path, body=None):
    """Send a JSON request to the E2B API and return the decoded answer.

    The key goes in X-API-KEY (e2b/api/__init__.py:243-244)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(E2B_API_URL + path, data=data, method=method)
    req.add_header("X-API-KEY", E2B_API_KEY)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as res:
            text = res.read().decode()
    except urllib.error.HTTPError as err:
        raise APIError(err.code, f"{method} {path}: {err.read().decode()}") from None
    return json.loads(text) if text else None


def create_sandbox(metadata=None):
    """Sandbox.create(): POST /sandboxes with the template ("base" by
    default) and the timeout in seconds (300 by default: e2b/sandbox/main.py:
    30-32, e2b/sandbox_sync/main.py:1130-1132), the metadata ({} when none) and the
    SDK's defaults for secure and allow_internet_access
    (e2b/sandbox_sync/sandbox_api.py:207-252). The answer's sandboxID is the id."""
    return e2b("POST", "/sandboxes", {
        "templateID": "base",
        "metadata": metadata or {},
        "envVars": {},
        "timeout": 300,
        "secure": True,
        "allow_internet_access": True,
    })


def kill_sandbox(sandbox_id):
    """sandbox.kill(): DELETE /sandboxes/{sandboxID}; 204 killed, 404 is
    False, not an error (e2b/sandbox_sync/sandbox_api.py:133-157)."""
    try:
        e2b("DELETE", "/sandboxes/" + urllib.parse.quote(sandbox_id, safe=""))
        return True
    except APIError as err:
        if err.status == 404:
            return False
        raise


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sandboxes", type=int, default=1)
    p.add_argument("--job", default="")
    p.add_argument("--kill", type=int, default=0)
    p.add_argument("--hold", action="store_true")
    args = p.parse_args()
    if not E2B_API_KEY:
        raise SystemExit("zerocode: E2B_API_KEY is not set")

    created = []
    for _ in range(args.sandboxes):
        created.append((create_sandbox(), "-"))  # the SDK's defaults, as Sandbox.create() would
    if args.job:
        created.append((create_sandbox({"job": args.job}), args.job))
    for sb, job in created:
        print(f"created {sb['sandboxID']} {job}", flush=True)
    # ... the agent's work would happen here; it cleans up only some ...
    for sb, job in created[: args.kill]:
        if not kill_sandbox(sb["sandboxID"]):
            raise SystemExit(f"zerocode: kill {sb['sandboxID']}: not found")
        print(f"deleted {sb['sandboxID']} {job}", flush=True)
    print("ready", flush=True)
    if args.hold:
        while True:  # killed mid-job: no cleanup runs
            time.sleep(3600)


if __name__ == "__main__":
    try:
        main()
    except APIError as err:
        print(f"zerocode: {err}", file=sys.stderr)
        sys.exit(1)
