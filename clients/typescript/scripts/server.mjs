// A real `onejob serve` on a fresh SQLite file, on a free loopback port,
// for the tests and for generating the types from the served
// specification. The binary is ONEJOB_BIN, or else the debug build of this
// repository, which `cargo build` brings up to date first (so that `npm
// test` in a fresh clone, or after a change to the server, tests the server
// of the sources).
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
export const BIN = process.env.ONEJOB_BIN ?? debugBuild();

/** This repository's debug build of `onejob`, built or brought up to date. */
function debugBuild() {
  const root = resolve(here, "../../..");
  try {
    execFileSync("cargo", ["build", "--quiet", "--bin", "onejob"], { cwd: root, stdio: ["ignore", "ignore", "inherit"] });
  } catch (error) {
    throw new Error(`cannot build onejob with cargo in ${root} (or set ONEJOB_BIN to a built binary): ${error.message}`);
  }
  return resolve(root, "target/debug/onejob");
}

function freePort() {
  return new Promise((done, fail) => {
    const probe = createServer();
    probe.once("error", fail);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => done(port));
    });
  });
}

/**
 * Starts a server; `edit` may change the default configuration's text.
 * Resolves to { url, token, stop() }, with an API key of owner `alice`.
 */
export async function startServer(edit = (text) => text) {
  const dir = mkdtempSync(join(tmpdir(), "onejob-client-"));
  const config = join(dir, "onejob.toml");
  writeFileSync(config, edit(execFileSync(BIN, ["config", "print-default"], { encoding: "utf8" })));
  const env = { ...process.env, DATABASE_URL: `sqlite://${join(dir, "onejob.db")}`, RUST_LOG: "warn" };
  execFileSync(BIN, ["migrate", "--config", config], { env, stdio: "ignore" });
  const created = execFileSync(BIN, ["keys", "create", "--owner", "alice", "--config", config], { env, encoding: "utf8" });
  const token = created.trim().split("\n").pop();
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child = spawn(BIN, ["serve", "--config", config, "--no-migrate"], {
    env: { ...env, ONEJOB_LISTEN: `127.0.0.1:${port}` },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let log = "";
  child.stderr.on("data", (chunk) => { log += chunk; });
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      if ((await fetch(`${url}/readyz`)).ok) break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`onejob serve did not become ready:\n${log}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    token,
    async stop() {
      child.kill("SIGTERM");
      await new Promise((r) => (child.exitCode !== null ? r() : child.once("exit", r)));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
