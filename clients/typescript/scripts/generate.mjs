// Writes src/schema.ts from the specification a real server serves
// (`openapi-typescript`); `--check` fails instead when it would change it.
import openapiTS, { astToString } from "openapi-typescript";
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { startServer } from "./server.mjs";

const target = fileURLToPath(new URL("../src/schema.ts", import.meta.url));
const header = "// Generated from onejob's served /openapi.json by `npm run generate`\n// (openapi-typescript). Do not edit; `npm run generate -- --check` compares.\n\n";

export async function generated() {
  const server = await startServer();
  try {
    const spec = await (await fetch(`${server.url}/openapi.json`)).json();
    return header + astToString(await openapiTS(spec));
  } finally {
    await server.stop();
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const text = await generated();
  if (process.argv.includes("--check")) {
    if (readFileSync(target, "utf8") !== text) {
      console.error("src/schema.ts does not match the served specification: run `npm run generate`");
      process.exit(1);
    }
    console.log("src/schema.ts matches the served specification");
  } else {
    writeFileSync(target, text);
    console.log(`wrote ${target}`);
  }
}
