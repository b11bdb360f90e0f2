// graphile-worker, measured by bench/peers.sh. One JSON line on stdout.
//
//   node graphile.mjs URL add CONNECTIONS WARMUP DURATION
//       addJob with a jobKey unique per call, CONNECTIONS callers through a
//       pg Pool of CONNECTIONS connections, WARMUP s unmeasured, then DURATION s.
//   node graphile.mjs URL storm CONNECTIONS CALLERS
//       CALLERS addJob calls with one jobKey, started together, through a
//       pool of CONNECTIONS; reports the distinct job ids answered.
//   node graphile.mjs URL fill JOBS
//       JOBS no-op jobs queued with addJobs, 1,000 a call (not measured).
//   node graphile.mjs URL complete WARMUP DURATION [CONCURRENCY]
//       a runner with graphile-worker's default options (or CONCURRENCY
//       jobs at once) and a task that does nothing works through the queued
//       jobs; after WARMUP s, the jobs completed in DURATION s.
//   node graphile.mjs URL e2e CONNECTIONS WARMUP DURATION
//       a closed loop like `onejob bench e2e`: CONNECTIONS callers, each
//       adding a no-op job and waiting until a runner with `concurrency`
//       CONNECTIONS reports it complete (its "job:complete" event, which
//       fires once the completion is sent, before it commits: a lower bound
//       of the time a caller would wait to see it done).
//
// jobKey: graphile-worker's default jobKeyMode, "replace" (a call with a key
// already queued updates that job and answers it). Logging: errors and
// warnings only, as the onejob server runs with RUST_LOG=warn, and
// NO_LOG_SUCCESS set by peers.sh, so no line is formatted per job.
import { randomUUID } from "node:crypto";
import pg from "pg";
import { Logger, makeWorkerUtils, run as runWorker } from "graphile-worker";
import { args, fillPool, print, run, sleep, storm } from "./load.mjs";

const { url, mode, numbers } = args("graphile.mjs URL add|storm|fill|complete|e2e NUMBERS...");
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`graphile-worker ${level}: ${message}`);
});
const payload = { text: "job 1 2" };

// Jobs still in the table: graphile-worker deletes a job when it completes.
async function queued(client) {
  const { rows } = await client.query("select count(*)::int as n from graphile_worker._private_jobs");
  return rows[0].n;
}

if (mode === "add" || mode === "storm") {
  const [connections, a, b] = numbers;
  const pool = new pg.Pool({ connectionString: url, max: connections });
  const onError = (e) => console.error(`pg: ${e.message}`);
  pool.on("error", onError);
  pool.on("connect", (client) => client.on("error", onError));
  const utils = await makeWorkerUtils({ pgPool: pool, logger });
  await utils.migrate();
  await fillPool(pool, connections);
  const runId = randomUUID();
  if (mode === "add") {
    const [warmup, duration] = [a, b];
    const add = (prefix) => (caller, n) => utils.addJob("noop", payload, { jobKey: `${prefix}-${runId}-${caller}-${n}` });
    if (warmup > 0) await run(connections, warmup, add("warm"));
    print(await run(connections, duration, add("bench")));
  } else {
    const callers = a;
    const { report, answers } = await storm(callers, () => utils.addJob("noop", payload, { jobKey: `storm-${runId}` }));
    const ids = new Set(answers.filter(Boolean).map((job) => String(job.id)));
    print({ ...report, extra: { distinct_job_ids: ids.size } });
  }
  await utils.release();
  await pool.end();
} else if (mode === "fill") {
  const [jobs] = numbers;
  const utils = await makeWorkerUtils({ connectionString: url, logger });
  await utils.migrate();
  for (let done = 0; done < jobs; done += 1000) {
    const count = Math.min(1000, jobs - done);
    await utils.addJobs(Array.from({ length: count }, () => ({ identifier: "noop", payload: {} })));
  }
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  print({ queued: await queued(client) });
  await client.end();
  await utils.release();
} else if (mode === "complete") {
  // Completed jobs are counted in the table, not with the runner's
  // "job:complete" event: that event fires once the completion is sent,
  // before it is committed (the worker does not wait for it before asking
  // for its next job). Counting the rows left counts committed completions.
  const [warmup, duration, concurrency] = numbers;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const atLaunch = await queued(client);
  // Default options: concurrency (concurrentJobs 1), pollInterval (2 s),
  // maxPoolSize (10), no local queue, no batching of completions; with a
  // CONCURRENCY, that many jobs at once (and a pool as large).
  const tuned = concurrency ? { concurrency, maxPoolSize: concurrency } : {};
  const runner = await runWorker({
    connectionString: url,
    logger,
    taskList: { noop: async () => {} },
    ...tuned,
  });
  let errors = 0;
  runner.events.on("job:error", () => errors++);
  await sleep(warmup);
  const before = await queued(client);
  const errorsBefore = errors;
  const t0 = process.hrtime.bigint();
  await sleep(duration);
  const after = await queued(client);
  const windowErrors = errors - errorsBefore;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  await runner.stop();
  const atExit = await queued(client);
  await client.end();
  print({
    seconds,
    ok: before - after,
    // Attempts that threw (none should: the task does nothing).
    errors: windowErrors,
    throughput: (before - after) / seconds,
    // Over the whole process (warm-up and shutdown too): the jobs that the
    // CPU time measured around it paid for.
    completed_in_process: atLaunch - atExit,
    queued_at_start: before,
    queued_at_end: after,
  });
} else if (mode === "e2e") {
  const [connections, warmup, duration] = numbers;
  const pool = new pg.Pool({ connectionString: url, max: connections });
  const utils = await makeWorkerUtils({ pgPool: pool, logger });
  await utils.migrate();
  await fillPool(pool, connections);
  // The callers waiting, by job id; and the jobs that completed before
  // their caller's addJob answered.
  const waiting = new Map();
  const completedEarly = new Map();
  const runner = await runWorker({
    connectionString: url,
    logger,
    taskList: { noop: async () => {} },
    concurrency: connections,
    maxPoolSize: connections,
  });
  runner.events.on("job:complete", ({ job, error }) => {
    const id = String(job.id);
    const caller = waiting.get(id);
    if (!caller) {
      completedEarly.set(id, error);
      return;
    }
    waiting.delete(id);
    if (error) caller.reject(error);
    else caller.resolve();
  });
  const oneJob = async () => {
    const id = String((await utils.addJob("noop", payload)).id);
    if (completedEarly.has(id)) {
      const error = completedEarly.get(id);
      completedEarly.delete(id);
      if (error) throw error;
      return;
    }
    await new Promise((resolve, reject) => waiting.set(id, { resolve, reject }));
  };
  if (warmup > 0) await run(connections, warmup, oneJob);
  print(await run(connections, duration, oneJob));
  await runner.stop();
  await utils.release();
  await pool.end();
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
