// Node's amqplib against a broker: `node broker_client.js amqp://guest:guest@127.0.0.1:PORT/`.
// Reads the server properties, runs declare/bind, confirmed publishes, basic.get, a consumer
// with acks, an RPC round trip, a mandatory return and a server-sent cancel; prints one JSON
// line and exits 0, or prints the failure and exits 1. Driven by
// tests/amqp_broker/test_clients.py.
'use strict';

const assert = require('node:assert/strict');
const amqp = require('amqplib');

function deadline(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function main(url) {
  const suffix = `${process.pid}-${Date.now()}`;
  const exchange = `node-x-${suffix}`;
  const queue = `node-q-${suffix}`;
  const conn = await amqp.connect(url);
  const ch = await conn.createConfirmChannel();
  const results = {};

  // what connection.start said the server is (amqplib's own tests check the product)
  const { product, version } = conn.connection.serverProperties;
  results.server = { product, version };

  // declare, bind, confirmed publishes
  await ch.assertExchange(exchange, 'topic', { durable: false });
  await ch.assertQueue(queue, { durable: false });
  await ch.bindQueue(queue, exchange, 'node.*');
  await new Promise((resolve, reject) => {
    ch.publish(exchange, 'node.a', Buffer.from('one'), {}, (err) => (err ? reject(err) : resolve()));
  });
  ch.publish(exchange, 'node.b', Buffer.from('two'), { headers: { n: 2 } });
  await ch.waitForConfirms();
  results.confirmed = 2;

  // basic.get with message count, then ack
  const got = await ch.get(queue, { noAck: false });
  assert.equal(got.content.toString(), 'one');
  assert.equal(got.fields.messageCount, 1);
  ch.ack(got);
  results.get = got.content.toString();

  // a consumer with manual acks
  const delivered = await deadline(
    new Promise((resolve, reject) => {
      ch.consume(queue, (msg) => {
        if (msg === null) return; // cancelled by the server when the queue goes at the end
        ch.ack(msg);
        resolve(msg);
      }).catch(reject);
    }),
    5000,
    'a delivery',
  );
  assert.equal(delivered.content.toString(), 'two');
  assert.equal(delivered.properties.headers.n, 2);
  results.consumed = delivered.content.toString();

  // RPC round trip over an exclusive, server-named reply queue
  const rpcQueue = `node-rpc-${suffix}`;
  const server = await conn.createChannel();
  await server.assertQueue(rpcQueue, { durable: false, exclusive: true });
  await server.consume(rpcQueue, (msg) => {
    if (msg === null) return;
    const reply = Buffer.from(msg.content.toString().toUpperCase());
    server.sendToQueue(msg.properties.replyTo, reply, {
      correlationId: msg.properties.correlationId,
    });
    server.ack(msg);
  });
  const client = await conn.createChannel();
  const { queue: replyQueue } = await client.assertQueue('', { exclusive: true });
  assert.match(replyQueue, /^amq\.gen-/);
  const answer = deadline(
    new Promise((resolve) => {
      client.consume(
        replyQueue,
        (msg) => {
          if (msg !== null && msg.properties.correlationId === 'c-1') {
            resolve(msg.content.toString());
          }
        },
        { noAck: true },
      );
    }),
    5000,
    'the RPC reply',
  );
  client.sendToQueue(rpcQueue, Buffer.from('ping'), { replyTo: replyQueue, correlationId: 'c-1' });
  results.rpc = await answer;
  assert.equal(results.rpc, 'PING');

  // a mandatory publish nobody takes comes back
  const returned = deadline(
    new Promise((resolve) => ch.once('return', (msg) => resolve(msg.fields))),
    5000,
    'basic.return',
  );
  ch.publish(exchange, 'unbound.key', Buffer.from('lost'), { mandatory: true });
  const fields = await returned;
  assert.equal(fields.replyCode, 312);
  assert.equal(fields.replyText, 'NO_ROUTE');
  results.returned = fields.replyText;

  // the server cancels a consumer when its queue is deleted: amqplib calls back with null
  const doomed = `node-doomed-${suffix}`;
  const watcher = await conn.createChannel();
  await watcher.assertQueue(doomed, { durable: false });
  const cancelled = deadline(
    new Promise((resolve) => {
      watcher.consume(doomed, (msg) => {
        if (msg === null) resolve(true);
      });
    }),
    5000,
    'the server-sent cancel',
  );
  await client.deleteQueue(doomed);
  results.cancelled = await cancelled;

  await ch.deleteQueue(queue);
  await ch.deleteExchange(exchange);
  await conn.close();
  console.log(JSON.stringify(results));
}

main(process.argv[2]).catch((err) => {
  console.error(err && err.stack ? err.stack : String(err));
  process.exit(1);
});
