// pg-boss, measured by bench/peers.sh. One JSON line on stdout.
//
//   node pgboss.mjs URL send CONNECTIONS WARMUP DURATION
//       send with an id unique per call, CONNECTIONS callers through
//       pg-boss's pool of CONNECTIONS connections (its `max`), WARMUP s
//       unmeasured, then DURATION s.
//   node pgboss.mjs URL storm CONNECTIONS CALLERS
//       CALLERS sends with one id, started together; reports the jobs
//       stored with that id, and how many callers got the id back.
//
// The id is pg-boss's idempotency key: send inserts with ON CONFLICT DO
// NOTHING and answers null when a job with the id is already there (a
// singletonKey alone does not deduplicate on a queue of the default
// policy, "standard"). The ids are made from the run and the call, so
// that a caller retrying a call would send the same one.
import { randomUUID } from "node:crypto";
import { PgBoss } from "pg-boss";
import { args, print, run, storm } from "./load.mjs";

const { url, mode, numbers } = args("pgboss.mjs URL send|storm CONNECTIONS NUMBERS...");
const [connections, a, b] = numbers;
const queue = "bench";
const payload = { text: "job 1 2" };

const boss = new PgBoss({ connectionString: url, max: connections });
boss.on("error", (e) => console.error(`pg-boss error: ${e.message}`));
await boss.start();
await boss.createQueue(queue);
// Open every connection of the pool before the measured calls.
await Promise.all(Array.from({ length: connections }, () => boss.getDb().executeSql("select pg_sleep(0.05)")));

// The run's first 24 hex digits, then the call's number in the last 12.
const prefix = randomUUID().slice(0, 24);
const idOf = (n) => prefix + n.toString(16).padStart(12, "0");

async function send(id) {
  const answer = await boss.send(queue, payload, { id });
  if (answer === null) throw new Error(`job ${id} was already there`);
  return answer;
}

if (mode === "send") {
  const [warmup, duration] = [a, b];
  // Each caller numbers its calls apart from the others': caller c's n-th
  // call is c + n * connections; the warm-up's come after the measured run's.
  const warmBase = 1 << 30;
  if (warmup > 0) await run(connections, warmup, (c, n) => send(idOf(warmBase + c + n * connections)));
  print(await run(connections, duration, (c, n) => send(idOf(c + n * connections))));
} else if (mode === "storm") {
  const callers = a;
  const id = idOf(0);
  // A caller that is answered null has not failed: its job is there; it is
  // just not told which. Counted apart.
  const { report, answers } = await storm(callers, () => boss.send(queue, payload, { id }));
  const { rows } = await boss.getDb().executeSql("select count(*)::int as n from pgboss.job where id = $1", [id]);
  print({
    ...report,
    extra: { distinct_job_ids: rows[0].n, answered_with_id: answers.filter((x) => typeof x === "string").length },
  });
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
await boss.stop({ graceful: false });
