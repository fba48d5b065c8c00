#!/usr/bin/env node
// A runner that knows nothing of tether, in Node's standard library only: it
// makes the HTTP calls the official E2B SDK (the `e2b` npm package) makes
// for Sandbox.create() and sandbox.kill(), and reads E2B_API_KEY, E2B_DOMAIN
// and E2B_API_URL as the SDK does. Under `tether run` its E2B_API_URL is
// tether's E2B API proxy, which journals each create before forwarding it
// and adds tether's metadata beside the runner's; whatever the runner leaves
// behind when it exits or is killed, tether kills.
//
//   tether run -- node zerocode.js [--sandboxes N] [--job NAME] [--kill K] [--hold]
//
// It creates N sandboxes with the SDK's defaults, then (with --job) one with
// metadata job=NAME, kills the first K itself, prints "ready", and exits —
// or with --hold waits to be killed. With the SDK the same runner is
//
//   const { Sandbox } = require('e2b')
//   const sbx = await Sandbox.create({ metadata: { job: name } })
//   await sbx.kill()
//
// Each call below cites the SDK source it copies (github.com/e2b-dev/E2B,
// packages/js-sdk).
'use strict';
const http = require('node:http');
const https = require('node:https');

// src/connectionConfig.ts:418-421, 463-481: E2B_API_URL, else
// https://api.<E2B_DOMAIN or e2b.app>.
const E2B_DOMAIN = process.env.E2B_DOMAIN || 'e2b.app';
const E2B_API_URL = (process.env.E2B_API_URL || `https://api.${E2B_DOMAIN}`).replace(/\/$/, '');
const E2B_API_KEY = process.env.E2B_API_KEY;

// e2b sends a JSON request to the E2B API and resolves with the decoded
// answer; any status >= 300 rejects with the server's message. The key goes
// in X-API-KEY (src/api/index.ts:116-120).
function e2b(method, path, body) {
  const url = new URL(E2B_API_URL + path);
  const data = body === undefined ? undefined : JSON.stringify(body);
  const headers = { 'X-API-KEY': E2B_API_KEY, 'Content-Type': 'application/json' };
  if (data) headers['Content-Length'] = Buffer.byteLength(data);
  return new Promise((resolve, reject) => {
    const req = (url.protocol === 'https:' ? https : http).request(url, { method, headers, timeout: 60000 }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => {
        if (res.statusCode >= 300) reject(new Error(`${method} ${path}: ${res.statusCode} ${text}`));
        else resolve(text ? JSON.parse(text) : null);
      });
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${path}: timed out`)));
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

// Sandbox.create(opts): POST /sandboxes with the template ('base' by
// default, src/sandbox/index.ts:77, 304), the metadata, the timeout in
// seconds (300 by default, src/connectionConfig.ts:9) and the SDK's
// defaults for secure and allow_internet_access
// (src/sandbox/sandboxApi.ts:1662-1692). The answer's sandboxID is the id.
function createSandbox(metadata) {
  return e2b('POST', '/sandboxes', {
    templateID: 'base',
    metadata,
    timeout: 300,
    secure: true,
    allow_internet_access: true,
  });
}

// sandbox.kill(): DELETE /sandboxes/{sandboxID}; 204 killed, 404 "not
// found" is false, not an error (src/sandbox/sandboxApi.ts:1196-1228).
async function killSandbox(id) {
  try {
    await e2b('DELETE', `/sandboxes/${encodeURIComponent(id)}`);
    return true;
  } catch (err) {
    if (/: 404 /.test(err.message)) return false;
    throw err;
  }
}

async function main() {
  const args = process.argv.slice(2);
  const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : def; };
  const count = Number(opt('--sandboxes', '1'));
  const job = opt('--job', '');
  const toKill = Number(opt('--kill', '0'));
  if (!E2B_API_KEY) throw new Error('E2B_API_KEY is not set');

  const created = [];
  for (let i = 0; i < count; i++) {
    created.push({ ...(await createSandbox(undefined)), job: '-' }); // the SDK's defaults, as Sandbox.create() would
  }
  if (job) {
    created.push({ ...(await createSandbox({ job })), job });
  }
  for (const sb of created) console.log(`created ${sb.sandboxID} ${sb.job}`);
  // ... the agent's work would happen here; it cleans up only some ...
  for (const sb of created.slice(0, toKill)) {
    if (!(await killSandbox(sb.sandboxID))) throw new Error(`kill ${sb.sandboxID}: not found`);
    console.log(`deleted ${sb.sandboxID} ${sb.job}`);
  }
  console.log('ready');
  if (args.includes('--hold')) setInterval(() => {}, 1 << 30); // killed mid-job: no cleanup runs
}

main().catch((err) => { console.error(`zerocode: ${err.message}`); process.exit(1); });
