#!/usr/bin/env node
// A runner that knows nothing of tether, in Node's standard library only.
// It reads DAYTONA_API_URL and DAYTONA_API_KEY, as the official SDKs do, and
// calls the Daytona REST API: no intent, no socket, no tether name. Under
// `tether run` its DAYTONA_API_URL is tether's Daytona API proxy, which
// journals each create and labels the sandbox; whatever the runner leaves
// behind when it exits or is killed, tether deletes.
//
//   tether run -- node zerocode.js [--sandboxes N] [--name NAME] [--delete K] [--hold]
//
// It creates N sandboxes with neither name nor labels, then (with --name)
// one named NAME labelled job=NAME, deletes the first K itself, prints
// "ready", and exits — or with --hold waits to be killed.
'use strict';
const http = require('node:http');
const https = require('node:https');

const DAYTONA_API_URL = (process.env.DAYTONA_API_URL || 'https://app.daytona.io/api').replace(/\/$/, '');
const DAYTONA_API_KEY = process.env.DAYTONA_API_KEY;

// daytona sends a JSON request to the Daytona API and resolves with the
// decoded answer; any status >= 300 rejects with the server's message.
function daytona(method, path, body) {
  const url = new URL(DAYTONA_API_URL + path);
  const data = body === undefined ? undefined : JSON.stringify(body);
  const headers = { Authorization: `Bearer ${DAYTONA_API_KEY}`, 'Content-Type': 'application/json' };
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

async function main() {
  const args = process.argv.slice(2);
  const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : def; };
  const count = Number(opt('--sandboxes', '1'));
  const name = opt('--name', '');
  const toDelete = Number(opt('--delete', '0'));
  if (!DAYTONA_API_KEY) throw new Error('DAYTONA_API_KEY is not set');

  const created = [];
  for (let i = 0; i < count; i++) {
    created.push(await daytona('POST', '/sandbox', {})); // Daytona's defaults, as daytona.create() would
  }
  if (name) {
    created.push(await daytona('POST', '/sandbox', { name, labels: { job: name } }));
  }
  for (const sb of created) console.log(`created ${sb.id} ${sb.name}`);
  // ... the agent's work would happen here; it cleans up only some ...
  for (const sb of created.slice(0, toDelete)) {
    await daytona('DELETE', `/sandbox/${sb.id}`);
    console.log(`deleted ${sb.id} ${sb.name}`);
  }
  console.log('ready');
  if (args.includes('--hold')) setInterval(() => {}, 1 << 30); // killed mid-job: no cleanup runs
}

main().catch((err) => { console.error(`zerocode: ${err.message}`); process.exit(1); });
