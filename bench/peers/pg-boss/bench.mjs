// pg-boss on the same PostgreSQL server as wheel-jobs' bench, for a same-run comparison.
//
//   cd bench/peers/pg-boss && npm ci
//   node bench.mjs postgres://postgres@127.0.0.1:5432/postgres 20000 [pollingIntervalSeconds]
//
// The phases of issue 30's benchmark, with N the second argument, each on a queue of its own
// (pg-boss 10+ needs `createQueue`):
//   1. single schedules: N `send` calls with 64 in flight, due in an hour;
//   2. bulk schedules: N jobs through `insert`, 10,000 per call, due in an hour;
//   3. deliveries + acks: N jobs already due, then workers with 50 jobs in hand at most
//      (`localConcurrency` 5 x `batchSize` 10, `burstWhenBatchFull` so a full batch fetches
//      again at once; a batch is completed in one statement), a no-op handler, timed until
//      the last completion is committed (`offWork` with `wait`);
//   4. lateness: N jobs due evenly over 10 s, the workers started before the first is due;
//      lateness is the handler's start minus the job's due time;
//   5. sparse: the same with 1,000 jobs over 10 s.
// pg-boss polls: `pollingIntervalSeconds` is the library's default (2) unless given, its
// documented minimum being 0.5. With each phase: the database's CPU per job (../pg-common.mjs).
import fs from 'node:fs';
import pg from 'pg';
import { PgBoss } from 'pg-boss';
import { args, lateness, dbCpu, cpuPerJob } from '../pg-common.mjs';

const { url, n, poll } = args('node bench.mjs <postgres url> <N >= 1000> [pollingIntervalSeconds]');
const client = new pg.Client({ connectionString: url });
await client.connect();
const query = async (sql) => Object.values((await client.query(sql)).rows[0] ?? {})[0];
const cpu = await dbCpu(query);

const boss = new PgBoss(url);
boss.on('error', (err) => console.error(err));
await boss.start();
const version = JSON.parse(fs.readFileSync(new URL('./node_modules/pg-boss/package.json', import.meta.url))).version;
console.log(`pg-boss ${version}, N = ${n}, pollingIntervalSeconds ${poll ?? 'default (2)'}, ${await query('SELECT version()')}`);
const run = process.pid;
const queue = async (phase) => {
  const name = `bench-${run}-${phase}`;
  await boss.createQueue(name);
  return name;
};
const hour = () => new Date(Date.now() + 3600_000);

async function bulk(name, total, due) {
  for (let base = 0; base < total; base += 10_000) {
    const jobs = [];
    for (let i = base; i < Math.min(base + 10_000, total); i++) {
      const at = due(i);
      jobs.push({ data: { p: 'payload-16-bytes', due: at?.getTime() }, ...(at ? { startAfter: at } : {}) });
    }
    await boss.insert(name, jobs);
  }
}

// Workers on `name`; `onJob(job)` at each job's start. `done` resolves after `total` jobs have
// run and the workers have stopped, their completions committed.
async function workers(name, total, onJob) {
  let seen = 0;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const options = { localConcurrency: 5, batchSize: 10, burstWhenBatchFull: true };
  if (poll !== undefined) options.pollingIntervalSeconds = poll;
  await boss.work(name, options, async (jobs) => {
    await Promise.all(jobs.map(async (job) => {
      onJob?.(job);
      if (++seen === total) finish();
    }));
  });
  return { done: finished.then(() => boss.offWork(name, { wait: true })) };
}

async function left(name) {
  const res = await client.query("SELECT count(*)::int AS c FROM pgboss.job WHERE name = $1 AND state <> 'completed'", [name]);
  if (res.rows[0].c !== 0) throw new Error(`${name}: ${res.rows[0].c} jobs not completed`);
}

{
  const name = await queue('single');
  const before = cpu();
  const start = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: 64 }, async () => {
    while (next < n) {
      next++;
      await boss.send(name, { p: 'payload-16-bytes' }, { startAfter: hour() });
    }
  }));
  const rate = n / ((performance.now() - start) / 1000);
  console.log(`single schedules, 64 in flight: ${rate.toFixed(0)} jobs/s${cpuPerJob(cpu, before, n)}`);
  await boss.deleteQueue(name);
}

let bulkRate;
{
  const name = await queue('bulk');
  const before = cpu();
  const start = performance.now();
  await bulk(name, n, hour);
  bulkRate = n / ((performance.now() - start) / 1000);
  console.log(`bulk schedules (insert, 10,000 per call): ${bulkRate.toFixed(0)} jobs/s${cpuPerJob(cpu, before, n)}`);
  await boss.deleteQueue(name);
}

{
  const name = await queue('drain');
  await bulk(name, n, () => undefined);
  const before = cpu();
  const start = performance.now();
  const { done } = await workers(name, n);
  await done;
  const rate = n / ((performance.now() - start) / 1000);
  await left(name);
  console.log(`deliveries + acks, ${n} due, 50 in hand: ${rate.toFixed(0)} jobs/s${cpuPerJob(cpu, before, n)}`);
  await boss.deleteQueue(name);
}

for (const total of [n, 1000]) {
  const name = await queue(`late${total}`);
  const late = [];
  const { done } = await workers(name, total, (job) => late.push(Date.now() - job.data.due));
  // Enough lead for the inserts (at the bulk rate measured above, twice over) plus a second.
  const first = Date.now() + 1000 + (2 * total * 1000) / bulkRate;
  const step = 10_000 / total;
  const before = cpu();
  await bulk(name, total, (i) => new Date(first + i * step));
  await done;
  await left(name);
  console.log(`lateness, ${total} jobs due over 10 s: ${lateness(late)}${cpuPerJob(cpu, before, total)}`);
  await boss.deleteQueue(name);
}

await boss.stop({ graceful: true });
await client.end();
