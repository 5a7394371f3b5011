// JavaScript's own reading of `format=number` (SPEC §9), against the real binary: a js-safe
// node's IDs, asked for as JSON numbers, parsed with plain JSON.parse (no BigInt, no reviver),
// printed back with String(), must equal the decimals the server wrote, digit for digit, and be
// safe integers that increase. A layout whose IDs could exceed 2^53 - 1 refuses the format.
//
//   node tests/node/json-parse-ids.mjs [SNOWFLAKE_BIN] [COUNT]
//
// SNOWFLAKE_BIN (or the first argument) is the `snowflake` binary; COUNT defaults to 1,000,000.
// Plain Node (20 or later), no packages. Exit 0 when every ID matched; 1, saying why, otherwise.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";

const binary = process.argv[2] ?? process.env.SNOWFLAKE_BIN;
const total = Number(process.argv[3] ?? 1_000_000);
if (!binary) {
  console.error("usage: json-parse-ids.mjs SNOWFLAKE_BIN [COUNT] (or set SNOWFLAKE_BIN)");
  process.exit(2);
}
const BATCH = 100_000;

/** Starts `snowflake serve` with `layout` on a fresh state directory; resolves to its HTTP address. */
function serve(layout) {
  const stateDir = mkdtempSync(join(tmpdir(), "sf-node-"));
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith("SNOWFLAKE_")),
  );
  const child = spawn(
    binary,
    [
      "--layout", layout, "serve", "--state-dir", stateDir, "--http-addr", "127.0.0.1:0",
      "--grpc-addr", "off", "--thrift-addr", "off", "--max-batch", String(BATCH),
    ],
    { env, stdio: ["ignore", "ignore", "pipe"] },
  );
  const stop = () => {
    child.kill("SIGTERM");
    return new Promise((resolve) => child.once("exit", resolve)).finally(() =>
      rmSync(stateDir, { recursive: true, force: true }),
    );
  };
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no `http listening` line within 20 s")), 20_000);
    child.once("exit", (code) => reject(new Error(`snowflake serve exited with ${code}`)));
    createInterface({ input: child.stderr }).on("line", (line) => {
      const found = /http listening.*addr=(\S+)/.exec(line);
      if (found) {
        clearTimeout(timer);
        resolve({ base: `http://${found[1]}`, stop });
      }
    });
  });
}

async function fetchText(url) {
  const response = await fetch(url);
  return { status: response.status, text: await response.text() };
}

const failures = [];
const js = await serve("js-safe");
try {
  let checked = 0;
  let previous = -1;
  while (checked < total) {
    const count = Math.min(BATCH, total - checked);
    const { status, text } = await fetchText(`${js.base}/v1/ids?count=${count}&format=number`);
    if (status !== 200) throw new Error(`HTTP ${status}: ${text.slice(0, 200)}`);
    // The server's own decimals, as it wrote them.
    const written = text.slice(text.indexOf("[") + 1, text.lastIndexOf("]")).split(",");
    const parsed = JSON.parse(text).ids;
    if (parsed.length !== count || written.length !== count) {
      throw new Error(`asked for ${count}, parsed ${parsed.length}, written ${written.length}`);
    }
    for (let i = 0; i < count; i++) {
      const id = parsed[i];
      if (typeof id !== "number" || !Number.isSafeInteger(id) || String(id) !== written[i].trim()) {
        failures.push(`id ${checked + i}: written ${written[i]}, JSON.parse read ${id}`);
      } else if (id <= previous) {
        failures.push(`id ${checked + i}: ${id} does not increase on ${previous}`);
      }
      previous = id;
      if (failures.length >= 10) break;
    }
    if (failures.length >= 10) break;
    checked += count;
  }
  console.log(`js-safe: ${checked} IDs parsed with JSON.parse equal the server's decimals`);
} finally {
  await js.stop();
}

// Twitter's layout refuses to send numbers a double cannot hold.
const twitter = await serve("twitter");
try {
  const { status, text } = await fetchText(`${twitter.base}/v1/ids?count=2&format=number`);
  if (status !== 400 || !text.includes("format=number needs a layout")) {
    failures.push(`twitter: format=number answered ${status}: ${text.slice(0, 200)}`);
  } else {
    console.log("twitter: format=number refused (400)");
  }
} finally {
  await twitter.stop();
}

if (failures.length > 0) {
  console.error(failures.join("\n"));
  process.exit(1);
}
