#!/usr/bin/env node
// The .proto shipped in the package (proto/snowflake/v1/snowflake.proto) must be the
// repository's (../../proto/snowflake/v1/snowflake.proto): exits 1 naming both when they differ.
// With --write, copies the repository's over the package's.
import { copyFileSync, readFileSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const file = join("snowflake", "v1", "snowflake.proto");
const shipped = join(here, "..", "proto", file);
const source = join(here, "..", "..", "..", "proto", file);
const show = (path) => relative(process.cwd(), path) || path;

if (process.argv.includes("--write")) {
  copyFileSync(source, shipped);
  console.log(`copied ${show(source)} to ${show(shipped)}`);
} else if (!readFileSync(shipped).equals(readFileSync(source))) {
  console.error(
    `${show(shipped)} differs from ${show(source)}: run node ${show(join(here, "check-proto.mjs"))} --write`,
  );
  process.exit(1);
} else {
  console.log(`${show(shipped)} is the repository's`);
}
