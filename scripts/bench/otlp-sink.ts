// The tracing scenario's OTLP/HTTP endpoint (scripts/bench/tracing.ts): it answers POST /v1/traces
// as a collector does, after reading the body, and keeps only counts: export requests, bytes and
// spans. A process of its own, so that receiving does not take the load generator's CPU. Prints
// its URL (the OTEL_EXPORTER_OTLP_ENDPOINT to give) when listening; GET /counts answers the counts.
//   node --import tsx scripts/bench/otlp-sink.ts
import { once } from 'node:events'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { gunzipSync } from 'node:zlib'
import { isEntryPoint } from '../../src/command-line.js'

export interface SinkCounts { requests: number, bytes: number, spans: number }

/** Calls `each` with the number and the bytes of each length-delimited field of a protobuf message (the others are skipped). */
function forEachMessageField (message: Buffer, each: (field: number, value: Buffer) => void): void {
  let at = 0
  const varint = () => {
    let value = 0
    for (let shift = 0; ; shift += 7) {
      const byte = message[at++]
      value += (byte & 0x7f) * 2 ** shift
      if (byte < 0x80) return value
    }
  }
  while (at < message.length) {
    const key = varint()
    const [field, wireType] = [Math.floor(key / 8), key % 8]
    if (wireType === 0) varint()
    else if (wireType === 1) at += 8
    else if (wireType === 5) at += 4
    else if (wireType === 2) {
      const length = varint()
      each(field, message.subarray(at, at + length))
      at += length
    } else throw new Error(`protobuf wire type ${wireType} is not in OTLP`)
  }
}

/** Spans in an ExportTraceServiceRequest: resource_spans (1) → scope_spans (2) → spans (2). */
function protobufSpans (body: Buffer): number {
  let spans = 0
  forEachMessageField(body, (field, resourceSpans) => {
    if (field !== 1) return
    forEachMessageField(resourceSpans, (field, scopeSpans) => {
      if (field !== 2) return
      forEachMessageField(scopeSpans, (field) => { if (field === 2) spans++ })
    })
  })
  return spans
}

interface OtlpJson { resourceSpans?: Array<{ scopeSpans?: Array<{ spans?: unknown[] }> }> }
const jsonSpans = (body: Buffer) => ((JSON.parse(body.toString('utf8')) as OtlpJson).resourceSpans ?? [])
  .flatMap(({ scopeSpans = [] }) => scopeSpans).reduce((sum, { spans = [] }) => sum + spans.length, 0)

/** Listens on a free port of 127.0.0.1 until SIGTERM, and prints its URL. */
async function serve (): Promise<void> {
  const counts: SinkCounts = { requests: 0, bytes: 0, spans: 0 }

  const server = createServer((request, response) => {
    if (request.method === 'GET' && request.url === '/counts') {
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(counts))
      return
    }
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      if (request.method !== 'POST' || request.url !== '/v1/traces') {
        response.writeHead(404).end()
        return
      }
      const received = Buffer.concat(chunks)
      const body = request.headers['content-encoding'] === 'gzip' ? gunzipSync(received) : received
      const json = request.headers['content-type']?.startsWith('application/json') === true
      counts.requests++
      counts.bytes += received.length
      counts.spans += json ? jsonSpans(body) : protobufSpans(body)
      // An empty ExportTraceServiceResponse (everything accepted): no bytes in protobuf, {} in JSON.
      response.writeHead(200, { 'content-type': json ? 'application/json' : 'application/x-protobuf' }).end(json ? '{}' : '')
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  console.log(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)
  process.on('SIGTERM', () => process.exit(0))
}

if (isEntryPoint(import.meta.url)) await serve()
