/**
 * TLS to the service: the CA that signed the nodes' certificates, and a client certificate for
 * nodes that require mutual TLS (`--tls-client-ca` on the server), checked before first use.
 *
 * @module
 */

import { X509Certificate, createPrivateKey, type KeyObject } from "node:crypto";
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { credentials, type ChannelCredentials } from "@grpc/grpc-js";
import { ConfigError } from "./errors.js";

/** Larger PEM files are refused rather than read whole. */
const MAX_PEM_BYTES = 1024 * 1024;

/** PEM text or bytes. */
export type Pem = string | Uint8Array;

/** TLS settings: PEM contents (see {@link tlsFromFiles} for paths). */
export interface TlsOptions {
  /** The CA certificate(s) the nodes' certificates must chain to. */
  readonly ca: Pem;
  /** A client certificate chain, for nodes that require mutual TLS; needs `key`. */
  readonly cert?: Pem;
  /** The client certificate's private key; needs `cert`. */
  readonly key?: Pem;
  /**
   * The name the nodes' certificates are checked against, when it is not the endpoint's host
   * (dialling by IP address a node whose certificate names only its DNS name).
   */
  readonly serverName?: string;
}

/** Reads a PEM file of at most 1 MiB; the error names the file. */
function readPem(path: string, what: string): Buffer {
  let fd: number | undefined;
  try {
    fd = openSync(path, "r");
    const size = fstatSync(fd).size;
    if (size > MAX_PEM_BYTES) {
      throw new ConfigError(`${what} ${path}: larger than 1 MiB`);
    }
    const bytes = Buffer.alloc(size);
    let read = 0;
    while (read < size) {
      const n = readSync(fd, bytes, read, size - read, read);
      if (n === 0) {
        break;
      }
      read += n;
    }
    return bytes.subarray(0, read);
  } catch (e) {
    if (e instanceof ConfigError) {
      throw e;
    }
    throw new ConfigError(`${what} ${path}: ${(e as Error).message}`);
  } finally {
    if (fd !== undefined) {
      closeSync(fd);
    }
  }
}

/** TLS settings from files: the CA, and for mutual TLS a client certificate and its key. */
export function tlsFromFiles(files: {
  readonly ca: string;
  readonly cert?: string;
  readonly key?: string;
  readonly serverName?: string;
}): TlsOptions {
  const options: {
    ca: Pem;
    cert?: Pem;
    key?: Pem;
    serverName?: string;
  } = { ca: readPem(files.ca, "the CA file") };
  if (files.cert !== undefined) {
    options.cert = readPem(files.cert, "the client certificate file");
  }
  if (files.key !== undefined) {
    options.key = readPem(files.key, "the client key file");
  }
  if (files.serverName !== undefined) {
    options.serverName = files.serverName;
  }
  // Checked here too, so that the error names the files.
  checkTls(options, files);
  return options;
}

const toBuffer = (pem: Pem): Buffer =>
  typeof pem === "string" ? Buffer.from(pem, "utf8") : Buffer.from(pem);

/** The certificates of a PEM bundle, parsed; an error names `what` and why. */
function certificates(pem: Buffer, what: string): X509Certificate[] {
  const text = pem.toString("latin1");
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g);
  if (blocks === null) {
    throw new ConfigError(`${what}: no certificate in it (expected PEM)`);
  }
  return blocks.map((block) => {
    try {
      return new X509Certificate(block);
    } catch (e) {
      throw new ConfigError(`${what}: not a PEM certificate file (${(e as Error).message})`);
    }
  });
}

/**
 * Checks TLS settings: the CA and the client certificate parse, the key parses and belongs to
 * the certificate, and `cert` and `key` come together.
 */
function checkTls(
  tls: TlsOptions,
  files?: { readonly ca: string; readonly cert?: string; readonly key?: string },
): void {
  const name = (what: string, path: string | undefined): string =>
    path === undefined ? what : `${what} ${path}`;
  certificates(toBuffer(tls.ca), name(files ? "the CA file" : "the CA", files?.ca));
  if ((tls.cert === undefined) !== (tls.key === undefined)) {
    throw new ConfigError(
      "mutual TLS needs both a client certificate (cert) and its private key (key), or neither",
    );
  }
  if (tls.cert !== undefined && tls.key !== undefined) {
    const certWhat = name(files ? "the client certificate file" : "the client certificate", files?.cert);
    const keyWhat = name(files ? "the client key file" : "the client key", files?.key);
    const [leaf] = certificates(toBuffer(tls.cert), certWhat);
    let key: KeyObject;
    try {
      key = createPrivateKey(toBuffer(tls.key));
    } catch (e) {
      throw new ConfigError(`${keyWhat}: not a PEM private key (${(e as Error).message})`);
    }
    if (!leaf!.checkPrivateKey(key)) {
      throw new ConfigError(`${keyWhat} does not go with ${certWhat}`);
    }
  }
  if (tls.serverName !== undefined && tls.serverName.trim() === "") {
    throw new ConfigError("tls.serverName is empty: give the name the certificates carry");
  }
}

/** gRPC credentials for `tls` (checked first), or plaintext. */
export function channelCredentials(tls: TlsOptions | undefined): ChannelCredentials {
  if (tls === undefined) {
    return credentials.createInsecure();
  }
  checkTls(tls);
  return credentials.createSsl(
    toBuffer(tls.ca),
    tls.key === undefined ? null : toBuffer(tls.key),
    tls.cert === undefined ? null : toBuffer(tls.cert),
  );
}
