#!/usr/bin/env node
// A runner that creates Daytona sandboxes under tether, in Node's standard
// library only: it declares each sandbox to tether (HTTP over the Unix
// socket in $TETHER_SOCKET) before creating it with the name and labels
// tether chose, then reports the sandbox id. When its work is done it
// deletes the sandbox itself and releases the intent. If it is killed
// first (docker stop, OOM, a crash), tether deletes what it left.
//
//   tether run -- node runner.js [--sandboxes N] [--label RUN] [--hold]
//
// --hold keeps the sandboxes until the process is killed, as a runner
// stopped mid-job; it prints "ready" once they exist.
'use strict';
const http = require('node:http');
const https = require('node:https');

const DAYTONA_API_URL = (process.env.DAYTONA_API_URL || 'https://app.daytona.io/api').replace(/\/$/, '');
const DAYTONA_API_KEY = process.env.DAYTONA_API_KEY;
const TETHER_SOCKET = process.env.TETHER_SOCKET;

// request sends a JSON request and resolves with the decoded answer; any
// status >= 300 rejects with the server's message.
function request(mod, options, body) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const req = mod.request({
      ...options,
      headers: { ...options.headers, 'Content-Type': 'application/json', ...(data ? { 'Content-Length': Buffer.byteLength(data) } : {}) },
      timeout: 60000,
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => {
        if (res.statusCode >= 300) {
          reject(new Error(`${options.method} ${options.path}: ${res.statusCode} ${text}`));
          return;
        }
        resolve(text ? JSON.parse(text) : null);
      });
    });
    req.on('timeout', () => req.destroy(new Error(`${options.method} ${options.path}: timed out`)));
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

// tether speaks the intent API over the Unix socket.
function tether(method, path, body) {
  return request(http, { socketPath: TETHER_SOCKET, method, path }, body);
}

// daytona speaks the Daytona REST API (https, or http for a local one).
function daytona(method, path, body) {
  const url = new URL(DAYTONA_API_URL + path);
  return request(url.protocol === 'https:' ? https : http, {
    method,
    hostname: url.hostname,
    port: url.port,
    path: url.pathname + url.search,
    headers: { Authorization: `Bearer ${DAYTONA_API_KEY}` },
  }, body);
}

// createSandbox: declare first (tether journals it before it answers), then
// create with exactly tether's name and labels, then report the id.
async function createSandbox(run, i) {
  const intent = await tether('POST', '/v1/intents', { labels: { run }, on_drain: 'delete', key: `${run}-${i}` });
  const sandbox = await daytona('POST', '/sandbox', { name: intent.name, labels: intent.labels, autoStopInterval: 15 });
  await tether('POST', `/v1/intents/${intent.id}/observe`, { sandbox_id: sandbox.id });
  return { intent, sandbox };
}

// deleteSandbox: the runner's own cleanup, then tell tether it is handled.
async function deleteSandbox({ intent, sandbox }) {
  await daytona('DELETE', `/sandbox/${sandbox.id}`);
  await tether('POST', `/v1/intents/${intent.id}/release`, { outcome: 'deleted' });
}

async function main() {
  const args = process.argv.slice(2);
  const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : def; };
  const count = Number(opt('--sandboxes', '1'));
  // Each start is a new run: a restarted container must not reuse the keys
  // of the sandboxes its previous start declared (and tether drained).
  const run = opt('--label', `node-${process.pid}-${Date.now()}`);
  const hold = args.includes('--hold');
  if (!TETHER_SOCKET) throw new Error('TETHER_SOCKET is not set: run me under tether run');
  if (!DAYTONA_API_KEY) throw new Error('DAYTONA_API_KEY is not set');

  const held = [];
  for (let i = 0; i < count; i++) {
    const h = await createSandbox(run, i);
    held.push(h);
    console.log(`created ${h.intent.id} ${h.intent.name} ${h.sandbox.id}`);
  }
  if (hold) {
    console.log('ready');
    setInterval(() => {}, 1 << 30); // killed mid-job: no cleanup runs
    return;
  }
  // ... the agent's work would happen here ...
  for (const h of held) {
    await deleteSandbox(h);
    console.log(`released ${h.intent.id} ${h.intent.name} ${h.sandbox.id}`);
  }
}

main().catch((err) => { console.error(`runner: ${err.message}`); process.exit(1); });
