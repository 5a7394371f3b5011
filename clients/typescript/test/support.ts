/**
 * Test harness: real `snowflake serve` processes on 127.0.0.1 (random ports, temp state
 * directories, all stopped when the test file ends, even when it fails), `snowflake audit`,
 * a listener that accepts and never answers, and test certificates made with openssl.
 *
 * @module
 */

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository's root (this file is `clients/typescript/dist/test/support.js`). */
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");

/** The `snowflake` binary: `SNOWFLAKE_BIN`, else the workspace's debug build. */
export function snowflakeBin(): string {
  const path = process.env["SNOWFLAKE_BIN"] ?? join(ROOT, "target", "debug", "snowflake");
  if (!existsSync(path)) {
    throw new Error(
      `${path} does not exist: build it with \`cargo build -p snowflake-cli --locked\` (or set SNOWFLAKE_BIN)`,
    );
  }
  return path;
}

const tempDirs: string[] = [];
const running = new Set<ServeNode>();

/** A temporary directory, removed when the process exits. */
export function tempDir(prefix = "snowflake-ts-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

// Killed (a runner's timeout, Ctrl-C): still stop the nodes and remove the directories.
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => process.exit(128 + (signal === "SIGINT" ? 2 : 15)));
}

process.on("exit", () => {
  for (const node of running) {
    node.proc.kill("SIGCONT");
    node.proc.kill("SIGKILL");
  }
  for (const dir of tempDirs) {
    rmSync(dir, { recursive: true, force: true });
  }
});

/** How to start a node. */
export interface NodeOptions {
  readonly datacenter?: number;
  readonly worker: number;
  /** 0 (the default): the kernel picks, read back from the log. */
  readonly grpcPort?: number;
  /** Also serve HTTP (on a port the kernel picks). */
  readonly http?: boolean;
  /** A state directory to reuse (a restart); a new one by default. */
  readonly stateDir?: string;
  readonly args?: readonly string[];
}

/** A running `snowflake serve` with gRPC (and optionally HTTP) on 127.0.0.1. */
export class ServeNode {
  readonly proc: ChildProcess;
  readonly stateDir: string;
  /** `127.0.0.1:PORT` of its gRPC listener. */
  addr = "";
  /** `127.0.0.1:PORT` of its HTTP listener, when asked for. */
  httpAddr = "";
  /** Its log so far (stderr). */
  log = "";
  private readonly exited: Promise<number | null>;

  private constructor(proc: ChildProcess, stateDir: string) {
    this.proc = proc;
    this.stateDir = stateDir;
    this.exited = new Promise((resolve) => proc.once("exit", (code) => resolve(code)));
  }

  /** Starts a node and waits until its gRPC listener is bound. */
  static async start(options: NodeOptions): Promise<ServeNode> {
    const stateDir = options.stateDir ?? tempDir("snowflake-ts-state-");
    const args = [
      "serve",
      "--state-dir",
      stateDir,
      "--http-addr",
      options.http ? "127.0.0.1:0" : "off",
      "--thrift-addr",
      "off",
      "--grpc-addr",
      `127.0.0.1:${options.grpcPort ?? 0}`,
      "--datacenter-id",
      String(options.datacenter ?? 0),
      "--worker-id",
      String(options.worker),
      ...(options.args ?? []),
    ];
    const proc = spawn(snowflakeBin(), args, { stdio: ["ignore", "ignore", "pipe"] });
    const node = new ServeNode(proc, stateDir);
    running.add(node);
    void node.exited.then(() => running.delete(node));
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        proc.kill("SIGKILL");
        reject(new Error(`snowflake serve did not start within 20 s:\n${node.log}`));
      }, 20_000);
      proc.stderr!.setEncoding("utf8");
      proc.stderr!.on("data", (chunk: string) => {
        node.log += chunk;
        const grpc = /grpc listening addr=(\S+?):(\d+)/.exec(node.log);
        const http = /http listening addr=(\S+?):(\d+)/.exec(node.log);
        if (grpc && !node.addr) {
          node.addr = `${grpc[1]}:${grpc[2]}`;
        }
        if (http && !node.httpAddr) {
          node.httpAddr = `${http[1]}:${http[2]}`;
        }
        if (node.addr && (!options.http || node.httpAddr)) {
          clearTimeout(timer);
          resolve();
        }
      });
      proc.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`snowflake serve exited with ${code}:\n${node.log}`));
      });
    });
    return node;
  }

  /** The port of its gRPC listener. */
  get port(): number {
    return Number(this.addr.slice(this.addr.lastIndexOf(":") + 1));
  }

  /** Sends `signal` (SIGSTOP freezes it, SIGCONT thaws it). */
  signal(signal: NodeJS.Signals): void {
    this.proc.kill(signal);
  }

  /** Kills it at once (SIGKILL: no clean shutdown) and waits for the exit. */
  async kill(): Promise<void> {
    this.proc.kill("SIGCONT");
    this.proc.kill("SIGKILL");
    await this.exited;
  }

  /** Stops it cleanly (SIGTERM; SIGKILL after 15 s) and returns its exit code. */
  async stop(): Promise<number | null> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) {
      return this.proc.exitCode;
    }
    this.proc.kill("SIGCONT");
    this.proc.kill("SIGTERM");
    const timer = setTimeout(() => this.proc.kill("SIGKILL"), 15_000);
    const code = await this.exited;
    clearTimeout(timer);
    return code;
  }
}

