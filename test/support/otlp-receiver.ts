// A real OTLP/HTTP endpoint for the tracing tests: it answers POST /v1/traces as a collector does
// and keeps what arrived. JSON requests (OTEL_EXPORTER_OTLP_PROTOCOL=http/json) are decoded into
// spans, as the OTLP JSON encoding writes them; protobuf requests are kept as bytes.
import { once } from 'node:events'
import { createServer } from 'node:http'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Test } from 'tap'

type AttributeValue = string | number | boolean | undefined

export interface ReceivedSpan {
  traceId: string
  spanId: string
  /** Empty for a root span. */
  parentSpanId: string
  /** W3C tracestate, as the span carries it on (empty when none). */
  traceState: string
  name: string
  /** OTLP's SpanKind: 2 server, 3 client, 1 internal. */
  kind: number
  attributes: Record<string, AttributeValue>
  /** OTLP's status code: 0 unset, 1 ok, 2 error. */
  status: { code: number, message?: string }
  /** The names of its events (`exception`, …). */
  events: string[]
  /** The exporting process's resource (service.name, …). */
  resource: Record<string, AttributeValue>
}

export interface ExportRequest { path: string, contentType: string, body: Buffer }

interface OtlpKeyValue {
  key: string
  value: { stringValue?: string, intValue?: string | number, doubleValue?: number, boolValue?: boolean }
}
interface OtlpSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  traceState?: string
  name: string
  kind: number
  attributes?: OtlpKeyValue[]
  status?: { code?: number, message?: string }
  events?: Array<{ name: string }>
}
interface OtlpJson {
  resourceSpans?: Array<{
    resource?: { attributes?: OtlpKeyValue[] }
    scopeSpans?: Array<{ spans?: OtlpSpan[] }>
  }>
}

function attributesOf (list: OtlpKeyValue[] = []): Record<string, AttributeValue> {
  return Object.fromEntries(list.map(({ key, value }) => [key,
    value.stringValue ?? (value.intValue !== undefined ? Number(value.intValue) : undefined) ?? value.doubleValue ?? value.boolValue]))
}

/** The spans of one OTLP/HTTP JSON export request. */
export function spansOf (body: Buffer): ReceivedSpan[] {
  const decoded = JSON.parse(body.toString('utf8')) as OtlpJson
  return (decoded.resourceSpans ?? []).flatMap(({ resource, scopeSpans }) => (scopeSpans ?? []).flatMap(({ spans }) =>
    (spans ?? []).map((span) => ({
      traceId: span.traceId,
      spanId: span.spanId,
      parentSpanId: span.parentSpanId ?? '',
      traceState: span.traceState ?? '',
      name: span.name,
      kind: span.kind,
      attributes: attributesOf(span.attributes),
      // OTLP/JSON leaves a default out: no code is 0, unset.
      status: { code: span.status?.code ?? 0, ...(span.status?.message ? { message: span.status.message } : {}) },
      events: (span.events ?? []).map(({ name }) => name),
      resource: attributesOf(resource?.attributes)
    }))))
}

export interface OtlpReceiver {
  /** The endpoint to give as OTEL_EXPORTER_OTLP_ENDPOINT (the exporter adds /v1/traces). */
  endpoint: string
  requests: ExportRequest[]
  /** Every span of the JSON requests received so far. */
  spans: () => ReceivedSpan[]
  /** Waits until `check` holds of the spans received, within `timeoutMs`. */
  until: (what: string, check: (spans: ReceivedSpan[]) => boolean, timeoutMs?: number) => Promise<ReceivedSpan[]>
}

export async function otlpReceiver (t: Test): Promise<OtlpReceiver> {
  const requests: ExportRequest[] = []
  const server = createServer((request, response) => {
    const chunks: Buffer[] = []
    request.on('data', (chunk: Buffer) => chunks.push(chunk))
    request.on('end', () => {
      requests.push({ path: request.url ?? '', contentType: request.headers['content-type'] ?? '', body: Buffer.concat(chunks) })
      // An empty ExportTraceServiceResponse: everything accepted.
      const json = request.headers['content-type']?.startsWith('application/json') === true
      response.writeHead(200, { 'content-type': json ? 'application/json' : 'application/x-protobuf' })
      response.end(json ? '{}' : '')
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.close() })
  const spans = () => requests.filter(({ contentType }) => contentType.startsWith('application/json')).flatMap(({ body }) => spansOf(body))
  return {
    endpoint: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    requests,
    spans,
    async until (what, check, timeoutMs = 20_000) {
      for (const started = Date.now(); !check(spans()); await sleep(50)) {
        if (Date.now() - started > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}: ${JSON.stringify(spans().map(({ name }) => name))}`)
      }
      return spans()
    }
  }
}

/** A W3C traceparent of a caller: a random trace and parent span, sampled. */
export function callerTraceparent (): { traceparent: string, traceId: string, parentSpanId: string } {
  const hex = (bytes: number) => Array.from({ length: bytes }, () => Math.floor(Math.random() * 256).toString(16).padStart(2, '0')).join('')
  const traceId = hex(16)
  const parentSpanId = hex(8)
  return { traceparent: `00-${traceId}-${parentSpanId}-01`, traceId, parentSpanId }
}
