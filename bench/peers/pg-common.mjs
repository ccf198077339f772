// What the PostgreSQL peers (graphile-worker/, pg-boss/) share: their arguments, the phases'
// arithmetic, and the database's CPU time.
//
// The database's CPU: the postmaster's user + system time, the time of the backends it has
// reaped (cutime + cstime: connections that closed), and the time of those still running, all
// from /proc. That needs the server on this machine and a superuser connection (to read
// `data_directory`); otherwise the figure is left out.
import fs from 'node:fs';

export function args(usage) {
  const url = process.argv[2];
  const n = Number(process.argv[3] ?? 20_000);
  const poll = process.argv[4] === undefined ? undefined : Number(process.argv[4]);
  if (!url || !Number.isInteger(n) || n < 1000) {
    console.error(`usage: ${usage}`);
    process.exit(2);
  }
  return { url, n, poll };
}

export const pct = (sorted, p) => sorted[Math.round((sorted.length - 1) * p)];

export function lateness(late) {
  late.sort((a, b) => a - b);
  const f = (x) => `${x.toFixed(1)} ms`;
  return `p50 ${f(pct(late, 0.5))}, p99 ${f(pct(late, 0.99))}, max ${f(late[late.length - 1])}`;
}

const TICK_MS = 10; // USER_HZ = 100 on Linux

function ticks(pid, withChildren) {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields 14-17 of stat(5), counted from the state (field 3) here.
  const own = Number(f[11]) + Number(f[12]);
  return withChildren ? own + Number(f[13]) + Number(f[14]) : own;
}

// A function giving the database's CPU time so far in ms, or null if it cannot be read.
export async function dbCpu(query) {
  try {
    const dir = await query('SHOW data_directory');
    const pm = fs.readFileSync(`${dir}/postmaster.pid`, 'utf8').split('\n')[0].trim();
    return () => {
      let total = ticks(pm, true);
      const children = fs.readFileSync(`/proc/${pm}/task/${pm}/children`, 'utf8').trim();
      for (const child of children ? children.split(' ') : []) {
        try {
          total += ticks(child, false);
        } catch {
          // Exited since the listing: the postmaster's cutime counts it.
        }
      }
      return total * TICK_MS;
    };
  } catch {
    return () => null;
  }
}

// ", database CPU X ms per job" for the CPU spent since `before` (or nothing).
export function cpuPerJob(cpu, before, jobs) {
  const now = cpu();
  return now === null || before === null ? '' : `, database CPU ${((now - before) / jobs).toFixed(3)} ms per job`;
}
