/**
 * TLS and mutual TLS against real nodes (`--tls-cert`, `--tls-key`, `--tls-client-ca`), with
 * certificates made by openssl: the right identity is served, every wrong one fails with
 * `Unavailable` in time and a reason.
 *
 * @module
 */

import assert from "node:assert/strict";
import { after, test } from "node:test";
import { Client, Unavailable, tlsFromFiles, type TlsOptions } from "../src/index.js";
import { ServeNode, makeCerts, stopAll, track } from "./support.js";

after(stopAll);

async function refused(endpoints: string[], tls: TlsOptions | undefined, reason: RegExp): Promise<void> {
  const client = track(
    new Client({ endpoints, ...(tls ? { tls } : {}), giveUpAfterMs: 1500, deadlineMs: 500 }),
  );
  const started = performance.now();
  await assert.rejects(client.nextId(), (e: unknown) => {
    assert.ok(e instanceof Unavailable, String(e));
    assert.match(e.message, reason);
    return true;
  });
  assert.ok(performance.now() - started < 3000);
  client.close();
}

test(
  "mutual TLS: a node with --tls-client-ca serves a client with a certificate of that CA, and no other",
  { timeout: 120_000 },
  async () => {
    const certs = makeCerts();
    const node = await ServeNode.start({
      worker: 10,
      args: [
        "--tls-cert",
        certs.path("server.crt"),
        "--tls-key",
        certs.path("server.key"),
        "--tls-client-ca",
        certs.path("ca.crt"),
      ],
    });
    const mtls = tlsFromFiles({
      ca: certs.path("ca.crt"),
      cert: certs.path("client.crt"),
      key: certs.path("client.key"),
    });
    for (const endpoint of [node.addr, `https://${node.addr}`, `localhost:${node.port}`]) {
      const client = track(new Client({ endpoints: [endpoint], tls: mtls, prefetch: true }));
      const ids = await client.nextIds(100);
      assert.equal(new Set(ids).size, 100);
      assert.equal(typeof (await client.nextId()), "bigint");
      assert.equal((await client.info()).workerId, 10);
      client.close();
    }
    // No client certificate, one from another CA, a CA that did not sign the node's, plaintext.
    await refused([node.addr], tlsFromFiles({ ca: certs.path("ca.crt") }), /Unavailable/);
    await refused(
      [node.addr],
      tlsFromFiles({
        ca: certs.path("ca.crt"),
        cert: certs.path("stranger.crt"),
        key: certs.path("stranger.key"),
      }),
      /Unavailable/,
    );
    await refused(
      [node.addr],
      tlsFromFiles({
        ca: certs.path("other-ca.crt"),
        cert: certs.path("client.crt"),
        key: certs.path("client.key"),
      }),
      /certificate|Unavailable/,
    );
    await refused([node.addr], undefined, /Unavailable|no answer/);
  },
);

test(
  "TLS: a node with a certificate only serves a client that trusts its CA; a name it lacks is refused",
  { timeout: 120_000 },
  async () => {
    const certs = makeCerts();
    const node = await ServeNode.start({
      worker: 11,
      args: ["--tls-cert", certs.path("server.crt"), "--tls-key", certs.path("server.key")],
    });
    const tls = tlsFromFiles({ ca: certs.path("ca.crt") });
    const client = track(new Client({ endpoints: [node.addr], tls }));
    assert.equal((await client.nextIds(10)).length, 10);
    client.close();
    // The certificate names 127.0.0.1 and localhost: checked against another name, it fails.
    await refused([node.addr], { ...tls, serverName: "ids.example" }, /Unavailable/);
    // Dialled by IP address and checked against the DNS name the certificate carries.
    const named = track(new Client({ endpoints: [node.addr], tls: { ...tls, serverName: "localhost" } }));
    assert.equal((await named.nextIds(10)).length, 10);
    named.close();
  },
);
