// Node's amqplib closing a connection while publishes are still queued in its socket:
// `node close_with_queued_publishes.js amqp://guest:guest@127.0.0.1:PORT/`.
// For a plain channel and a confirm channel, publishes to an exclusive queue until
// sendToQueue() returns false (its write buffer is full, as amqplib's "find high watermark"
// tests do), then closes the connection at once: amqplib writes connection.close and goes on
// writing the publishes it had queued. The broker must read them and keep the socket open after
// close-ok until amqplib closes it, or amqplib gets a reset (EPIPE) and never calls back. Prints
// one JSON line and exits 0, or prints the failure and exits 1. Driven by
// tests/amqp_broker/test_clients.py.
'use strict';

const assert = require('node:assert/strict');
const amqp = require('amqplib/callback_api');

function deadline(ms, what, reject) {
  return setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
}

function fillThenClose(url, kind) {
  return new Promise((resolve, reject) => {
    amqp.connect(url, (err, conn) => {
      if (err) return reject(err);
      conn.on('error', reject);
      const open = kind === 'confirm' ? conn.createConfirmChannel : conn.createChannel;
      open.call(conn, (err, ch) => {
        if (err) return reject(err);
        ch.assertQueue('', { exclusive: true }, (err, ok) => {
          if (err) return reject(err);
          let queued = 0;
          while (ch.sendToQueue(ok.queue, Buffer.from(`message ${queued}`))) {
            queued++;
          }
          const timer = deadline(10000, `the close callback (${kind} channel)`, reject);
          conn.close((err) => {
            clearTimeout(timer);
            if (err) return reject(err);
            resolve(queued);
          });
        });
      });
    });
  });
}

async function main(url) {
  const results = {};
  for (const kind of ['plain', 'confirm']) {
    const queued = await fillThenClose(url, kind);
    assert.ok(queued > 0, `sendToQueue returned false at once on the ${kind} channel`);
    results[kind] = 'closed';
  }
  console.log(JSON.stringify(results));
}

main(process.argv[2]).catch((err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(1);
});
