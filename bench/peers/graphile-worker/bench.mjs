// graphile-worker on the same PostgreSQL server as wheel-jobs' bench, for a same-run comparison.
//
//   cd bench/peers/graphile-worker && npm ci
//   node bench.mjs postgres://postgres@127.0.0.1:5432/postgres 20000 [pollInterval ms]
//
// The phases of issue 30's benchmark, with N the second argument:
//   1. single schedules: N `addJob` calls with 64 in flight, due in an hour;
//   2. bulk schedules: N jobs through `addJobs`, 10,000 per call, due in an hour;
//   3. deliveries + acks: N jobs already due, then a runner with concurrency 50 and a no-op
//      task, timed until the jobs table is empty (completed jobs are deleted);
//   4. lateness: N jobs due evenly over 10 s, the runner started before the first is due;
//      lateness is the task's start minus the job's run_at;
//   5. sparse: the same with 1,000 jobs over 10 s.
// Jobs due now wake the runner through LISTEN/NOTIFY; jobs due later are found by polling
// (`pollInterval`, the library's default 2,000 ms unless given). Each phase runs on a task
// name of its own, and the jobs table is emptied between phases. With each phase: the
// database's CPU per job (../pg-common.mjs).
import fs from 'node:fs';
import pg from 'pg';
import { run, makeWorkerUtils, runMigrations, Logger } from 'graphile-worker';
import { args, lateness, dbCpu, cpuPerJob } from '../pg-common.mjs';

const { url, n, poll } = args('node bench.mjs <postgres url> <N >= 1000> [pollInterval ms]');
const quiet = new Logger(() => (level, message) => {
  if (level === 'error') console.error(message);
});
const common = { connectionString: url, logger: quiet };
const client = new pg.Client({ connectionString: url });
await client.connect();
const query = async (sql) => Object.values((await client.query(sql)).rows[0] ?? {})[0];
const cpu = await dbCpu(query);

await runMigrations(common);
const utils = await makeWorkerUtils(common);
const empty = () => client.query('TRUNCATE graphile_worker._private_jobs CASCADE');
await empty();
const version = JSON.parse(fs.readFileSync(new URL('./node_modules/graphile-worker/package.json', import.meta.url))).version;
console.log(`graphile-worker ${version}, N = ${n}, pollInterval ${poll ?? 'default (2000)'} ms, ${await query('SELECT version()')}`);
const payload = { p: 'payload-16-bytes' };
const hour = () => new Date(Date.now() + 3600_000);

async function bulk(task, total, runAt) {
  for (let base = 0; base < total; base += 10_000) {
    const specs = [];
    for (let i = base; i < Math.min(base + 10_000, total); i++) {
      specs.push({ identifier: task, payload, runAt: runAt(i) });
    }
    await utils.addJobs(specs);
  }
}

// A runner for `task` with 50 at a time; `onJob(job)` at each job's start. `done` resolves
// after `total` jobs have run and the runner has stopped.
async function runner(task, total, onJob) {
  let seen = 0;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const r = await run({
    ...common,
    concurrency: 50,
    noHandleSignals: true,
    ...(poll === undefined ? {} : { pollInterval: poll }),
    taskList: {
      [task]: async (_payload, helpers) => {
        onJob?.(helpers.job);
        if (++seen === total) finish();
      },
    },
  });
  return { done: finished.then(() => r.stop()) };
}

// Resolves once no job is left: the runner's stop does not wait for the last completions to
// be written.
async function drained(task) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const res = await client.query('SELECT count(*)::int AS c FROM graphile_worker._private_jobs');
    if (res.rows[0].c === 0) return;
    if (Date.now() > deadline) throw new Error(`${task}: ${res.rows[0].c} jobs left after 30 s`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

{
  const before = cpu();
  const start = performance.now();
  let next = 0;
  await Promise.all(Array.from({ length: 64 }, async () => {
    while (next < n) {
      next++;
      await utils.addJob('single', payload, { runAt: hour() });
    }
  }));
  const rate = n / ((performance.now() - start) / 1000);
  console.log(`single schedules, 64 in flight: ${rate.toFixed(0)} jobs/s${cpuPerJob(cpu, before, n)}`);
  await empty();
}

let bulkRate;
{
  const before = cpu();
  const start = performance.now();
  await bulk('bulk', n, hour);
  bulkRate = n / ((performance.now() - start) / 1000);
  console.log(`bulk schedules (addJobs, 10,000 per call): ${bulkRate.toFixed(0)} jobs/s${cpuPerJob(cpu, before, n)}`);
  await empty();
}

{
  await bulk('drain', n, () => undefined);
  const before = cpu();
  const start = performance.now();
  const { done } = await runner('drain', n);
  await done;
  await drained('drain');
  const rate = n / ((performance.now() - start) / 1000);
  console.log(`deliveries + acks, ${n} due, 50 at a time: ${rate.toFixed(0)} jobs/s${cpuPerJob(cpu, before, n)}`);
}

for (const total of [n, 1000]) {
  const task = `late${total}`;
  const late = [];
  const { done } = await runner(task, total, (job) => late.push(Date.now() - job.run_at.getTime()));
  // Enough lead for the inserts (at the bulk rate measured above, twice over) plus a second.
  const first = Date.now() + 1000 + (2 * total * 1000) / bulkRate;
  const step = 10_000 / total;
  const before = cpu();
  await bulk(task, total, (i) => new Date(first + i * step));
  await done;
  await drained(task);
  console.log(`lateness, ${total} jobs due over 10 s: ${lateness(late)}${cpuPerJob(cpu, before, total)}`);
}

await utils.release();
await client.end();
