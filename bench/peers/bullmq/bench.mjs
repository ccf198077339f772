// BullMQ on the same redis-server as wheel-jobs' bench, for a same-run comparison.
//
//   cd bench/peers/bullmq && npm install
//   node bench.mjs /tmp/rb/redis.sock [concurrency, default 50]
//
// Prints the same figures as `cargo run --release -p wheel-bench --bin jobs -- --redis
// redis+unix:///tmp/rb/redis.sock`: adds/s (one at a time with 64 in
// flight, and in bulk), deliveries + acks/s with 100k jobs already due (no-op processor,
// concurrency 50 unless given, removeOnComplete), and lateness after the due time for 100k
// jobs due over 10 s and for 1,000 jobs over 10 s. With each phase, per job: the requests
// the clients sent (counted here: every socket write is one request to the server, a
// pipeline or MULTI batch being one write), and the reads the server counted (`INFO`
// total_reads_processed: requests that arrive together are one read).
import net from 'node:net';
import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';

let requests = 0;
const socketWrite = net.Socket.prototype.write;
net.Socket.prototype.write = function (...args) {
  requests++;
  return socketWrite.apply(this, args);
};

const socket = process.argv[2] ?? '/tmp/rb/redis.sock';
const concurrency = Number(process.argv[3] ?? 50);
const connection = { path: socket, maxRetriesPerRequest: null };
const stats = new IORedis({ path: socket });
const counters = async () => {
  const info = await stats.info('all');
  const field = (prefix) => Number(info.split('\r\n').find((l) => l.startsWith(prefix))?.slice(prefix.length).split(',')[0] ?? 0);
  return [requests, field('total_reads_processed:')];
};
const perJob = async (before, jobs) => {
  const after = await counters();
  return ` (per job: ${((after[0] - before[0]) / jobs).toFixed(3)} client requests, ${((after[1] - before[1]) / jobs).toFixed(3)} server reads)`;
};
let n = 0;
const fresh = () => new Queue(`bench-${process.pid}-${n++}`, { connection });

async function addsInFlight(total, inFlight) {
  const q = fresh();
  await q.waitUntilReady();
  const before = await counters();
  const start = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: inFlight }, async () => {
    while (next < total) {
      const i = next++;
      await q.add('job', { p: 'payload-16-bytes' }, { jobId: `j${i}`, delay: 3600_000, removeOnComplete: true });
    }
  }));
  const rate = total / ((performance.now() - start) / 1000);
  const trips = await perJob(before, total);
  await q.obliterate({ force: true });
  await q.close();
  return [rate, trips];
}

async function bulk(q, total, opts) {
  for (let base = 0; base < total; base += 10_000) {
    const jobs = [];
    for (let i = base; i < Math.min(base + 10_000, total); i++) {
      jobs.push({ name: 'job', data: { p: 'payload-16-bytes' }, opts: { jobId: `j${i}`, removeOnComplete: true, ...opts(i) } });
    }
    await q.addBulk(jobs);
  }
}

async function drain(q, total, onJob) {
  let done = 0;
  const start = performance.now();
  await new Promise((resolve) => {
    const worker = new Worker(q.name, async (job) => { onJob?.(job); }, { connection, concurrency });
    worker.on('completed', () => { if (++done === total) { resolve(); worker.close(); } });
  });
  return performance.now() - start;
}

const pct = (sorted, p) => sorted[Math.round((sorted.length - 1) * p)];

const [one] = await addsInFlight(2_000, 1);
const [many, manyTrips] = await addsInFlight(64_000, 64);
console.log(`bullmq adds/s: 1 in flight ${one.toFixed(0)}, 64 in flight ${many.toFixed(0)}${manyTrips}`);

{
  const q = fresh();
  await q.waitUntilReady();
  const before = await counters();
  const start = performance.now();
  await bulk(q, 100_000, () => ({ delay: 3600_000 }));
  const rate = 100_000 / ((performance.now() - start) / 1000);
  console.log(`bullmq addBulk (10k per call): ${rate.toFixed(0)} jobs/s${await perJob(before, 100_000)}`);
  await q.obliterate({ force: true });
  await q.close();
}

{
  const q = fresh();
  await bulk(q, 100_000, () => ({}));
  const before = await counters();
  const ms = await drain(q, 100_000);
  console.log(`bullmq deliveries + acks/s (100k due, concurrency ${concurrency}, no-op): ${(100_000 / (ms / 1000)).toFixed(0)}${await perJob(before, 100_000)}`);
  await q.close();
}

// Loading 100k jobs takes BullMQ ~5 s: give it 8 s of lead so no job is late before the worker starts.
for (const [total, lead] of [[100_000, 8_000], [1_000, 1_000]]) {
  const q = fresh();
  const start = Date.now() + lead;
  const step = 10_000 / total;
  const base = Date.now();
  await bulk(q, total, (i) => {
    const at = start + i * step;
    return { delay: Math.max(0, at - base) };
  });
  const late = [];
  const before = await counters();
  await drain(q, total, (job) => late.push(Date.now() - (job.timestamp + job.opts.delay)));
  late.sort((a, b) => a - b);
  console.log(`bullmq lateness after due (${total} jobs over 10 s): p50 ${pct(late, 0.5).toFixed(2)} ms, p99 ${pct(late, 0.99).toFixed(2)} ms, max ${late[late.length - 1].toFixed(2)} ms${await perJob(before, total)}`);
  await q.close();
}
process.exit(0);
