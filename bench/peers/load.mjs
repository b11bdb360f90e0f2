// The load loop shared by graphile.mjs and pgboss.mjs: concurrent callers,
// each calling one operation after another, every call timed with
// process.hrtime.bigint(); and the one-key storm (many callers released
// together). Results are printed as one JSON line, the fields named like
// `onejob bench --json`'s.

const now = () => process.hrtime.bigint();

function percentile(sorted, p) {
  if (sorted.length === 0) return 0;
  return sorted[Math.floor((sorted.length - 1) * p)];
}

function summary(latenciesNs, errors, seconds, connections) {
  const ms = Float64Array.from(latenciesNs, (ns) => Number(ns) / 1e6).sort();
  return {
    connections,
    seconds,
    ok: ms.length,
    errors,
    throughput: ms.length / seconds,
    p50_ms: percentile(ms, 0.5),
    p90_ms: percentile(ms, 0.9),
    p99_ms: percentile(ms, 0.99),
    max_ms: ms.length ? ms[ms.length - 1] : 0,
  };
}

// run(connections, seconds, call): `connections` callers, each awaiting
// call(caller, n) in a loop until `seconds` have passed; a call that throws
// counts as an error. Returns the summary.
export async function run(connections, seconds, call) {
  const latencies = [];
  let errors = 0;
  let firstError;
  const began = now();
  const deadline = began + BigInt(Math.round(seconds * 1e9));
  const caller = async (c) => {
    for (let n = 0; now() < deadline; n++) {
      const t0 = now();
      try {
        await call(c, n);
        latencies.push(now() - t0);
      } catch (e) {
        errors++;
        firstError ??= e;
      }
    }
  };
  await Promise.all(Array.from({ length: connections }, (_, c) => caller(c)));
  const elapsed = Number(now() - began) / 1e9;
  if (firstError) console.error(`first error: ${firstError.message ?? firstError}`);
  return summary(latencies, errors, elapsed, connections);
}

// storm(callers, call): `callers` calls of call() started together.
// Returns the summary and the calls' answers (undefined for a call that threw).
export async function storm(callers, call) {
  const latencies = [];
  let errors = 0;
  const began = now();
  const answers = await Promise.all(
    Array.from({ length: callers }, async () => {
      const t0 = now();
      try {
        const answer = await call();
        latencies.push(now() - t0);
        return answer;
      } catch (e) {
        errors++;
        if (errors === 1) console.error(`first error: ${e.message ?? e}`);
        return undefined;
      }
    }),
  );
  const elapsed = Number(now() - began) / 1e9;
  return { report: summary(latencies, errors, elapsed, callers), answers };
}

// Opens `connections` connections of a pg Pool before a run, so that the
// run does not time their opening.
export async function fillPool(pool, connections) {
  const clients = await Promise.all(Array.from({ length: connections }, () => pool.connect()));
  for (const client of clients) client.release();
}

export const sleep = (seconds) => new Promise((resolve) => setTimeout(resolve, seconds * 1000));

export function print(report) {
  process.stdout.write(JSON.stringify(report) + "\n");
}

// Command line: URL MODE [numbers...]
export function args(usage) {
  const [url, mode, ...rest] = process.argv.slice(2);
  if (!url || !mode) {
    console.error(`usage: ${usage}`);
    process.exit(2);
  }
  return { url, mode, numbers: rest.map(Number) };
}
