// BullMQ on the same redis-server as wheel-jobs' bench, for a same-run comparison.
//
//   cd jobs/bench/bullmq && npm install
//   node bench.mjs /tmp/rb/redis.sock
//
// Prints the same figures as `cargo run --release -p wheel-jobs --features redis --example
// bench -- --redis redis+unix:///tmp/rb/redis.sock`: adds/s (one at a time with 64 in
// flight, and in bulk), deliveries + acks/s with 100k jobs already due (no-op processor,
// concurrency 50, removeOnComplete), and lateness after the due time for 100k jobs due over
// 10 s and for 1,000 jobs over 10 s.
import { Queue, Worker } from 'bullmq';

const socket = process.argv[2] ?? '/tmp/rb/redis.sock';
const connection = { path: socket, maxRetriesPerRequest: null };
let n = 0;
const fresh = () => new Queue(`bench-${process.pid}-${n++}`, { connection });

async function addsInFlight(total, inFlight) {
  const q = fresh();
  const start = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: inFlight }, async () => {
    while (next < total) {
      const i = next++;
      await q.add('job', { p: 'payload-16-bytes' }, { jobId: `j${i}`, delay: 3600_000, removeOnComplete: true });
    }
  }));
  const rate = total / ((performance.now() - start) / 1000);
  await q.obliterate({ force: true });
  await q.close();
  return rate;
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
    const worker = new Worker(q.name, async (job) => { onJob?.(job); }, { connection, concurrency: 50 });
    worker.on('completed', () => { if (++done === total) { resolve(); worker.close(); } });
  });
  return performance.now() - start;
}

const pct = (sorted, p) => sorted[Math.round((sorted.length - 1) * p)];

const one = await addsInFlight(2_000, 1);
const many = await addsInFlight(64_000, 64);
console.log(`bullmq adds/s: 1 in flight ${one.toFixed(0)}, 64 in flight ${many.toFixed(0)}`);

{
  const q = fresh();
  const start = performance.now();
  await bulk(q, 100_000, () => ({ delay: 3600_000 }));
  console.log(`bullmq addBulk (10k per call): ${(100_000 / ((performance.now() - start) / 1000)).toFixed(0)} jobs/s`);
  await q.obliterate({ force: true });
  await q.close();
}

{
  const q = fresh();
  await bulk(q, 100_000, () => ({}));
  const ms = await drain(q, 100_000);
  console.log(`bullmq deliveries + acks/s (100k due, concurrency 50, no-op): ${(100_000 / (ms / 1000)).toFixed(0)}`);
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
  await drain(q, total, (job) => late.push(Date.now() - (job.timestamp + job.opts.delay)));
  late.sort((a, b) => a - b);
  console.log(`bullmq lateness after due (${total} jobs over 10 s): p50 ${pct(late, 0.5).toFixed(2)} ms, p99 ${pct(late, 0.99).toFixed(2)} ms, max ${late[late.length - 1].toFixed(2)} ms`);
  await q.close();
}
process.exit(0);