/** Things to close at the end of the test file, whether its tests passed or not. */
const closing = new Set<{ close(): unknown }>();

/** `thing`, closed by {@link stopAll} (a failed assertion must not leave a client retrying). */
export function track<T extends { close(): unknown }>(thing: T): T {
  closing.add(thing);
  return thing;
}

/** Closes what was tracked and stops every node still running (for `after`). */
export async function stopAll(): Promise<void> {
  for (const thing of closing) {
    await thing.close();
  }
  closing.clear();
  await Promise.all([...running].map((node) => node.stop()));
}

/** What `snowflake audit --json` reports. */
export interface AuditReport {
  ids: number;
  unique: number;
  duplicates: number;
  invalid: number;
  future: number;
  nodes: Array<{ datacenter_id: number; worker_id: number; ids: number; first_ms: number; last_ms: number }>;
  time_range: { first_ms: number; last_ms: number } | null;
}

/** Runs `snowflake audit --json` over `ids` (written one decimal per line, as `String(id)`). */
export function audit(ids: readonly bigint[]): AuditReport {
  const file = join(tempDir("snowflake-ts-audit-"), "ids.txt");
  writeFileSync(file, ids.map((id) => String(id)).join("\n") + "\n");
  const out = spawnSync(snowflakeBin(), ["audit", "--json", file], {
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  if (out.error) {
    throw out.error;
  }
  try {
    return JSON.parse(out.stdout) as AuditReport;
  } catch {
    throw new Error(`snowflake audit exited with ${out.status}: ${out.stdout}\n${out.stderr}`);
  }
}

/** A listener that accepts connections and never answers: `{ addr, close }`. */
export async function blackHole(): Promise<{ addr: string; close: () => Promise<void> }> {
  const held: Socket[] = [];
  const server: Server = createServer((socket) => {
    held.push(socket);
    socket.on("error", () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") {
    throw new Error("no address");
  }
  return track({
    addr: `127.0.0.1:${address.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of held) {
          socket.destroy();
        }
        server.close(() => resolve());
      }),
  });
}

/** Runs openssl in `dir`; fails with what it printed. */
function openssl(dir: string, ...args: string[]): void {
  const out = spawnSync("openssl", args, { cwd: dir, encoding: "utf8" });
  if (out.error || out.status !== 0) {
    throw new Error(
      `openssl ${args.join(" ")}: ${out.error?.message ?? out.stderr} (Debian: apt-get install openssl)`,
    );
  }
}

/**
 * A CA and the certificates it signs, in a temp dir (the files `crates/snowflake-testkit` makes, here with openssl:
 * RSA 2048, the server's for 127.0.0.1 and localhost): `ca`, `server`, `client` (`.crt`, `.key`),
 * and a second CA's client certificate, `stranger`, that the server must refuse.
 */
export function makeCerts(): { dir: string; path: (name: string) => string } {
  const dir = tempDir("snowflake-ts-certs-");
  const ca = (name: string, cn: string): void =>
    openssl(
      dir,
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      `${name}.key`,
      "-out",
      `${name}.crt`,
      "-days",
      "2",
      "-subj",
      `/CN=${cn}`,
      "-addext",
      "basicConstraints=critical,CA:TRUE",
      "-addext",
      "keyUsage=critical,keyCertSign,cRLSign",
    );
  const issue = (name: string, cn: string, caName: string, server: boolean): void => {
    openssl(
      dir,
      "req",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      `${name}.key`,
      "-out",
      `${name}.csr`,
      "-subj",
      `/CN=${cn}`,
    );
    writeFileSync(
      join(dir, `${name}.ext`),
      server
        ? "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n" +
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
        : "extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n",
    );
    openssl(
      dir,
      "x509",
      "-req",
      "-in",
      `${name}.csr`,
      "-CA",
      `${caName}.crt`,
      "-CAkey",
      `${caName}.key`,
      "-CAcreateserial",
      "-out",
      `${name}.crt`,
      "-days",
      "2",
      "-extfile",
      `${name}.ext`,
    );
  };
  ca("ca", "snowflake-ts-test-ca");
  issue("server", "snowflake-ts-node", "ca", true);
  issue("client", "snowflake-ts-client", "ca", false);
  ca("other-ca", "another-ca");
  issue("stranger", "stranger", "other-ca", false);
  return { dir, path: (name: string) => join(dir, name) };
}

/** The Unix ms of a Twitter-layout ID with Twitter's epoch, fast (no object). */
export function twitterTimestampMs(id: bigint): number {
  return Number(id >> 22n) + 1288834974657;
}
