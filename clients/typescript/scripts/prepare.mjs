#!/usr/bin/env node
// npm's `prepare` step: compiles src/ to dist/ (an ES module with declarations). When the
// compiler is not installed here (`npm install ./clients/typescript` links or packs this
// directory without installing its devDependencies), it first installs them from
// package-lock.json (`npm ci --ignore-scripts`, so this script does not run again).
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const run = (command, args) => {
  const result = spawnSync(command, args, { cwd: root, stdio: "inherit" });
  if (result.error) {
    console.error(`snowflake-client prepare: cannot run ${command}: ${result.error.message}`);
    process.exit(1);
  }
  if (result.status !== 0) {
    console.error(`snowflake-client prepare: ${command} ${args.join(" ")} failed (exit ${result.status})`);
    process.exit(result.status ?? 1);
  }
};

const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
if (!existsSync(tsc)) {
  const npm = process.env["npm_execpath"];
  const args = ["ci", "--ignore-scripts", "--include=dev", "--no-audit", "--no-fund"];
  if (npm !== undefined && npm.endsWith(".js")) {
    run(process.execPath, [npm, ...args]);
  } else {
    run("npm", args);
  }
}
run(process.execPath, [tsc, "-p", "tsconfig.json"]);
