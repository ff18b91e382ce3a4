// The two WASI 0.2 interfaces the SDK imports; componentize-js links them to the host's
// (synthesizer-sdk/wit). Only what the SDK calls is declared.
declare module "wasi:cli/stdin@0.2.12" {
  import type { InputStream } from "wasi:io/streams@0.2.12";
  export function getStdin(): InputStream;
}
declare module "wasi:cli/stdout@0.2.12" {
  import type { OutputStream } from "wasi:io/streams@0.2.12";
  export function getStdout(): OutputStream;
}
declare module "wasi:io/streams@0.2.12" {
  export interface InputStream {
    blockingRead(len: bigint): Uint8Array;
  }
  export interface OutputStream {
    blockingWriteAndFlush(contents: Uint8Array): void;
  }
}
